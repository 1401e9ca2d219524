"""What a certificate's rule reached on its instance (:class:`Reach`; docs/certificates.md#what-the-verdict-could-see):
a LOSSLESS verdict weighs only the decisions taken with positive probability."""

from __future__ import annotations

import contextlib
import dis
import functools
import os
import sys
import threading
import types
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, TypeVar

from simulator.numeric import Number, human_number
from simulator.usercode import plugin_codes, user_code_of
from simulator.verifiers.registry import Verifier, is_builtin

T = TypeVar("T")
#: what ``p_inner`` and ``p_leaf`` say where the law came from a recursion, whose outcomes do not say how they ended
NOT_BY_RECURSION = "not computed by the recursion"


@dataclass(frozen=True)
class LineCoverage:
    """The source lines of a plugin (``(file, line)``) and those of them that ran with positive probability."""

    lines: frozenset[tuple[str, int]]
    executed: frozenset[tuple[str, int]]

    @property
    def share(self) -> float:
        return len(self.executed) / len(self.lines) if self.lines else 1.0

    def never(self) -> dict[str, list[int]]:
        """The lines never executed, by file."""
        out: dict[str, list[int]] = {}
        for file, line in sorted(self.lines - self.executed):
            out.setdefault(file, []).append(line)
        return out

    def text(self) -> str:
        never = "; ".join(f"{_shown_path(file)} line{'s' if len(lines) > 1 else ''} {_ranges(lines)}"
                          for file, lines in self.never().items())
        return (f"plugin lines executed with positive probability: {len(self.executed)} of {len(self.lines)} "
                f"({self.share:.0%})" + (f"; never executed: {never}" if never else ""))

    def to_json(self) -> dict:
        return {"lines": len(self.lines), "executed": len(self.executed), "share": self.share,
                "never_executed": self.never()}


@dataclass(frozen=True)
class Reach:
    """How often the rule took each kind of decision on this instance, and what a probability of 0 hides.

    ``p_inner`` and ``p_leaf`` are ``None`` where the law does not say (a recursion's); ``lines`` is ``None`` for a
    built-in rule or a subject that is not a plugin function.

    Where no draft token is ever accepted, an acceptance bug cannot change the law. So it holds ``P(τ ≥ 1)``, the
    probability that the round ended at an inner node (a correction draw) and at a leaf (a bonus draw), the bug
    classes a probability of 0 hides, and for a plugin the share of its source lines that ran in executions of positive
    probability (:class:`LineTracer`, ``sys.settrace`` on the plugin's code only).
    """

    p_accept: Number
    p_inner: Number | None
    p_leaf: Number | None
    lines: LineCoverage | None = None

    def unseen(self) -> list[str]:
        """One sentence per decision kind of probability 0: which bugs could not show there."""
        out = []
        if self.p_accept == 0:
            out.append("no draft token was accepted: acceptance bugs, and a residual replaced by q, could not show")
        if self.p_inner == 0:
            out.append("the correction draw never ran (every round reached a leaf): a bug in the residual or "
                       "correction distribution could not show")
        if self.p_leaf == 0:
            out.append("the bonus draw never ran (no round reached a leaf): a bug in the bonus token could not show")
        return out

    def lines_text(self, indent: str = "  ") -> list[str]:
        """The printed lines: the three probabilities, the plugin's line coverage, then each warning."""
        def shown(value: Number | None) -> str:
            return NOT_BY_RECURSION if value is None else human_number(value)
        out = [f"{indent}P(τ ≥ 1: a draft token accepted) = {shown(self.p_accept)}",
               f"{indent}P(output node inner: a correction draw) = {shown(self.p_inner)}; P(output node a leaf: a "
               f"bonus draw) = {shown(self.p_leaf)}"]
        if self.lines is not None:
            out.append(f"{indent}{self.lines.text()}")
        out += [f"{indent}warning: {line}" for line in self.unseen()]
        return out

    def to_json(self, num: Callable[[Number], object]) -> dict:
        """``p_inner`` and ``p_leaf`` are ``null`` where not computed, ``note`` says why."""
        shown = lambda v: None if v is None else num(v)  # noqa: E731
        return {"p_accept": shown(self.p_accept), "p_inner": shown(self.p_inner), "p_leaf": shown(self.p_leaf),
                "note": f"p_inner, p_leaf: {NOT_BY_RECURSION}" if self.p_inner is None else "",
                "unseen": self.unseen(), "plugin_lines": None if self.lines is None else self.lines.to_json()}


def reach_of(law, tracer: "LineTracer | None") -> Reach:
    """The :class:`Reach` of a law (:class:`~exact.law.OutputLaw` or a recursion's
    :class:`~exact.recursions.token_law.ArrayLaw`) and the tracer that watched it being computed."""
    profile = law.profile()
    ended = law.ended() if hasattr(law, "ended") else None
    zero = law.total() * 0
    inner, leaf = (None, None) if ended is None else ended
    return Reach(profile[0] if profile else zero, inner, leaf, None if tracer is None else tracer.coverage())


