"""Token verification, batched (reference: :func:`simulator.verifiers.token_tree.tv` over the single-step rules of
:mod:`simulator.verifiers.rules` and :mod:`simulator.verifiers.single_step`).

From the root down, each open tree runs one single-step rule at its current node over the node's children as
candidates: an accepted candidate moves the tree there, a rejection emits a token from the rule's residual, and
a leaf emits a target token. ``plan`` names the rule:

* ``sps`` — SpS on the first child (Leviathan et al., Alg. 1): accept ``x`` with ``min(1, q(x)/p(x))``, residual
  ``norm((q − p)_+)``;
* ``rrs`` — RRS with replacement (SpecTr/SpecInfer): candidate ``i`` against ``r_i``, ``r_{i+1} = norm((r_i −
  p)_+)``; ``rrsw`` additionally zeroes the rejected token in the draft and renormalises (without replacement);
* ``det`` — deterministic RRS (EAGLE-2): accept with ``r_i(x)``, zero it, renormalise; a repeat is skipped;
* ``kseq`` — K-SEQ (SpecTr, Alg. 2): every candidate against ``min(1, q(x)/(ρ* p(x)))``, residual
  ``norm((q − γ min(p, q/ρ*))_+)``;
* ``flow:opt`` / ``flow:gr`` — a flow-defined rule: one categorical over the flows to the candidates and the
  reject weight (the row source solves or looks up the flows);
* controls: ``sps-q`` (SpS resampling from ``q``), ``first`` (accept the first child), ``rrsw-phi`` (DySpec's
  Alg. 3 as printed: ``c ~ N(0, 1)``, accept if ``c ≤ R/D``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import erf

from ...array_ops import categorical, positive_residual, ratio, row_sum
from ..rules import GR, OPT
from .frame import Batch

_FLOW_RULES = {"opt": OPT, "gr": GR}
_FIRST_ONLY = ("sps", "sps-q", "first")


def tv(batch: Batch, plan: str) -> tuple[Any, Any]:
    """The accepted node and emitted token of every tree, ``([B], [B])``."""
    xp, shape, rows, stream = batch.xp, batch.shape, batch.rows, batch.stream
    node, y = batch.full(batch.size, 0), batch.full(batch.size, 0)
    open_ = batch.arange(batch.size)
    while open_.shape[0]:
        v = node[open_]
        ids = batch.ids[open_, v]
        count = shape.count[v]
        leaf = count == 0
        done = open_[leaf]
        if done.shape[0]:
            y[done] = rows.sample("q", ids[leaf], stream.take(done))
        inner, v, ids, count = open_[~leaf], v[~leaf], ids[~leaf], count[~leaf]
        if inner.shape[0] == 0:
            break
        cands = batch.tokens[inner[:, None], xp.where(shape.kids[v] >= 0, shape.kids[v], 0)]  # [m, W]
        if plan.startswith("flow:"):
            weights, residual = rows.flow_step(_FLOW_RULES[plan[5:]], ids, cands, count)
            choice = categorical(weights, stream.take(inner))
            accepted = xp.where(choice < count, choice, xp.full_like(choice, -1))
        else:
            accepted, residual = _plan_step(batch, plan, inner, ids, cands, count)
        moved = accepted >= 0
        node[inner[moved]] = shape.kids[v[moved], accepted[moved]]
        stop = inner[~moved]
        y[stop] = categorical(residual[~moved], stream.take(stop))
        open_ = inner[moved]
    return node, y


def _plan_step(batch: Batch, plan: str, trees: Any, ids: Any, cands: Any, count: Any) -> tuple[Any, Any]:
    """One node's plan (:mod:`simulator.verifiers.single_step`) for the trees ``trees`` ``[m]`` at rows ``ids``:
    the accepted candidate position (−1: none) and the residual to draw from when none is accepted."""
    xp, rows, stream = batch.xp, batch.rows, batch.stream
    p, q = rows.p[ids], rows.q[ids]  # [m, V]
    m = trees.shape[0]
    used = xp.minimum(count, xp.ones_like(count)) if plan in _FIRST_ONLY else count
    accepted = batch.full(m, -1)
    # the rows a plan updates are copies (``q`` stays for the residual of det); the others are read as they are
    target = xp.asarray(q, copy=True) if plan == "det" else q
    draft = xp.asarray(p, copy=True) if plan in ("rrsw", "rrsw-phi") else p
    open_ = xp.ones(m, dtype=xp.bool, device=batch.device)
    if plan == "det":
        fallback = xp.zeros(m, dtype=xp.bool, device=batch.device)  # every token rejected: residual q
        seen = xp.zeros(q.shape, dtype=xp.bool, device=batch.device)  # tokens already rejected
    if plan == "kseq":
        rho, kseq_residual = rows.kseq(ids, used)
    for i in range(cands.shape[1]):
        at = batch.where_true(open_ & (i < used))
        if at.shape[0] == 0:
            break
        x = cands[at, i]
        if plan == "det":  # a repeat of a rejected token is skipped without a draw
            at, x = at[~seen[at, x]], x[~seen[at, x]]
            prob = ratio(target[at, x], xp.ones_like(target[at, x]))
        elif plan == "kseq":
            prob = ratio(q[at, x], rho[at] * p[at, x])
        elif plan == "first":
            prob = xp.ones_like(q[at, x])
        elif plan == "rrsw-phi":
            prob = _printed_dyspec(xp, target[at, x], draft[at, x])
        else:
            prob = ratio(target[at, x], draft[at, x])
        u = stream.take(trees[at])
        hit = (prob == 1) | (u < prob)
        accepted[at[hit]] = i
        open_[at[hit]] = False
        miss, x = at[~hit], x[~hit]
        if plan == "det":
            seen[miss, x] = True
            zeroed = target[miss]
            zeroed[batch.arange(miss.shape[0]), x] = 0
            left = row_sum(zeroed)
            empty = ~(left > 0)
            fallback[miss[empty]] = True
            open_[miss[empty]] = False
            target[miss[~empty]] = zeroed[~empty] / left[~empty][:, None]
        elif plan in ("rrs", "rrsw", "rrsw-phi"):
            target[miss] = positive_residual(target[miss] - draft[miss], target[miss])
            if plan != "rrs":
                zeroed = draft[miss]
                zeroed[batch.arange(miss.shape[0]), x] = 0
                left = row_sum(zeroed)
                empty = ~(left > 0)
                open_[miss[empty]] = False
                draft[miss] = xp.where(empty[:, None], zeroed, zeroed / xp.where(empty, xp.ones_like(left),
                                                                                  left)[:, None])
    if plan == "sps":
        return accepted, positive_residual(q - p, q)
    if plan in ("sps-q", "first"):  # the controls' residual: q itself
        return accepted, q
    if plan == "kseq":
        return accepted, kseq_residual
    if plan == "det":
        return accepted, xp.where(fallback[:, None], q, target)
    return accepted, target


def _printed_dyspec(xp: Any, num: Any, den: Any) -> Any:
    """DySpec Alg. 3 as printed (:func:`simulator.verifiers.single_step.dyspec_printed_plan`): ``Φ(num/den)``,
    1 for ``x/0`` with ``x > 0``, 1/2 for ``0/0``."""
    zero = den == 0
    z = num / xp.where(zero, xp.ones_like(den), den)
    phi = 0.5 * (1 + _erf(z / math.sqrt(2)))
    return xp.where(zero, xp.where(num > 0, xp.ones_like(num), xp.full_like(num, 0.5)), phi)


def _erf(x: Any) -> Any:
    """The error function, which the array API lacks: scipy's on numpy, the tensor's own elsewhere."""
    return erf(x) if isinstance(x, np.ndarray) else x.erf()
