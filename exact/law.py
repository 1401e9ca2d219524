"""Output laws (docs/notation.md): ``L(path, y)``, its completion to ``Σ^(H+1)``, and its distance to ``q^(H+1)``.

An :class:`OutputLaw` holds the probability of every round outcome ``(path, y, completion rule)``.
Completion extends ``path + (y,)`` to ``H+1`` tokens with the outcome's completion rule (the target ``q``,
or greedy BV's modified target); a verifier is lossless iff the completed law equals the target's joint.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable

from simulator.completion import REFERENCES, TARGET
from simulator.limits import Count, active_count
from simulator.models import ModelView
from simulator.numeric import Number, rational
from simulator.speculation import RoundOutcome

Sequence_ = tuple[int, ...]


@dataclass(frozen=True)
class Counterexample:
    """The completed sequence with the largest ``|L(s) − q^(H+1)(s)|`` (ties: the smallest sequence)."""

    sequence: Sequence_
    verifier_prob: Number
    target_prob: Number


class OutputLaw:
    """The law of one round's output, and its completion to ``H + 1`` tokens against a model view.

    Parameters
    ----------
    outcomes : iterable of (RoundOutcome, probability)
        The round's executions, as :func:`exact.enumeration.enumerate_outcomes` yields them; equal outcomes are
        summed as they stream in (memory grows with the distinct outcomes, not the executions).
    height : int
        ``H``: completed sequences have ``H + 1`` tokens.
    view : ModelView or None
        The model completion reads (``None`` for a bare tree: then only the round's own law is available).
    exact : bool
        Whether probabilities are exact rationals.
    """

    def __init__(self, outcomes: Iterable[tuple[RoundOutcome, Number]], height: int,
                 view: ModelView | None, exact: bool) -> None:
        self.exact = exact
        self.height = height
        self.view = view
        zero: Number = rational(0) if exact else 0.0
        self._zero = zero
        # Aggregated as the executions stream in: memory grows with the distinct outcomes, not the executions.
        self.outcomes: dict[RoundOutcome, Number] = {}
        self.executions = 0  # executions the enumerator ran (choice-tree leaves)
        # P(the round ended at an inner node), P(at a leaf), tallied per execution (the outcome's key merges them)
        self._ended: dict[bool, Number] | None = {True: zero, False: zero}
        for outcome, prob in outcomes:
            self.outcomes[outcome] = self.outcomes.get(outcome, zero) + prob
            self.executions += 1
            if outcome.inner is None:
                self._ended = None
            elif self._ended is not None:
                self._ended[outcome.inner] += prob

    # ---- the round's own law -------------------------------------------------------------------------
    def law(self) -> dict[tuple[Sequence_, int], Number]:
        """``L(path, y)``, summed over completion rules."""
        out: dict[tuple[Sequence_, int], Number] = {}
        for o, prob in self.outcomes.items():
            key = (o.path, o.y)
            out[key] = out.get(key, self._zero) + prob
        return dict(sorted(out.items()))

    def total(self) -> Number:
        return sum(self.outcomes.values(), self._zero)

    def expected_accepted(self) -> Number:
        """``E[τ]``: the expected number of accepted draft tokens."""
        return sum((prob * o.accepted for o, prob in self.outcomes.items()), self._zero)

    def ended(self) -> tuple[Number, Number] | None:
        """``(P(inner), P(leaf))``: the probability that the round ended at a node with children (a correction
        draw) and at a leaf (a bonus draw); ``None`` where an outcome did not say (a recursion's)."""
        return None if self._ended is None else (self._ended[True], self._ended[False])

    def profile(self) -> list[Number]:
        """``[P(τ ≥ 1), …, P(τ ≥ H)]``."""
        return [sum((prob for o, prob in self.outcomes.items() if o.accepted >= t), self._zero)
                for t in range(1, self.height + 1)]

    # ---- completion and distance to the target ---------------------------------------------------------
    def _require_view(self) -> ModelView:
        if self.view is None:
            raise ValueError("this law has no model to complete with (a fixed tree without a model)")
        return self.view

    def _extend(self, out: dict[Sequence_, Number], block: Sequence_, prob: Number, rule, count: Count) -> None:
        if len(block) == self.height + 1:
            count.sequence()
            out[block] = out.get(block, self._zero) + prob
            return
        row = rule.next_row(block, self.view)
        for x, px in enumerate(row):
            if px > 0:
                self._extend(out, block + (x,), prob * px, rule, count)

    def completed(self) -> dict[Sequence_, Number]:
        """The completed law over ``Σ^(H+1)``: each outcome's ``path + (y,)`` extended by its completion rule.

        Returns
        -------
        dict
            Sequence → probability, zero cells omitted.

        Raises
        ------
        ValueError
            The law has no model view to complete with.
        ExecutionLimitError
            The completed sequences passed the execution limit in force (each counts).
        """
        self._require_view()
        out: dict[Sequence_, Number] = {}
        count = active_count()
        for o, prob in self.outcomes.items():
            if prob > 0:
                self._extend(out, o.path + (o.y,), prob, o.completion, count)
        return out

    def target(self, rule=TARGET) -> dict[Sequence_, Number]:
        """The target's joint ``q^(H+1)`` over ``Σ^(H+1)``, or the law another completion ``rule`` draws from the
        empty block (greedy decoding's point mass for :data:`~simulator.completion.GREEDY`; a reference of
        :data:`~simulator.completion.REFERENCES`).

        Returns
        -------
        dict
            Sequence → probability, zero cells omitted.

        Raises
        ------
        ValueError
            The law has no model view.
        """
        self._require_view()
        out: dict[Sequence_, Number] = {}
        self._extend(out, (), rational(1) if self.exact else 1.0, rule, active_count())
        return out

    def discrepancies(self) -> tuple[Number, Counterexample | None]:
        """``(TVD, counterexample)``; the counterexample is ``None`` when the laws agree exactly."""
        distance = self.distance()
        return distance.tvd, distance.counterexample

    def distance(self, reference: dict[Sequence_, Number] | None = None) -> "Distance":
        """How the completed law differs from the target's.

        Parameters
        ----------
        reference : dict, optional
            A law over ``Σ^(H+1)`` computed another way (a causal LM's joint from plain forward passes), used instead of
            the view's ``q^(H+1)``.

        Returns
        -------
        Distance
            ``tvd``, the ``counterexample`` (the sequence of largest difference, ``None`` when the laws agree exactly)
            and ``off_support``, the mass on sequences the reference gives probability 0.

        Raises
        ------
        ValueError
            The law has no model view.
        """
        return law_distance(self.completed(), self.target() if reference is None else reference, self._zero)


def reference_distances(law: OutputLaw, names: Iterable[str]) -> dict[str, "Distance"]:
    """How the completed ``law`` differs from each named reference law of
    :data:`simulator.completion.REFERENCES` (``"greedy"``: greedy decoding's point mass on the argmax continuation),
    by name; a rule lists its references in the registry (``VerifierSpec.references``)."""
    return {name: law.distance(law.target(REFERENCES[name][1])) for name in names}


def law_distance(mine: dict[Sequence_, Number], target: dict[Sequence_, Number], zero: Number = 0) -> "Distance":
    """How law ``mine`` differs from ``target`` (both sequence → probability, zero cells omitted): half the L1
    distance, the sequence of largest difference (ties: the smallest sequence), the mass ``mine`` puts on
    sequences ``target`` omits, the TVD of each position's marginal and ``KL(mine ‖ target)``; ``zero`` sets the
    arithmetic of the sums."""
    tvd = off_support = zero
    worst: tuple[Number, Sequence_] | None = None
    for seq in sorted(set(mine) | set(target)):
        gap = abs(mine.get(seq, zero) - target.get(seq, zero))
        tvd += gap
        if seq not in target:
            off_support += mine[seq]
        if gap > 0 and (worst is None or gap > worst[0]):
            worst = (gap, seq)
    ce = None if worst is None else Counterexample(worst[1], mine.get(worst[1], zero), target.get(worst[1], zero))
    return Distance(tvd / 2, ce, off_support, _marginal_tvds(mine, target, zero), _kl(mine, target))


def _marginal_tvds(mine: dict[Sequence_, Number], target: dict[Sequence_, Number], zero: Number) -> tuple:
    """The TVD of each position's marginal law, position 0 first (the laws' sequences all have one length)."""
    length = max((len(s) for s in (*mine, *target)), default=0)
    out = []
    for i in range(length):
        diff: dict[int, Number] = {}
        for law, sign in ((mine, 1), (target, -1)):
            for seq, prob in law.items():
                diff[seq[i]] = diff.get(seq[i], zero) + sign * prob
        out.append(sum((abs(d) for d in diff.values()), zero) / 2)
    return tuple(out)


def _kl(mine: dict[Sequence_, Number], target: dict[Sequence_, Number]) -> float:
    """``KL(mine ‖ target)`` in nats, as a float from the exact cells (each ratio taken exactly before its
    logarithm); ``inf`` where ``mine`` puts mass on a sequence ``target`` omits."""
    total = 0.0
    for seq, prob in mine.items():
        if prob <= 0:
            continue
        if target.get(seq, 0) <= 0:
            return math.inf
        total += float(prob) * _log_ratio(prob, target[seq])
    return total


def _log_ratio(a: Number, b: Number) -> float:
    """``log(a / b)``: of two exact rationals without the float overflow or underflow of either; of floats (any
    float type) in float64."""
    if isinstance(a, numbers.Rational) and isinstance(b, numbers.Rational):  # int, Fraction, gmpy2's mpq
        ratio = Fraction(a) / Fraction(b)
        return math.log(ratio.numerator) - math.log(ratio.denominator)
    return math.log(float(a)) - math.log(float(b))


@dataclass(frozen=True)
class Distance:
    """How a completed law differs from the target: TVD, the worst sequence, the support violation (mass on
    sequences of target probability 0, a loss whatever a float tolerance allows), each position's marginal TVD and
    the KL divergence from the target (a float; ``inf`` with a support violation)."""

    tvd: Number
    counterexample: Counterexample | None
    off_support: Number
    position_tvd: tuple = ()
    kl: float = 0.0
