"""Hu et al., *Towards Optimal Multi-draft Speculative Decoding* (ICLR 2025, arXiv:2502.18779): the optimal
acceptance ``α*`` through the dual of its optimal-transport problem, a subset selection solved over the ``V + 1``
prefixes of one token order with and without replacement (:func:`subset_selection`), and ``α*`` in closed form
under its greedy draft sampling (:func:`greedy_alpha`), which ``tv-hu`` reaches (docs/rules.md)."""

from __future__ import annotations

from typing import Sequence

from ..drafting.shapes import top_tokens
from ..errors import InvalidParameterError
from ..numeric import Number, total

Row = Sequence[Number]
SUBSET_LAWS = ("iid", "without-replacement")


def drafts_inside(p: Row, k: int, law: str, subset: frozenset[int]) -> Number:
    """``Q(H) = P(every drafted token lies in H)`` for ``k`` drafts from ``p``: ``p(H)^k`` with replacement; without
    replacement by recursion over the draws (drafting stops early when ``p`` has no mass left, as drafting does)."""
    one = p[0] * 0 + 1
    if law == "iid":
        inside = total([p[x] for x in subset] or [one * 0])
        out = one
        for _ in range(k):
            out = out * inside
        return out
    if law == "without-replacement":
        return _inside_without(tuple(p), k, subset, frozenset(), one)
    raise InvalidParameterError("law", f"subset selection is computed for {SUBSET_LAWS}, not {law!r}")


def _inside_without(p: tuple, k: int, subset: frozenset[int], drawn: frozenset[int], one: Number) -> Number:
    left = one - total([p[x] for x in drawn] or [one * 0])
    if k == 0 or left <= 0:
        return one
    return total([p[x] / left * _inside_without(p, k - 1, subset, drawn | {x}, one)
                  for x in sorted(subset - drawn) if p[x] > 0] or [one * 0])


def subset_selection(p: Row, q: Row, k: int, law: str) -> tuple[Number, frozenset[int]]:
    """The paper's dual as subset selection: ``α* = 1 + min_H [q(H) − Q(H)]`` (target ``q``, draft ``p``), the
    minimum taken over the prefixes ``H_0 = ∅ ⊂ H_1 ⊂ … ⊂ H_V`` of the tokens ordered by ``q(x)/p(x)`` ascending
    (tokens with ``p(x) = 0`` last, ties by token id), for drafts with and without replacement. Returns the value
    and the smallest minimising prefix."""
    order = sorted(range(len(p)), key=lambda x: (p[x] == 0, q[x] / p[x] if p[x] > 0 else 0, x))
    one = p[0] * 0 + 1
    best, best_set = one, frozenset()  # H = ∅: 1 + 0 − 0
    mass = one * 0
    for j, x in enumerate(order, start=1):
        mass = mass + q[x]
        prefix = frozenset(order[:j])
        value = one + mass - drafts_inside(p, k, law, prefix)
        if value < best:
            best, best_set = value, prefix
    return best, best_set


def greedy_alpha(p: Row, q: Row, k: int) -> Number:
    """``α*`` under greedy draft sampling (top ``k − 1`` tokens ``T`` of ``p``, the last drawn from
    ``p' = norm(p·1[∉ T])``): ``q(T) + Σ_{x∉T} min(q(x), p'(x))``; ``q(T)`` when ``p`` has no mass outside ``T``."""
    fixed = top_tokens(p, k - 1)
    rest = [x for x in range(len(p)) if x not in fixed]
    left = total([p[x] for x in rest] or [p[0] * 0])
    value = total([q[x] for x in fixed] or [q[0] * 0])
    if left <= 0:
        return value
    return value + total([min(q[x], p[x] / left) for x in rest] or [q[0] * 0])
