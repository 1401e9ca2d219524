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
import scipy  # scipy.special loads on first use (not at every CLI start)

from ...array_ops import categorical, positive_residual, ratio, row_sum, take_rows
from ..rules import GR, OPT
from .frame import Batch, residual_draw

_FLOW_RULES = {"opt": OPT, "gr": GR}
_FIRST_ONLY = ("sps", "sps-q", "first")


def tv(batch: Batch, plan: str) -> tuple[Any, Any]:
    """The accepted node and emitted token of every tree, ``([B], [B])``."""
    xp, shape, rows, stream = batch.xp, batch.shape, batch.rows, batch.stream
    node, y = batch.full(batch.size, 0), batch.full(batch.size, 0)
    open_ = batch.arange(batch.size)
    while open_.shape[0]:
        v = node[open_]
        ids = batch.draft.node_ids(open_, v)
        count = shape.count[v]
        leaf = count == 0
        done = open_[leaf]
        if done.shape[0]:
            y[done] = rows.sample("q", ids[leaf], stream.take(done))
        inner, v, ids, count = open_[~leaf], v[~leaf], ids[~leaf], count[~leaf]
        if inner.shape[0] == 0:
            break
        kids = shape.kids[v]  # [m, W], −1 padded
        if plan.startswith("flow:"):
            cands = batch.draft.children(inner, kids)
            weights, emit = rows.flow_step(_FLOW_RULES[plan[5:]], ids, cands, count)
            choice = categorical(weights, stream.take(inner))
            accepted = xp.where(choice < count, choice, xp.full_like(choice, -1))
        elif plan in _NAMED_RESIDUAL:
            accepted, emit = _named_plan_step(batch, plan, inner, ids, kids, count)
        else:
            accepted, residual = _plan_step(batch, plan, inner, ids, batch.draft.children(inner, kids), count)
            emit = residual_draw(residual)
        moved = accepted >= 0
        node[inner[moved]] = shape.kids[v[moved], accepted[moved]]
        stop = inner[~moved]
        y[stop] = emit(batch.where_true(~moved), stream.take(stop))
        open_ = inner[moved]
    return node, y


#: plans whose residual depends on the node's rows alone, as :meth:`RowSource.entry` names it for ``k`` candidates
#: (SpS is RRS with one): read from the row source, which computes it once per context where rows are per context
_NAMED_RESIDUAL = {"sps": "rrs", "rrs": "rrs", "kseq": "kseq", "sps-q": "q", "first": "q"}


def _named_plan_step(batch: Batch, plan: str, trees: Any, ids: Any, kids: Any, count: Any) -> tuple[Any, Any]:
    """:func:`_plan_step` for the plans of :data:`_NAMED_RESIDUAL`, reading single entries of the node's rows and
    its residual by name (the same numbers: the row source derives them by the same operations): candidate
    ``i`` of RRS against ``r_i``, SpS's first against ``q``, K-SEQ's against ``min(1, q/(ρ* p))``. Candidate ``i``
    is read (``kids [m, W]``, the candidates' nodes) only where the ``i`` before it were rejected: these rules'
    residuals depend on the candidate count alone, so a draft drawn on demand never draws the rest."""
    xp, rows, stream = batch.xp, batch.rows, batch.stream
    m = trees.shape[0]
    used = xp.minimum(count, xp.ones_like(count)) if plan in _FIRST_ONLY else count
    accepted = batch.full(m, -1)
    open_ = xp.ones(m, dtype=xp.bool, device=batch.device)
    rho = rows.kseq_rho(ids, used) if plan == "kseq" else None
    for i in range(kids.shape[1]):
        at = batch.where_true(open_ & (i < used))
        if at.shape[0] == 0:
            break
        x = batch.draft.read(trees[at], kids[at, i])
        if plan == "first":
            prob = xp.ones(at.shape, dtype=rows.q.dtype, device=batch.device)
        elif plan == "kseq":
            prob = ratio(rows.entry("q", ids[at], x), rho[at] * rows.entry("p", ids[at], x))
        else:  # RRS's target after i rejections (q for the first candidate)
            prob = ratio(rows.entry(("rrs", i), ids[at], x), rows.entry("p", ids[at], x))
        u = stream.take(trees[at])
        hit = (prob == 1) | (u < prob)
        accepted[at[hit]] = i
        open_[at[hit]] = False
    kind = _NAMED_RESIDUAL[plan]

    def emit(at: Any, u: Any) -> Any:
        """The rejection's token for the trees ``at`` (all their candidates rejected), by candidate count."""
        counts = used[at]
        if kind == "q" or at.shape[0] == 0 or bool(xp.all(counts == counts[0])):  # one table for all
            return rows.sample("q" if kind == "q" else (kind, int(counts[0]) if at.shape[0] else 1), ids[at], u)
        out = xp.zeros(at.shape, dtype=xp.int64, device=batch.device)
        for k in xp.unique_values(counts).tolist():
            part = batch.where_true(counts == k)
            out[part] = rows.sample((kind, k), ids[at[part]], u[part])
        return out

    return accepted, emit


def _plan_step(batch: Batch, plan: str, trees: Any, ids: Any, cands: Any, count: Any) -> tuple[Any, Any]:
    """One node's plan (:mod:`simulator.verifiers.single_step`) for the trees ``trees`` ``[m]`` at rows ``ids``:
    the accepted candidate position (−1: none) and the residual to draw from when none is accepted. The plans
    whose rows change with the candidates rejected (``det``, ``rrsw``, ``rrsw-phi``), row by row."""
    xp, rows, stream = batch.xp, batch.rows, batch.stream
    p, q = take_rows(rows.p, ids), take_rows(rows.q, ids)  # [m, V]
    m = trees.shape[0]
    accepted = batch.full(m, -1)
    # the rows a plan updates are copies (``q`` stays for the residual of det); the others are read as they are
    target = xp.asarray(q, copy=True) if plan == "det" else q
    draft = xp.asarray(p, copy=True) if plan in ("rrsw", "rrsw-phi") else p
    open_ = xp.ones(m, dtype=xp.bool, device=batch.device)
    if plan == "det":
        fallback = xp.zeros(m, dtype=xp.bool, device=batch.device)  # every token rejected: residual q
        seen = xp.zeros(q.shape, dtype=xp.bool, device=batch.device)  # tokens already rejected
    for i in range(cands.shape[1]):
        at = batch.where_true(open_ & (i < count))
        if at.shape[0] == 0:
            break
        x = cands[at, i]
        if plan == "det":  # a repeat of a rejected token is skipped without a draw
            at, x = at[~seen[at, x]], x[~seen[at, x]]
            prob = ratio(target[at, x], xp.ones_like(target[at, x]))
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
        else:  # rrsw, rrsw-phi: the residual, and the rejected token zeroed in the draft
            target[miss] = positive_residual(target[miss] - draft[miss], target[miss])
            zeroed = draft[miss]
            zeroed[batch.arange(miss.shape[0]), x] = 0
            left = row_sum(zeroed)
            empty = ~(left > 0)
            open_[miss[empty]] = False
            draft[miss] = xp.where(empty[:, None], zeroed, zeroed / xp.where(empty, xp.ones_like(left),
                                                                              left)[:, None])
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
    return scipy.special.erf(x) if isinstance(x, np.ndarray) else x.erf()
