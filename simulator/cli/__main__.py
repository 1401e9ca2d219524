"""``python -m simulator.cli``: the ``specproof`` command."""

from simulator.cli.main import main

main()
