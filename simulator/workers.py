"""Worker processes that die with the process that started them (docs/limits.md, "Sweeps: one writer, no orphans").

A sweep's workers compute for minutes and write nothing themselves; killed outright, the parent would leave them
running, holding cores a resumed sweep needs. :func:`die_with_parent`, run first in each worker
(:func:`pool_options`), arms ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` on Linux and polls ``os.getppid()`` elsewhere.
Linux's signal follows the parent *thread*: submit to a ``ProcessPoolExecutor`` from a thread that outlives the
pool (the main thread, as :func:`specproof.study.run_cells` does).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

#: ``prctl`` option: the signal this process gets when its parent (thread) ends (linux/prctl.h).
PR_SET_PDEATHSIG = 1
#: Seconds between checks of the parent where the kernel cannot send a signal on its death.
POLL_SECONDS = 0.5


def die_with_parent(parent: int) -> None:
    """Make this process die when process ``parent`` (the one that started it) dies; if it is already gone, exit
    now. Call it first thing in a worker, with the parent's ``os.getpid()`` taken in the parent."""
    if sys.platform.startswith("linux") and _set_parent_death_signal(signal.SIGKILL):
        if os.getppid() != parent:  # the parent died before the signal was armed: nothing will send it
            os._exit(1)
        return
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="die-with-parent", daemon=True).start()


def _set_parent_death_signal(signum: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, signum)`` through the C library Python runs on (``CDLL(None)``: the symbols
    already loaded); False where the call is unavailable or fails."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    os._exit(1)


def initializer(parent: int, then: Callable[..., Any] | None = None, *args: Any) -> None:
    """A ``ProcessPoolExecutor`` initializer: :func:`die_with_parent` (``parent``), then the pool's own
    initializer ``then(*args)`` if it has one."""
    die_with_parent(parent)
    if then is not None:
        then(*args)


def pool_options(then: Callable[..., Any] | None = None, *args: Any) -> dict:
    """``initializer`` and ``initargs`` for a ``ProcessPoolExecutor`` started in this process whose workers die
    with it: ``ProcessPoolExecutor(..., **pool_options())``; ``then(*args)``: an initializer of the pool's own,
    run after."""
    return {"initializer": initializer, "initargs": (os.getpid(), then, *args)}
