"""The whole command line: the group with every command family registered on it (docs/cli/README.md)."""

from __future__ import annotations

from specproof.cli import (certify_commands, fetch_commands, frontier_commands, gate_commands,  # noqa: F401
                           optimum_commands, prove_commands, sample_commands, torch_commands, train_commands)
from specproof.cli.group import main

__all__ = ["main"]
