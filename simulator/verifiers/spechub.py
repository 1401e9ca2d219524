"""SpecHub's single step (Sun, Zhou, Chen, Sun; EMNLP 2024, arXiv:2411.05289; docs/rules.md): the hub scheme's pair
law (:func:`hub_pairs`) and the verification plan that transports it onto the target (:func:`spechub_plan`)."""

from __future__ import annotations

from typing import Sequence

from ..drafting.shapes import top_tokens
from ..errors import UnsupportedDraftError
from ..numeric import Number, normalise, ratio, total
from .single_step import Plan, Row, sps_plan

Pair = tuple[int, ...]


def hub_pairs(p: Row) -> dict[Pair, Number]:
    """The law of the hub scheme's drafts at a node with draft row ``p``: with ``a`` the top token of ``p`` (ties by
    token id), ``P(x, a) = p(x)`` and ``P(a, x) = p(a)·p(x)/(1 − p(a))`` for every other ``x`` with ``p(x) > 0``; a
    row with one positive token drafts ``(a,)`` surely."""
    hub = top_tokens(p, 1)[0]
    rest = [x for x in range(len(p)) if x != hub and p[x] > 0]
    if not rest:
        return {(hub,): p[hub] / p[hub]}
    out: dict[Pair, Number] = {(x, hub): p[x] for x in rest}
    out.update({(hub, x): p[hub] * p[x] / (1 - p[hub]) for x in rest})
    return out


def spechub_plan(candidates: Sequence[int], p: Row, q: Row) -> Plan:
    """SpecHub's verification of a hub pair ``(x1, x2)`` against the target row ``q``.

    The transport plan fills the target greedily in four layers, each accepting as much as the target has left:
    a pair ``(x, a)`` first offers ``x`` (accepted w.p. ``min(1, q(x)/p(x))``), then a pair ``(a, x)`` offers ``x``
    (w.p. ``min(1, q₁(x)/P(a, x))`` with ``q₁ = (q − p)_+`` off ``a``), then the pairs ``(a, ·)`` that kept their
    mass offer ``a``, then the pairs ``(·, a)`` likewise, each against what is left of ``q(a)``. A rejection draws
    from what is left of ``q``, normalised. Its acceptance is ``min(1, q(a) + Σ_{x≠a} min(q(x), p(x)/(1 − p(a))))``,
    the optimal-transport value of the hub law (every pair holds ``a``, so filling greedily is optimal). One
    candidate (``p`` with one positive token) is SpS.

    Raises :class:`UnsupportedDraftError` on more than two candidates (field ``branching``) and on a pair the hub
    scheme does not draft from ``p`` (field ``tokens``).
    """
    cands = tuple(candidates)
    if len(cands) > 2:
        raise UnsupportedDraftError("branching", f"SpecHub verifies exactly two drafts per node, got {len(cands)}")
    law = hub_pairs(p)
    if cands not in law:
        raise UnsupportedDraftError("tokens", f"candidates {list(cands)} are not a pair the hub scheme drafts from "
                                              f"this draft row (its top token is {top_tokens(p, 1)[0]}): SpecHub is "
                                              "defined on hub drafts only (--drafting hub)")
    if len(cands) == 1:
        return sps_plan(cands, p, q)
    hub = top_tokens(p, 1)[0]
    rest = [x for x in range(len(p)) if x != hub and p[x] > 0]
    left = list(q)  # the target mass no pair has taken yet
    first, second = {}, {}
    kept_first = kept_second = q[0] * 0  # the mass of the (x, a) and (a, x) pairs whose x was rejected
    for x in rest:  # layer 1: (x, a) offers x
        first[x] = ratio(q[x], p[x])
        taken = min(p[x], q[x])
        left[x] = q[x] - taken
        kept_first = kept_first + (p[x] - taken)
    for x in rest:  # layer 2: (a, x) offers x
        mass = law[hub, x]
        second[x] = ratio(left[x], mass)
        taken = min(mass, left[x])
        left[x] = left[x] - taken
        kept_second = kept_second + (mass - taken)
    hub_second = ratio(left[hub], kept_second)  # layer 3: the (a, x) pairs offer a
    left[hub] = left[hub] - min(left[hub], kept_second)
    hub_first = ratio(left[hub], kept_first)  # layer 4: the (x, a) pairs offer a
    left[hub] = left[hub] - min(left[hub], kept_first)
    corrected = normalise(left) if total(left) > 0 else tuple(q)
    x1, x2 = cands
    steps = ((0, first[x1]), (1, hub_first)) if x2 == hub else ((1, second[x2]), (0, hub_second))
    return Plan(steps, corrected)
