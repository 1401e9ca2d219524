"""Verifier plugins that end or hang their process where no handler can catch them, and one that behaves: the
fixtures of tests/test_supervision.py (docs/cli/README.md#exit-codes: exit 0 only with a verdict in hand)."""

from __future__ import annotations

import os
import signal

from simulator.verifiers.registry import load_verifier

_, _sps = load_verifier("tv-sps")


def exits(tree, p, q, rng):
    """Ends the process with status 0 and no verdict: no exception, no ``atexit``."""
    os._exit(0)


def killed(tree, p, q, rng):
    """Dies as the OOM killer would kill it."""
    os.kill(os.getpid(), signal.SIGKILL)


def loops_in_c(tree, p, q, rng):
    """Loops inside one C call, where a Python signal handler (``SIGALRM``, the in-process ``--timeout``) never
    runs."""
    return sum(range(10**13))


def cancels_alarm(tree, p, q, rng):
    """Cancels the in-process time limit's alarm, then loops."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    while True:
        pass


def returns(tree, p, q, rng):
    """SpS, returned as a plugin should: the negative control."""
    return _sps(tree, p, q, rng)
