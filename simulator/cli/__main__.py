"""``python -m simulator.cli``: the ``specproof`` command."""

from simulator.cli.launch import main

main()
