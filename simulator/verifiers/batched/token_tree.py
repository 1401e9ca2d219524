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
    # The open trees, their current node (the root first) and its row id; a tree's entries of ``node`` and ``y`` are
    # written once, when it stops.
    open_, v = batch.arange(batch.size), batch.full(batch.size, 0)
    ids = batch.draft.node_ids(open_, v)
    width = shape.kids.shape[1]
    kids_flat = xp.reshape(shape.kids, (-1,))
    most = step.max_candidates
    while open_.shape[0]:
        count = xp.take(shape.count, v)
        leaf = count == 0
        if bool(xp.any(leaf)):
            done = open_[leaf]
            node[done] = v[leaf]
            y[done] = rows.sample("q", ids[leaf], stream.take(done))
            inner = ~leaf
            open_, v, ids, count = open_[inner], v[inner], ids[inner], count[inner]
            if open_.shape[0] == 0:
                break
        used = count if most is None else xp.minimum(count, xp.full_like(count, most))  # SpS: the first child
        accepted, emit = step.step(batch, open_, ids, xp.take(shape.kids, v, axis=0), used)  # kids [m, W], −1 padded
        moved = accepted >= 0
        stop = batch.where_true(~moved)
        if stop.shape[0]:
            trees = open_[stop]
            node[trees] = v[stop]
            y[trees] = emit(stop, stream.take(trees))
            open_, v, accepted = open_[moved], v[moved], accepted[moved]
        v = xp.take(kids_flat, v * width + accepted)
        ids = batch.draft.node_ids(open_, v)
    return node, y
