"""Token verification, batched (reference: :func:`simulator.verifiers.token_tree.tv`): each open tree runs the rule's
array step at its current node, from the root down."""

from __future__ import annotations

from typing import Any

from ...trees import node_children
from ..single_step_arrays import ArrayStep
from .frame import Batch


def path_nodes(parents: tuple[int, ...]) -> int:
    """The most nodes :func:`tv` reads in one trial: the root and the children of each node on a path from the root
    (a draft drawn on demand draws no other; the Monte Carlo engine sizes its chunks by this)."""
    children = node_children(parents)
    most = [0] * len(parents)
    for v in reversed(range(len(parents))):  # BFS order: children after their parent
        most[v] = len(children[v]) + max((most[c] for c in children[v]), default=0)
    return 1 + most[0]


def tv(batch: Batch, step: ArrayStep) -> tuple[Any, Any]:
    """The accepted node and emitted token of every tree, ``([B], [B])``, with the single-step rule ``step``.

    An accepted candidate moves the tree there, a rejection emits a token from the rule's residual, and a leaf emits
    a target token. The rule comes as its array step (:class:`~simulator.verifiers.single_step_arrays.ArrayStep`, from
    the registry): SpS, RRS, RRSw, deterministic RRS, K-SEQ, OPT, GR and the controls built on them.
    """
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
            inner = batch.where_true(~leaf)
            if inner.shape[0] == 0:
                break
            open_, v, ids, count = (xp.take(a, inner) for a in (open_, v, ids, count))
        used = count if most is None else xp.minimum(count, xp.full_like(count, most))  # SpS: the first child
        accepted, emit = step.step(batch, open_, ids, xp.take(shape.kids, v, axis=0), used)  # kids [m, W], −1 padded
        moved = accepted >= 0
        stop = batch.where_true(~moved)
        if stop.shape[0]:
            trees = xp.take(open_, stop)
            node[trees] = xp.take(v, stop)
            y[trees] = emit(stop, stream.take(trees))
            go = batch.where_true(moved)
            open_, v, accepted = (xp.take(a, go) for a in (open_, v, accepted))
        v = xp.take(kids_flat, v * width + accepted)
        ids = batch.draft.node_ids(open_, v)
    return node, y


tv.path_nodes = path_nodes  # type: ignore[attr-defined]  # it reads each trial's path only (see ArrayRuleRef)
