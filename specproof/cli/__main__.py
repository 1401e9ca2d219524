"""``python -m specproof.cli``: the ``specproof`` command."""

from specproof.cli.launch import main

if __name__ == "__main__":  # spawned workers import this module as __mp_main__: they must not run the command
    main()
