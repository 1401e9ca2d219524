"""The ``specproof`` command line, one module per command family (docs/cli/README.md)."""
