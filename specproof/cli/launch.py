"""The ``specproof`` executable. SIGINT and SIGTERM exit 130 from its first instant, while the command line is
still being imported; once a command runs, :class:`specproof.cli.group.SpecproofGroup` takes them over
(docs/cli/README.md#exit-codes)."""

from __future__ import annotations

import signal
import sys


def main() -> None:
    def stop(signum: int, frame) -> None:
        sys.stderr.write("interrupted (SIGINT or SIGTERM): no verdict\n")
        raise SystemExit(130)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    from specproof.cli.app import main as command_line

    command_line()
