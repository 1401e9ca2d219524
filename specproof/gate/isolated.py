"""Tasks in processes of their own, each under a time limit (:func:`run_isolated`): the gate's checks
(docs/gate.md, "Time limits")."""

from __future__ import annotations

import os
import pickle
import struct
import time
import traceback
from dataclasses import dataclass
from typing import Callable

from simulator.workers import Child, Ended, fork_child, wait_children

_LENGTH = struct.Struct("<Q")
#: seconds between the parent's checks of its children's time limits while none writes
_TICK = 0.5


@dataclass(frozen=True)
class Task:
    """``run(send)`` runs in the child and returns its (picklable) result; ``send(kind, value)`` relays a message
    to ``on_message(kind, value)`` in this process."""

    run: Callable[[Callable[[str, object], None]], object]
    on_message: Callable[[str, object], None]


@dataclass(frozen=True)
class Stopped:
    """A task without a result: stopped at its time limit of ``seconds`` (``ended`` is ``None``), or ended by
    itself without one, as ``ended`` says."""

    seconds: float | None
    ended: Ended | None

    def describe(self, what: str) -> str:
        """Why ``what`` (``"the check"``) has no result, as a sentence."""
        if self.ended is None:
            return (f"{what} passed its time limit of {self.seconds:g} s and was stopped (a plugin looping, in C "
                    "code or elsewhere?)")
        return f"{what}'s process ended without a verdict: {self.ended.describe()}"


def run_isolated(tasks: list[Task], processes: int, seconds: float | None) -> list[object]:
    """Each task's result, or a :class:`Stopped`, in the order of ``tasks``; ``seconds``: each task's time limit
    (``None``: none). An exception the task raised (a bug, not user code's: user code's errors are the task's to
    report) is raised here, the other children killed.

    A check runs user code: in the gate's own process, a plugin looping inside C code would hang the whole gate, and
    one calling ``os._exit(0)`` would end it with no verdict. So each task runs in a forked child
    (:func:`simulator.workers.fork_child`: it dies with this process, and it and everything it starts are killed
    together), up to ``processes`` at once. The child relays messages as it goes (``send(kind, value)``, pickled over
    a pipe) and its result last; a child past its time limit is killed, and one that ended without a result is
    reported with how it ended. Each task has its own limit, so the others still run.
    """
    results: list[object] = [None] * len(tasks)
    running: dict[int, tuple[Child, float]] = {}
    waiting = list(range(len(tasks)))
    try:
        while waiting or running:
            while waiting and len(running) < max(processes, 1):
                index = waiting.pop(0)
                running[index] = (_start(tasks[index]), time.monotonic())
            timeouts = [_TICK] + ([started + seconds - time.monotonic() for _, started in running.values()]
                                  if seconds else [])
            wait_children([child for child, _ in running.values()], min(timeouts))
            for index, (child, started) in list(running.items()):
                _relay(child, tasks[index], results, index)
                ended = child.ended()
                late = seconds is not None and time.monotonic() >= started + seconds
                if ended is None and not late:
                    continue
                del running[index]
                ended = child.reap()
                _relay(child, tasks[index], results, index)
                if not isinstance(results[index], _Result):
                    results[index] = Stopped(seconds, None if late and ended.signal is not None else ended)
    finally:
        for child, _ in running.values():
            child.reap()
    return [r.value if isinstance(r, _Result) else r for r in results]


class ChildTraceback(Exception):
    """The traceback of an exception a check's process raised, as that process formatted it: the cause of the
    exception raised again here, so a bug of specproof in a check (exit 3) shows where it happened."""


@dataclass(frozen=True)
class _Result:
    value: object


def _start(task: Task) -> Child:
    child, fd = fork_child()
    if child is not None:
        return child
    status = 0
    try:  # the child: never returns to the caller
        def send(kind: str, value: object) -> None:
            _write(fd, pickle.dumps((kind, value)))

        send("result", task.run(send))
    except BaseException as err:  # noqa: BLE001 — relayed to the parent, which raises it
        status = 1
        where = "".join(traceback.format_exception(err))  # a pickled exception loses its traceback
        try:
            _write(fd, pickle.dumps(("raised", (err, where))))
        except Exception:  # noqa: BLE001 — an exception that does not pickle: its traceback instead
            _write(fd, pickle.dumps(("raised", (RuntimeError(where), where))))
    finally:
        os._exit(status)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _relay(child: Child, task: Task, results: list, index: int) -> None:
    """Hand each whole message the child has written to the task (its result to ``results``)."""
    child.read()
    buffer = child.buffer
    while len(buffer) >= _LENGTH.size:
        (length,) = _LENGTH.unpack_from(buffer)
        if len(buffer) < _LENGTH.size + length:
            return
        kind, value = pickle.loads(bytes(buffer[_LENGTH.size:_LENGTH.size + length]))
        del buffer[:_LENGTH.size + length]
        if kind == "result":
            results[index] = _Result(value)
        elif kind == "raised":
            err, where = value
            raise err from ChildTraceback(where)
        else:
            task.on_message(kind, value)
