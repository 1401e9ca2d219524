"""Limits that keep every run finite: executions per exact computation (:func:`limits`, :func:`computation`) and
wall-clock time (:func:`time_limit`); docs/limits.md."""

from __future__ import annotations

import math
import signal
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterator

from .errors import ExecutionLimitError, InvalidParameterError, TimeLimitError

#: Executions (choice-tree leaves plus completed sequences) one exact computation may enumerate by default: every
#: size the documentation names runs to its end (the largest, TRV's recursion at V = 15 on complete(b = 2, H = 2),
#: counts 800,177). The engine runs 2,500–28,500 a second on one core of the CI machine, Layer Verification
#: lifting K-SEQ the slowest (reports/exact_rate.md): 1 to 13 minutes for this many, within the default timeout.
DEFAULT_MAX_EXECUTIONS = 2_000_000
#: Random choices one enumerated execution may make. An execution that makes more could not be enumerated to the
#: end anyway (each choice with two branches doubles the executions), so this only stops endless loops of rng
#: calls, within a couple of seconds.
MAX_CHOICES_PER_EXECUTION = 100_000
#: The command line's default wall-clock limit per run, in seconds (``--timeout``; 0 disables it).
DEFAULT_TIMEOUT = 1800.0
_PROGRESS_EVERY = 0.25  # seconds between progress reports


@dataclass(frozen=True)
class Limits:
    """The ambient limits: ``max_executions`` (``None``: unlimited) and a progress hook that receives the
    probability mass each outermost computation has finished, as it goes (its total is 1 per computation)."""

    max_executions: int | None = DEFAULT_MAX_EXECUTIONS
    progress: Callable[[float], None] | None = None

    def __post_init__(self) -> None:
        m = self.max_executions
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise InvalidParameterError("max_executions", f"must be a positive integer, got {m!r}")


_LIMITS: ContextVar[Limits] = ContextVar("specproof_limits", default=Limits())
_ACTIVE: ContextVar["Count | None"] = ContextVar("specproof_count", default=None)


@contextmanager
def limits(max_executions: int | None = DEFAULT_MAX_EXECUTIONS,
           progress: Callable[[float], None] | None = None) -> Iterator[Limits]:
    """Set the limits of the exact computations started inside the block.

    An exact computation may enumerate at most ``max_executions`` executions and completed sequences together
    (:class:`~simulator.errors.ExecutionLimitError` past it); one execution makes at most
    :data:`MAX_CHOICES_PER_EXECUTION` random choices.
    """
    token = _LIMITS.set(Limits(max_executions, progress))
    try:
        yield _LIMITS.get()
    finally:
        _LIMITS.reset(token)


def suggested_limit(executions: float) -> int:
    """A ``--max-executions`` to suggest for a run of about ``executions``: a quarter more, rounded up to two
    significant digits."""
    wanted = math.ceil(1.25 * executions)
    step = 10 ** max(len(str(wanted)) - 2, 0)
    return -(-wanted // step) * step


def current_limits() -> Limits:
    return _LIMITS.get()


class Count:
    """The executions of one exact computation, checked against its limit as they are enumerated."""

    def __init__(self, limit: Limits) -> None:
        self.limit = limit
        self.executions = 0  # choice-tree leaves (drafting and verification)
        self.sequences = 0  # completed sequences of the output and target laws
        self.mass = 0.0  # probability mass finished (progress)
        self._reported = 0.0
        self._start = self._last_report = time.monotonic()

    @property
    def total(self) -> int:
        return self.executions + self.sequences

    def _check(self) -> None:
        m = self.limit.max_executions
        if m is not None and self.executions + self.sequences > m:
            seconds = time.monotonic() - self._start
            if 0.01 <= self.mass < 1:  # the mass done sizes the run: its executions, in proportion
                ask = f"to run it to the end pass about --max-executions {suggested_limit(m / self.mass)}"
            else:
                ask = f"pass a larger --max-executions, such as {2 * m}"
            raise ExecutionLimitError(
                "max_executions", f"stopped after {m:,} executions in {seconds:.1f} s ({self.executions:,} "
                                  f"choice-tree leaves, {self.sequences:,} completed sequences; {self.mass:.1%} of "
                                  f"the probability mass done): {ask} (0 for none), or reduce the model or tree")

    def execution(self, count: int = 1) -> None:
        """``count`` more executions (a recursion counts the elementary steps of its sub-problems in bulk)."""
        self.executions += count
        self._check()

    def sequence(self) -> None:
        self.sequences += 1
        self._check()

    def advance(self, mass: float) -> None:
        """``mass`` more of the computation's probability is done (reported at most every quarter second)."""
        self.mass += mass
        if time.monotonic() - self._last_report > _PROGRESS_EVERY:
            self.report()

    def report(self) -> None:
        """Hand the progress hook the mass done since its last report."""
        hook = self.limit.progress
        if hook is not None and self.mass > self._reported:
            hook(self.mass - self._reported)
        self._reported, self._last_report = self.mass, time.monotonic()


@dataclass
class Scope:
    """A computation's view of its count: ``outermost`` is False for a computation nested in another, whose
    progress is the outer one's to report."""

    count: Count
    outermost: bool

    def execution(self) -> None:
        self.count.execution()

    def sequence(self) -> None:
        self.count.sequence()

    def advance(self, mass: float) -> None:
        if self.outermost:
            self.count.advance(mass)


@contextmanager
def computation() -> Iterator[Scope]:
    """One exact computation: a fresh :class:`Count` under the ambient limits, or the enclosing one's."""
    active = _ACTIVE.get()
    if active is not None:
        yield Scope(active, outermost=False)
        return
    count = Count(_LIMITS.get())
    token = _ACTIVE.set(count)
    try:
        yield Scope(count, outermost=True)
        count.report()  # the rest of the mass, at the end
    finally:
        _ACTIVE.reset(token)


def progress_note() -> str:
    """How far the exact computation in progress got, for a message ("" when none is running)."""
    count = _ACTIVE.get()
    if count is None:
        return ""
    return (f"{count.executions:,} executions and {count.sequences:,} completed sequences enumerated, "
            f"{count.mass:.1%} of the probability mass done")


def active_count() -> Count:
    """The count of the computation in progress, or a fresh one (for an engine called on its own)."""
    return _ACTIVE.get() or Count(_LIMITS.get())


@contextmanager
def time_limit(seconds: float | None, describe: Callable[[], str] | None = None) -> Iterator[None]:
    """Raise :class:`TimeLimitError` in the block after ``seconds`` of wall-clock time (``None``, 0 or ``inf``: no
    limit).
    ``describe()`` says how far the run got, for the message. Uses ``SIGALRM``, so it acts in the main thread of a
    POSIX process only; elsewhere it does nothing. The alarm stops even a plugin that never returns."""
    if seconds is not None and (isinstance(seconds, bool) or not seconds >= 0):
        raise InvalidParameterError("timeout", f"must be a number of seconds ≥ 0, got {seconds!r}")
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not seconds or math.isinf(seconds) or not usable:
        yield
        return

    def fire(signum, frame):
        where = f" ({describe()})" if describe is not None else ""
        raise TimeLimitError("timeout", f"the run passed its wall-clock limit of {seconds:g} s{where}: pass "
                                        f"--timeout {2 * seconds:g} or more (0 for none), or make the run smaller")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def until(deadline: float) -> ContextManager[None]:
    """:func:`time_limit` up to ``deadline`` (a ``time.monotonic()`` instant; ``inf``: none); one already past
    fires at once."""
    return time_limit(max(deadline - time.monotonic(), 1e-3))
