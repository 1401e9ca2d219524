"""Exit 0 only with a verdict in hand: each command runs in a child process under a supervising parent
(:func:`supervise`; docs/cli/README.md#exit-codes, docs/limits.md)."""

from __future__ import annotations

import math
import os
import signal
import struct
import sys
import time

import click

from simulator.usercode import INTERRUPTED_EXIT
from simulator.workers import Child, fork_child, wait_children

#: Seconds past a command's time limit before the parent kills it: the in-process limit fires first and says how
#: far the run got; only user code that keeps it from firing meets the kill.
GRACE_SECONDS = 1.0
#: Seconds a child may take to stop after SIGINT or SIGTERM is forwarded, before it is killed.
INTERRUPT_SECONDS = 5.0
#: Commands that run no user code, and so run unsupervised.
UNSUPERVISED = frozenset({"list", "fetch"})
#: The exit code of a run without a verdict (docs/cli/README.md#exit-codes).
NO_VERDICT_EXIT = 2
_CODE = struct.Struct("<i")

_enabled = False
_delivery: int | None = None  # in a supervised child: the pipe its exit code goes to


def enable() -> None:
    """Supervise the commands invoked from now on (the ``specproof`` executable calls it first)."""
    global _enabled
    _enabled = True


def deliver(code: object) -> None:
    """In a supervised child, tell the parent the command's exit code (``SystemExit.code``), once its output is
    flushed; elsewhere nothing."""
    global _delivery
    if _delivery is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    status = 0 if code is None else code if isinstance(code, int) else 1
    fd, _delivery = _delivery, None
    os.write(fd, _CODE.pack(status))
    os.close(fd)


class SupervisedCommand(click.Command):
    """A command that, under the ``specproof`` executable, runs in a supervised child (this module)."""

    def invoke(self, ctx: click.Context):
        if not _enabled or _delivery is not None or ctx.info_name in UNSUPERVISED:
            return super().invoke(ctx)
        return supervise(ctx, lambda: super(SupervisedCommand, self).invoke(ctx))


def supervise(ctx: click.Context, run):
    """Run ``run()`` (the command) in a child and exit as the child's verdict says; in the child, return what ``run()``
    returns (its exit reaches :func:`deliver`).

    Why a child: user code (a plugin, a kernel, an adapter) can end its process in ways no handler catches
    (``os._exit(0)``, a crash inside a C extension, the OOM killer), and can loop inside C code, where ``SIGALRM``
    (the in-process ``--timeout``) is never handled, or cancel that alarm. The child delivers its exit code over a
    pipe after its output is flushed. The parent

    - exits with the code delivered; a child that ended without delivering one is exit 2, naming the user code and
      how the child ended (its exit status, or the signal that killed it);
    - enforces the command's time limit from outside: past it by :data:`GRACE_SECONDS` (the in-process limit's own
      message comes first when it can), it kills the child and everything it started, exit 2;
    - forwards SIGINT and SIGTERM to the child, and kills it if it has not ended :data:`INTERRUPT_SECONDS` later (at
      once on a second signal), exit 130.

    The child inherits standard output and error, so output streams as it is written. Only the ``specproof``
    executable supervises (:func:`enable`); a command invoked in-process (click's test runner) runs as it is.
    """
    global _delivery
    child, fd = fork_child()
    if child is None:
        _delivery = fd
        return run()
    limit, field = time_limit(ctx)
    code = _watch(child, limit, field, user_code(ctx))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)  # the parent ran no command: nothing to tear down, and a second interpreter teardown costs


def time_limit(ctx: click.Context) -> tuple[float | None, str]:
    """The command's wall-clock limit in seconds (``None``: none) and the option that sets it: ``--timeout``,
    or for ``hunt`` ``--time-limit`` plus ``--shrink-time`` (the search, then the shrinking of what it found).
    A value the command will refuse (negative, not a number) gives none here: the command's refusal stands."""
    params = ctx.params
    if "timeout" in params:
        values, field = [params["timeout"]], "timeout"
    elif "time_limit" in params:
        values, field = [params["time_limit"], params.get("shrink_time", 0.0)], "time_limit"
    else:
        return None, ""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf for v in values):
        return None, field
    if values[0] == 0:
        return None, field  # 0: no limit
    return float(sum(values)), field


def user_code(ctx: click.Context) -> str:
    """The user code a command was given, as its message names it (``verifier mymod:rule``), or the command."""
    params = ctx.params
    named = [f"{option} {params[key]}" for key, option in (("kernel", "kernel"), ("verifier", "verifier"),
                                                            ("case_path", "case"), ("config_path", "config"))
             if params.get(key)]
    adapter = params.get("adapter")
    if isinstance(adapter, str) and ":" in adapter:
        named.append(f"adapter {adapter}")
    return ", ".join(named) or f"specproof {ctx.info_name}"


def _watch(child: Child, limit: float | None, field: str, what: str) -> int:
    """Wait for ``child`` under ``limit``, forwarding SIGINT and SIGTERM; its exit code, or the one this
    module gives a child without a verdict (the message written here)."""
    start = time.monotonic()
    signalled: list[float] = []

    def forward(signum: int, frame) -> None:
        signalled.append(time.monotonic())
        if len(signalled) > 1:
            child.kill()  # a second Ctrl-C: at once
        else:
            child.send(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    killed_at_limit = False
    try:
        while child.ended() is None:
            now = time.monotonic()
            waits = [0.5]
            if limit is not None:
                if now >= start + limit + GRACE_SECONDS:
                    killed_at_limit = True
                    child.kill()
                    break
                waits.append(start + limit + GRACE_SECONDS - now)
            if signalled:
                if now >= signalled[0] + INTERRUPT_SECONDS:
                    child.kill()
                    break
                waits.append(signalled[0] + INTERRUPT_SECONDS - now)
            wait_children([child], min(waits))
            child.read()
        ended = child.reap()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    delivered = bytes(child.buffer[:_CODE.size])
    if len(delivered) == _CODE.size:
        return _CODE.unpack(delivered)[0]
    if signalled:
        click.echo("interrupted (SIGINT or SIGTERM): no verdict", err=True)
        return INTERRUPTED_EXIT
    if killed_at_limit:
        option = "--time-limit and --shrink-time" if field == "time_limit" else "--timeout"
        click.echo(f"error: {field}: the run passed its wall-clock limit of {limit:g} s and did not stop by itself "
                   f"(user code looping inside C code, or blocking SIGALRM?): {what} and every process it started "
                   f"were killed; no verdict: raise {option}, or make the run smaller", err=True)
        return NO_VERDICT_EXIT
    click.echo(f"error: {what}: the process running it ended without a verdict: {ended.describe()}", err=True)
    return NO_VERDICT_EXIT

