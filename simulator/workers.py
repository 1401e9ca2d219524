"""Worker processes that die with the process that started them.

A sweep's worker processes (:func:`simulator.montecarlo.study.run_cells`) compute for minutes at a time and write
nothing themselves: the parent appends their records to the store. If the parent is killed outright (``kill -9``,
the OOM killer), nothing tells a worker busy inside a seed to stop, and it would run on, orphaned, for the rest of
its task and hold a core that a resumed sweep needs. :func:`die_with_parent`, run first in each worker (as a
``ProcessPoolExecutor`` ``initializer``, see :func:`pool_options`), makes the worker die with its parent:

* on Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the worker the moment its parent goes. The
  parent may already have gone before the call, so the worker then checks that its parent is still the process
  that started it, and exits if not;
* on other POSIX systems, a daemon thread polls ``os.getppid()`` every :data:`POLL_SECONDS` and ends the worker
  (``os._exit``) once the parent has changed (reparented to init or a subreaper).

Linux's signal follows the parent *thread* that created the worker: a worker started from a thread that then ends
is killed although its parent process lives on. ``ProcessPoolExecutor`` starts its workers in the thread that
submits the tasks, so submit from a thread that outlives the pool (the main thread, as
:func:`simulator.montecarlo.study.run_cells` does).
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
