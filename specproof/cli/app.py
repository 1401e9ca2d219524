"""The whole command line: the group with every command family registered on it (docs/cli/README.md)."""

from __future__ import annotations

from specproof.cli import (certify_commands, fetch_commands, gate_commands, optimum_commands,  # noqa: F401
                           prove_commands, sample_commands, torch_commands, train_commands)
from specproof.cli.group import main

__all__ = ["main"]
