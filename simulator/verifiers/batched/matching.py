"""Sample-and-match, batched (reference: :mod:`simulator.verifiers.matching`): at each node one target draw;
move to the first child holding it, else emit it. ``per_row`` is the control ``bug-match-per-row``: one draw
per child, in order, moving to the first child whose own draw matches; else the last draw is emitted (at a
leaf: one draw)."""

from __future__ import annotations

from typing import Any

from ...array_ops import categorical, take_rows
from .frame import Batch


def match(batch: Batch, per_row: bool = False) -> tuple[Any, Any]:
    """The accepted node and emitted token of every tree, ``([B], [B])``."""
    xp, shape, rows, stream = batch.xp, batch.shape, batch.rows, batch.stream
    node, y = batch.full(batch.size, 0), batch.full(batch.size, 0)
    open_ = batch.arange(batch.size)
    while open_.shape[0]:
        v = node[open_]
        q = take_rows(rows.q, batch.draft.node_ids(open_, v))  # [m, V]
        kids = shape.kids[v]  # [m, W], −1 padded
        held = xp.where(kids >= 0, batch.draft.children(open_, kids), -1)
        nxt = batch.full(open_.shape[0], -1)
        if per_row:
            tries = xp.maximum(shape.count[v], xp.ones_like(v))
            for i in range(shape.width):
                at = batch.where_true((nxt < 0) & (i < tries))
                if at.shape[0] == 0:
                    break
                draw = categorical(q[at], stream.take(open_[at]))
                y[open_[at]] = draw
                hit = held[at, i] == draw
                nxt[at[hit]] = kids[at[hit], i]
        else:
            draw = categorical(q, stream.take(open_))
            y[open_] = draw
            hit = held == draw[:, None]
            first = xp.argmax(xp.astype(hit, xp.int8), axis=1)
            found = xp.any(hit, axis=1)
            nxt[found] = kids[batch.where_true(found), first[found]]
        moved = nxt >= 0
        node[open_[moved]] = nxt[moved]
        open_ = open_[moved]
    return node, y
