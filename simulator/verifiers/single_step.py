"""Single-step rules at one node (docs/rules.md), each written once as a deterministic plan (:class:`Plan`) that
serves both sampling (:func:`run_plan`) and the flows Layer Verification lifts (:func:`plan_acceptance`; Cha et
al. 2026, §3–4, App. E.2)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..numeric import Number, ipow, is_rational, normalise, positive_part, ratio, rational, residual, row_cache, total
from ..randomness import Randomness

StepResult = tuple[Optional[int], Optional[tuple[Number, ...]]]
Row = tuple[Number, ...]


@dataclass(frozen=True)
class Plan:
    """Per-candidate acceptance probabilities (each given the earlier rejections) and the final residual.
    Deterministic, so the same plan serves sampling and flows.

    The sequential rules: SpS, RRS, RRSw (and DySpec's Alg. 3 as printed), deterministic RRS and K-SEQ, each over
    ``k`` candidate tokens, the node's draft row ``p`` and target row ``q``. Each plan's array form, for many nodes at
    once, is its array step in :mod:`.single_step_arrays`.
    """

    steps: tuple[tuple[int, Number], ...]  # (candidate position, acceptance probability)
    residual: Row


def run_plan(plan: Plan, rng: Randomness) -> StepResult:
    """Sample a plan: one Bernoulli per candidate, in order, the first success wins (its position, no residual);
    when every one fails, no position and the residual."""
    for index, prob in plan.steps:
        if rng.bernoulli(prob):
            return index, None
    return None, plan.residual


def plan_acceptance(plan: Plan, k: int) -> list[Number]:
    """``P(accept position i | candidates) = a_i Π_{j<i}(1 − a_j)`` for every position ``i < k``."""
    out: list[Number] = [0] * k
    reach: Number = 1
    for index, prob in plan.steps:
        out[index] = reach * prob
        reach = reach * (1 - prob)
    return out


def sps_plan(candidates: Sequence[int], p: Row, q: Row) -> Plan:
    """SpS (Leviathan et al., ICML 2023, arXiv:2211.17192): accept ``x`` w.p. ``min(1, q(x)/p(x))``; residual
    ``norm((q−p)_+)``."""
    x = candidates[0]
    return Plan(((0, ratio(q[x], p[x])),), residual(q, p))


def rrs_plan(candidates: Sequence[int], p: Row, q: Row) -> Plan:
    """RRS with replacement (SpecInfer, arXiv:2305.09781; EAGLE, arXiv:2401.15077): sequential SpS; after a
    rejection ``q ← norm((q−p)_+)``."""
    steps, target = [], tuple(q)
    for i, x in enumerate(candidates):
        steps.append((i, ratio(target[x], p[x])))
        target = residual(target, p)
    return Plan(tuple(steps), target)


def _normal_cdf_acceptance(numerator: Number, denominator: Number) -> float:
    """DySpec Alg. 3 as printed: ``c ~ N(0, 1)``, accept if ``c ≤ R/D``: probability ``Φ(R/D)``."""
    if denominator == 0:
        return 1.0 if numerator > 0 else 0.5
    return 0.5 * (1 + math.erf(float(numerator / denominator) / math.sqrt(2)))


def rrsw_plan(candidates: Sequence[int], p: Row, q: Row,
              accept: Callable[[Number, Number], Number] = ratio) -> Plan:
    """RRS without replacement (Jeon et al., arXiv:2402.14160): as RRS, and also ``p(x) ← 0`` renormalised; stops
    when the draft has no mass left. DySpec's verification (its Alg. 3) is this rule; ``accept`` swaps in another
    acceptance probability (:func:`dyspec_printed_plan`)."""
    steps, target, draft = [], tuple(q), list(p)
    for i, x in enumerate(candidates):
        steps.append((i, accept(target[x], draft[x])))
        target = residual(target, draft)
        draft[x] = draft[x] * 0
        if total(draft) <= 0:  # the draft has no mass left: stop (DySpec's early return)
            break
        draft = list(normalise(draft))
    return Plan(tuple(steps), target)


def dyspec_printed_plan(candidates: Sequence[int], p: Row, q: Row) -> Plan:
    """DySpec's Alg. 3 as printed, ``c ~ N(0, 1)`` (accept w.p. ``Φ(q/p)``): kept as a negative control."""
    return rrsw_plan(candidates, p, q, accept=_normal_cdf_acceptance)


def deterministic_plan(candidates: Sequence[int], p: Row, q: Row) -> Plan:
    """Deterministic RRS (point-mass drafts, EAGLE-2, arXiv:2406.16858): accept a distinct ``x`` w.p. ``q(x)``; else
    ``q(x) ← 0`` renormalised. Its acceptance never reads ``p``, so it is lossless under every drafting scheme."""
    steps, target, seen = [], list(q), set()
    for i, x in enumerate(candidates):
        if x in seen:
            continue
        seen.add(x)
        steps.append((i, ratio(target[x], 1)))  # min(1, ·) absorbs float rounding above 1
        target[x] = target[x] * 0
        if total(target) <= 0:  # x held all the remaining mass: accepted surely (floats: up to rounding)
            return Plan(tuple(steps), tuple(q))
        target = list(normalise(target))
    return Plan(tuple(steps), tuple(target))


def hu_plan(candidates: Sequence[int], p: Row, q: Row) -> Plan:
    """Hu et al.'s verification for greedy draft sampling (ICLR 2025, arXiv:2502.18779, §5): the first ``k − 1``
    candidates ``T`` are fixed, the last ``x`` was drawn from ``p' = norm(p·1[∉ T])``. SpS on ``x`` against ``p'``
    (accept w.p. ``min(1, q(x)/p'(x))``); on a rejection ``y ~ r = norm((q − p')_+)``, which is ``q`` on ``T``, and a
    ``y`` in ``T`` is the candidate holding it (deterministic RRS over ``T`` against ``r``). Acceptance
    ``q(T) + Σ_{x∉T} min(q(x), p'(x))``, the optimum ``α*`` of the greedy tuple law. ``k = 1``: SpS exactly."""
    fixed, x = list(candidates[:-1]), candidates[-1]
    rest = [px * 0 if y in fixed else px for y, px in enumerate(p)]
    if not fixed:
        draft = tuple(p)
    elif total(rest) > 0:
        draft = normalise(rest)
    else:  # every token of p is fixed: a tuple greedy drafting never makes (the last would repeat one)
        return deterministic_plan(candidates, p, q)
    corrected = residual(q, draft)
    rest_plan = deterministic_plan(fixed, p, corrected)
    return Plan(((len(fixed), ratio(q[x], draft[x])),) + rest_plan.steps, rest_plan.residual)


# ---- K-SEQ ------------------------------------------------------------------------------------------------
KSEQ_BISECTION_STEPS = 60


def _beta(p: Row, q: Row, rho: Number) -> Number:
    return total([min(px, qx / rho) for px, qx in zip(p, q)])


@row_cache(4096)
def kseq_rho(p: Row, q: Row, k: int) -> Number:
    """``ρ*``: the upper end of a bisection for ``p_acc(ρ) = ρβ(ρ)`` on ``[1, k]`` (60 halvings).

    ``f(ρ) = p_acc(ρ) − ρβ(ρ)`` is ≥ 0 at 1 and ≤ 0 at ``k``; the returned ``ρ`` has ``f(ρ) ≤ 0``, which is what
    losslessness needs (``γ ≤ ρ``). Under rationals the bisection is exact.
    """
    exact = is_rational(p[0])
    lo, hi = (rational(1), rational(k)) if exact else (1.0, float(k))
    if k == 1:
        return lo

    def f(rho: Number) -> Number:
        beta = _beta(p, q, rho)
        return 1 - ipow(1 - beta, k) - rho * beta

    if f(lo) <= 0:
        return lo
    for _ in range(KSEQ_BISECTION_STEPS):
        mid = (lo + hi) / 2
        if f(mid) <= 0:
            hi = mid
        else:
            lo = mid
    return hi


def kseq_plan(candidates: Sequence[int], p: Row, q: Row) -> Plan:
    """K-SEQ (SpecTr, Sun et al., NeurIPS 2023, arXiv:2310.15141): ``β(ρ) = Σ min(p, q/ρ)``,
    ``p_acc(ρ) = 1 − (1 − β)^k``, ``ρ*`` the root of ``p_acc(ρ) = ρ β(ρ)`` on ``[1, k]`` (:func:`kseq_rho`: any
    ``ρ ≥ ρ*`` is lossless, so the exact rational bisection point is too); accept ``X_i`` w.p. ``min(1, q/(ρ* p))``;
    residual ``norm((q − γ min(p, q/ρ*))_+)`` with ``γ = p_acc/β``. ``k = 1`` gives ``ρ* = 1``: SpS exactly."""
    k = len(candidates)
    rho = kseq_rho(tuple(p), tuple(q), k)
    beta = _beta(p, q, rho)
    steps = tuple((i, ratio(q[x], rho * p[x])) for i, x in enumerate(candidates))
    if beta == 0:
        return Plan(steps, tuple(q))
    gamma = (1 - ipow(1 - beta, k)) / beta
    rest = positive_part(qx - gamma * min(px, qx / rho) for px, qx in zip(p, q))
    return Plan(steps, normalise(rest) if total(rest) > 0 else tuple(q))
