"""Child and worker processes that die with the process that started them (docs/limits.md, "Sweeps: one writer,
no orphans"): :func:`pool_options` for a sweep's pool, :func:`fork_child` for a supervised child."""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

#: ``prctl`` option: the signal this process gets when its parent (thread) ends (linux/prctl.h).
PR_SET_PDEATHSIG = 1
#: Seconds between checks of the parent where the kernel cannot send a signal on its death.
POLL_SECONDS = 0.5


def die_with_parent(parent: int) -> None:
    """Make this process die when process ``parent`` (the one that started it) dies; if it is already gone, exit
    now. Call it first thing in a worker, with the parent's ``os.getpid()`` taken in the parent.

    A sweep's workers compute for minutes and write nothing themselves; were the parent killed outright, they would
    keep the cores a resumed sweep needs. On Linux this arms ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, elsewhere it polls
    ``os.getppid()``. Linux's signal follows the parent *thread*: submit to a ``ProcessPoolExecutor`` from a thread
    that outlives the pool (the main thread, as :func:`specproof.study.run_cells` does).
    """
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


# ---- supervised children: user code in a process of its own, watched from outside ------------------------------
#: hints for how a child that left no verdict was killed
_SIGNAL_HINTS = {signal.SIGKILL: " (the OOM killer, or kill -9?)", signal.SIGSEGV: " (a crash in C code?)",
                 signal.SIGABRT: " (an abort in C code?)", signal.SIGBUS: " (a crash in C code?)"}


@dataclass(frozen=True)
class Ended:
    """How a child process ended: its exit ``code``, or the ``signal`` that killed it."""

    code: int | None = None
    signal: int | None = None

    def describe(self) -> str:
        """``it exited with status 0 (...)`` or ``killed by SIGKILL (the OOM killer, or kill -9?)``."""
        if self.signal is not None:
            name = signal.Signals(self.signal).name if self.signal in signal.Signals._value2member_map_ \
                else f"signal {self.signal}"
            return f"killed by {name}{_SIGNAL_HINTS.get(self.signal, '')}"
        hint = " (os._exit() in user code?)" if self.code == 0 else ""
        return f"it exited with status {self.code}{hint}"


class Child:
    """A forked child in a process group of its own (so that it and every process it starts can be killed
    together) that dies with this process (:func:`die_with_parent`), and the read end of a pipe it writes its
    messages to. :func:`fork_child` makes one."""

    def __init__(self, pid: int, messages: int) -> None:
        self.pid = pid
        self.messages = messages
        os.set_blocking(messages, False)
        try:
            self.pidfd: int | None = os.pidfd_open(pid)  # readable once the child ends (Linux 5.3+)
        except (AttributeError, OSError):
            self.pidfd = None
        self.buffer = bytearray()

    def fds(self) -> list[int]:
        """What :func:`wait_children` selects on: the pipe, and the child's pidfd where there is one (none once
        reaped)."""
        return [fd for fd in (self.messages, self.pidfd) if fd is not None and fd >= 0]

    def read(self) -> bytes:
        """Append what the child wrote since the last call to :attr:`buffer`; the bytes read."""
        chunks = []
        while self.messages >= 0:
            try:
                chunk = os.read(self.messages, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
        self.buffer += data
        return data

    def ended(self) -> Ended | None:
        """How the child ended, or ``None`` while it runs; it stays a zombie (its pid, and so its process group's
        id, cannot be reused) until :meth:`reap`."""
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return Ended(code=None)
        if info is None or info.si_pid == 0:
            return None
        if info.si_code == os.CLD_EXITED:
            return Ended(code=info.si_status)
        return Ended(signal=info.si_status)

    def send(self, signum: int) -> None:
        """Send ``signum`` to the child (not to the processes it started)."""
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL the child and every process of its group (its workers, anything user code started)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            self.send(signal.SIGKILL)

    def reap(self) -> Ended:
        """Kill what is left of the child's group, wait for the child and close the pipes; how it ended."""
        self.kill()
        _, status = os.waitpid(self.pid, 0)
        self.read()
        for fd in self.fds():
            os.close(fd)
        self.messages, self.pidfd = -1, None
        if os.WIFSIGNALED(status):
            return Ended(signal=os.WTERMSIG(status))
        return Ended(code=os.waitstatus_to_exitcode(status))


def fork_child() -> tuple[Child | None, int]:
    """Fork a supervised child: ``(None, fd)`` in the child, which writes its messages to ``fd``;
    ``(Child, -1)`` in the parent. Buffered output is flushed first, so that the child does not repeat it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.setpgid(0, 0)
        die_with_parent(parent)
        return None, write_end
    os.close(write_end)
    try:
        os.setpgid(pid, pid)  # also here: whichever of the two runs first, the group exists before a kill
    except OSError:
        pass  # the child did it first, or has already ended
    return Child(pid, read_end), -1


def wait_children(children: list[Child], seconds: float) -> None:
    """Wait up to ``seconds`` for a message or the end of any of ``children`` (sooner where a signal handler
    ran); without pidfds, the ends are polled every :data:`CHILD_POLL_SECONDS`."""
    fds = [fd for child in children for fd in child.fds()]
    if any(child.pidfd is None for child in children):
        seconds = min(seconds, CHILD_POLL_SECONDS)
    if fds:
        select.select(fds, [], [], max(seconds, 0.0))
    else:
        time.sleep(max(seconds, 0.0))


#: Seconds between checks of a child's end where there is no pidfd to select on.
CHILD_POLL_SECONDS = 0.05


def stop_pool(pool: Any, seconds: float = 5.0) -> None:
    """Stop a ``ProcessPoolExecutor`` at once, for a run that is being interrupted: its queued calls cancelled and
    its workers killed, each waited for up to ``seconds`` (``shutdown`` alone would let the workers finish every
    queued call first, for minutes). Python 3.14's ``terminate_workers`` where there is one; before it, the
    executor's own table of worker processes, its only handle on them."""
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate(signal.SIGKILL)
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()
    for process in processes:
        process.join(seconds)