class LineTracer:
    """Records which of a plugin's lines run, keeping only those of executions of positive probability.

    The trace function is installed only while the plugin runs (:meth:`wrap`, :meth:`tracing`), and no longer
    once every line has run: under ``sys.settrace`` every frame of the thread runs slower (about 2.5 times for
    a plugin's enumeration), so the enumeration around the plugin is left untraced. Lines run since the last
    execution ended are pending: :meth:`weighed` keeps them when the execution's probability is positive and
    drops them otherwise; :meth:`coverage` keeps what ran after the last
    execution (a plugin's completion rule, run only for outcomes of positive probability). Only frames of the
    plugin's own code get a line tracer; every other event goes to the trace function installed before (a
    debugger, a coverage tool), so the two coexist, and a profile hook (``sys.setprofile``) is untouched."""

    def __init__(self, codes: frozenset[types.CodeType]) -> None:
        self._codes = codes
        self._lines = frozenset((c.co_filename, line) for c in codes for line in executable_lines(c))
        self._pending: set[tuple[str, int]] = set()
        self._executed: set[tuple[str, int]] = set()
        self._all_seen = False  # every line executed with positive probability: tracing stops
        self._previous = None

    @contextlib.contextmanager
    def tracing(self) -> Iterator[None]:
        """Inside the block, the plugin's lines are recorded (a nested block changes nothing)."""
        previous = sys.gettrace()
        if previous == self._call:
            yield
            return
        self._previous = previous
        sys.settrace(self._call)
        try:
            yield
        finally:
            sys.settrace(previous)

    def wrap(self, fn: Verifier) -> Verifier:
        """``fn`` run under :meth:`tracing` while this tracer is :meth:`active`, with its name
        (``functools.wraps``). The wrapper is the same object for the same ``fn`` (:func:`_traced`), so what is
        kept per plugin (its scan for random sources) is kept once, not once per certificate."""
        return _traced(fn)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Inside the block, :meth:`wrap`'s wrappers trace into this tracer."""
        previous = getattr(_ACTIVE, "tracer", None)
        _ACTIVE.tracer = self
        try:
            yield
        finally:
            _ACTIVE.tracer = previous

    def completes(self, completions: Iterable[object]) -> bool:
        """Whether a completion rule among ``completions`` runs the plugin's code (its ``next_row``)."""
        return any(user_code_of(getattr(type(c), "next_row", None)) in self._codes for c in completions)

    def _call(self, frame, event, arg):
        theirs = self._previous(frame, event, arg) if self._previous is not None else None
        if frame.f_code not in self._codes:
            return theirs
        pending, file = self._pending, frame.f_code.co_filename

        def local(frame, event, arg):
            nonlocal theirs
            if event == "line":
                pending.add((file, frame.f_lineno))
            if theirs is not None:
                theirs = theirs(frame, event, arg)
            return local
        return local

    def weighed(self, outcomes: Iterable[tuple[T, Number]]) -> Iterator[tuple[T, Number]]:
        """``outcomes`` passed through; each execution's lines are kept when its probability is positive."""
        for outcome, prob in outcomes:
            if prob > 0 and self._pending:
                self._executed |= self._pending
                self._all_seen = self._executed >= self._lines
            self._pending.clear()
            yield outcome, prob

    def coverage(self) -> LineCoverage:
        self._executed |= self._pending
        self._pending.clear()
        return LineCoverage(self._lines, frozenset(self._executed & self._lines))


_ACTIVE = threading.local()  # the tracer a wrapper traces into (LineTracer.active)


#: the wrapper of each verifier wrapped so far, by identity: a kernel object need not be hashable (the verifier
#: is kept beside its wrapper, so its id cannot be reused while the entry stands); the oldest go past 64
_WRAPPERS: dict[int, tuple[Verifier, Verifier]] = {}


def _traced(fn: Verifier) -> Verifier:
    kept = _WRAPPERS.get(id(fn))
    if kept is not None and kept[0] is fn:
        return kept[1]

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        tracer = getattr(_ACTIVE, "tracer", None)
        if tracer is None or tracer._all_seen:  # nothing to learn: the plugin runs at full speed
            return fn(*args, **kwargs)
        with tracer.tracing():
            return fn(*args, **kwargs)
    if len(_WRAPPERS) >= 64:
        del _WRAPPERS[next(iter(_WRAPPERS))]
    _WRAPPERS[id(fn)] = (fn, traced)
    return traced


def plugin_tracer(fn: Verifier) -> LineTracer | None:
    """A :class:`LineTracer` on a plugin's code, or ``None`` for a built-in rule or a subject with no Python code of
    its own (a torch kernel goes through specproof's adapter)."""
    if is_builtin(fn):
        return None
    codes = plugin_codes(fn)
    return LineTracer(codes) if codes else None


def executable_lines(code: types.CodeType) -> set[int]:
    """The lines of ``code``'s body that a line tracer can report: the lines of its instructions after the
    prologue (up to ``RESUME``: the ``def`` line, a generator's set-up), nested code excluded."""
    lines, started = set(), False
    for ins in dis.get_instructions(code):
        if started and ins.positions is not None and ins.positions.lineno is not None:
            lines.add(ins.positions.lineno)
        started = started or ins.opname == "RESUME"
    return lines


def _shown_path(file: str) -> str:
    """A file under the working directory relative to it, any other as given."""
    relative = os.path.relpath(file)
    return file if relative.startswith("..") else relative


def _ranges(lines: list[int]) -> str:
    """``[3, 4, 5, 9]`` as ``3-5, 9``."""
    runs: list[list[int]] = []
    for line in lines:
        if runs and line == runs[-1][1] + 1:
            runs[-1][1] = line
        else:
            runs.append([line, line])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
