"""Single-step rules at one node (SPEC §4): ``k`` candidate tokens, the node's draft row ``p`` and target
row ``q``. Each returns ``(index, residual)``: the index of the accepted candidate, or ``None`` together with
the distribution the correction token is drawn from.

* SpS (Leviathan et al.) — accept ``x`` w.p. ``min(1, q(x)/p(x))``; residual ``norm((q−p)_+)``.
* RRS (with replacement; SpecInfer/EAGLE) — sequential SpS; after a rejection ``q ← norm((q−p)_+)``.
* RRSw (without replacement; Jeon et al.) — as RRS, and also ``p(x) ← 0`` renormalised; stops when the
  draft has no mass left.
* Deterministic RRS (point-mass drafts, EAGLE-2) — accept a distinct ``x`` w.p. ``q(x)``; else ``q(x) ← 0``
  renormalised. Its acceptance never reads ``p``, so it is lossless under every drafting scheme.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..numeric import Number, normalise, ratio, residual, total
from ..randomness import Randomness

StepResult = tuple[Optional[int], Optional[tuple[Number, ...]]]


def sps(candidates: Sequence[int], p: Sequence[Number], q: Sequence[Number], rng: Randomness) -> StepResult:
    x = candidates[0]
    if rng.bernoulli(ratio(q[x], p[x])):
        return 0, None
    return None, residual(q, p)


def rrs(candidates: Sequence[int], p: Sequence[Number], q: Sequence[Number], rng: Randomness) -> StepResult:
    target = tuple(q)
    for i, x in enumerate(candidates):
        if rng.bernoulli(ratio(target[x], p[x])):
            return i, None
        target = residual(target, p)
    return None, target


def rrsw(candidates: Sequence[int], p: Sequence[Number], q: Sequence[Number], rng: Randomness) -> StepResult:
    target, draft = tuple(q), list(p)
    for i, x in enumerate(candidates):
        if rng.bernoulli(ratio(target[x], draft[x])):
            return i, None
        target = residual(target, draft)
        draft[x] = draft[x] * 0
        if total(draft) <= 0:
            break
        draft = list(normalise(draft))
    return None, target


def deterministic_rrs(candidates: Sequence[int], p: Sequence[Number], q: Sequence[Number],
                      rng: Randomness) -> StepResult:
    target = list(q)
    seen: set[int] = set()
    for i, x in enumerate(candidates):
        if x in seen:
            continue
        seen.add(x)
        if rng.bernoulli(ratio(target[x], 1)):  # min(1, ·) absorbs float rounding above 1
            return i, None
        target[x] = target[x] * 0
        if total(target) <= 0:  # float only: x held all but rounding-level mass, rejected w.p. ~1e-16
            return None, tuple(q)
        target = list(normalise(target))
    return None, tuple(target)
