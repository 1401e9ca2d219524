"""Token verification, batched (reference: :func:`simulator.verifiers.token_tree.tv` over the single-step rules of
:mod:`simulator.verifiers.rules`).

From the root down, each open tree runs one single-step rule at its current node over the node's children as
candidates: an accepted candidate moves the tree there, a rejection emits a token from the rule's residual, and
a leaf emits a target token. The rule is its array step (:class:`~simulator.verifiers.single_step_arrays.ArrayStep`,
from the registry): SpS, RRS, RRSw, deterministic RRS, K-SEQ, OPT, GR and the controls built on them.
"""

from __future__ import annotations

from typing import Any

from ..single_step_arrays import ArrayStep
from .frame import Batch


def tv(batch: Batch, step: ArrayStep) -> tuple[Any, Any]:
    """The accepted node and emitted token of every tree, ``([B], [B])``, with the single-step rule ``step``."""
    xp, shape, rows, stream = batch.xp, batch.shape, batch.rows, batch.stream
    node, y = batch.full(batch.size, 0), batch.full(batch.size, 0)
    open_ = batch.arange(batch.size)
    most = step.max_candidates
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
        used = count if most is None else xp.minimum(count, xp.full_like(count, most))  # SpS: the first child
        accepted, emit = step.step(batch, inner, ids, shape.kids[v], used)  # kids [m, W], −1 padded
        moved = accepted >= 0
        node[inner[moved]] = shape.kids[v[moved], accepted[moved]]
        stop = inner[~moved]
        y[stop] = emit(batch.where_true(~moved), stream.take(stop))
        open_ = inner[moved]
    return node, y
