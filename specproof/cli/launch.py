"""The ``specproof`` executable. SIGINT and SIGTERM exit 130 from its first instant, while the command line is
still being imported; once a command runs, :class:`specproof.cli.group.SpecproofGroup` takes them over
(docs/cli/README.md#exit-codes). Each command runs supervised: in a child process, whose exit code is
delivered to the parent as it exits (:mod:`specproof.cli.supervisor`)."""

from __future__ import annotations

import signal
import sys


def main() -> None:
    def stop(signum: int, frame) -> None:
        sys.stderr.write("interrupted (SIGINT or SIGTERM): no verdict\n")
        raise SystemExit(130)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    from specproof.cli import supervisor
    from specproof.cli.app import main as command_line

    supervisor.enable()
    try:
        command_line()
    except SystemExit as done:  # in a supervised child: the exit code, told to the parent
        supervisor.deliver(done.code)
        raise
    supervisor.deliver(0)
