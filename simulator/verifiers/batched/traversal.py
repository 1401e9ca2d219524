"""Traversal Verification, batched (reference: :func:`simulator.verifiers.traversal.traversal_verify`, Weng et
al. 2025, Alg. 3, Eqs. 1–3): :func:`trv`, with duplicate siblings merged (``trv``) or kept apart (``trv-iid``),
and the control ``bug-trv-insertion-order``.
"""

from __future__ import annotations

from typing import Any

from array_api_compat import array_namespace

from ...array_ops import categorical, positive_part, put_rows, ratio, row_sum, take_rows
from .frame import Batch


def _trie(batch: Batch, merge: bool) -> Any:
    """``rep [B, n]``: the node standing for each node — with ``merge``, the first node (BFS order) under the same
    merged parent with the same token; else itself. Siblings are compared a pair of columns at a time
    (:func:`_columns`), by one key (merged parent and token) each."""
    xp, shape = batch.xp, batch.shape
    rep = xp.asarray(xp.broadcast_to(batch.arange(shape.n)[None, :], (batch.size, shape.n)), copy=True)
    if merge:
        for level in shape.levels[1:]:  # merged siblings share a depth; the level above is settled
            parent = _columns(rep, [shape.parents[w] for w in level])
            token = _columns(batch.tokens, level)
            key = [p + shape.n * t for p, t in zip(parent, token)]
            for i in range(1, len(level)):
                first = rep[:, level[i]]
                for j in range(i - 1, -1, -1):  # the smallest j wins
                    first = xp.where(key[i] == key[j], level[j], first)
                rep[:, level[i]] = first
    return rep


def _flat(table: Any) -> Any:
    """``table`` as one axis: a view of a row-major array (:func:`_row_major`; writes reach it), else a copy (read
    only)."""
    return array_namespace(table).reshape(table, (-1,))


def _row_major(table: Any) -> Any:
    """``table`` laid out row-major, as a view of its :func:`_flat` copy: the state the array rule writes through flat
    views must be (an elementwise result follows its inputs' layout, which may be transposed)."""
    return array_namespace(table).reshape(_flat(table), table.shape)


def _columns(table: Any, cols: list[int]) -> list[Any]:
    """The columns ``cols`` of ``table [B, n]`` as contiguous ``[B]`` arrays. A level's siblings are compared a pair
    of columns at a time, ``L(L − 1)/2`` operations on ``[B]``, instead of ``[B, L, L]`` comparisons reduced along
    their short last axis (on trv's multi-chain seed of Table 1, :func:`_trie_links` took 0.15 s instead of 0.37 s)
    or ``L − 1`` on rows of a transposed ``[L, B]`` (torch's transposing copies cost more than they save)."""
    xp = array_namespace(table)
    return [xp.asarray(table[:, c], copy=True) for c in cols]


def _sources(batch: Batch, rep: Any) -> Any:
    """``[B, n]``: the node whose rows a representative reads — the first member of its group (BFS order) that
    has children in the drafted tree, else itself (a leaf carries no draft row;
    :func:`simulator.verifiers.traversal._trie`)."""
    source = batch.xp.asarray(rep, copy=True)
    for w in range(batch.shape.n - 1, 0, -1):  # the smallest member with children wins
        if batch.shape.children[w]:
            source[batch.arange(batch.size), rep[:, w]] = w
    return source


def trv(batch: Batch, merge: bool = True, post_order: bool = True) -> tuple[Any, Any]:
    """The accepted node and emitted token of every tree, ``([B], [B])``.

    Rates (line 13) are computed as the DFS reaches a node (each rejection's recomputation of the subtree done
    lazily: the same numbers); the control, which may jump anywhere, recomputes the subtree as Alg. 3 states it.
    ``merge`` (``trv``): duplicate siblings are merged into one node, recursively — each tree of the batch gets its
    own trie, held as ``rep [B, n]`` (:func:`_trie`) — and a rejected token is zeroed in its parent's draft (Eq. 2).
    Without it (``trv-iid``) every node stands for itself and the draft is left unchanged. ``post_order=False`` is
    the control ``bug-trv-insertion-order`` (the alive leaf of smallest index instead of DFS post-order)."""
    xp, shape, rows, stream = batch.xp, batch.shape, batch.rows, batch.stream
    size, n = batch.size, shape.n
    everyone = batch.arange(size)
    rep = _trie(batch, merge)
    alive = _row_major(rep == batch.arange(n)[None, :])  # only representatives take part
    parents = xp.asarray([0] + list(shape.parents[1:]), dtype=xp.int64, device=batch.device)
    tparent = _row_major(xp.where(alive, rep[:, parents], xp.full_like(rep, -1)))  # the trie parent (a representative)
    tparent[:, 0] = -1
    source = _sources(batch, rep) if merge else rep
    # the rows of each representative [B, n]: where rows follow the path (per context), the members' rows are the
    # representative's own
    row_id = batch.ids if not merge or rows.by_context else batch.ids[everyone[:, None], source]
    tokens = batch.tokens
    # Per-node state [B, n] is read and written through flat views at ``b·n + u`` (:func:`_flat`): a 1-D gather costs
    # a third of a 2-D one on numpy, and the descent reads a few per node.
    flat_ids, flat_tokens = _flat(row_id), _flat(tokens)
    flat_q, flat_p = _flat(rows.q), _flat(rows.p)
    vocab = rows.vocab
    # A node's target and draft rows are the source's until a child of it is rejected; they are copied then into
    # a compact store (``slot[b, u]`` its row there, −1 before), so most nodes are read an entry at a time.
    slot = xp.full((size, n), -1, dtype=xp.int64, device=batch.device)
    capacity = size * max(1, sum(1 for c in shape.children if c))  # a row per tree and parent
    store_q = xp.empty((capacity, rows.vocab), dtype=rows.q.dtype, device=batch.device)
    store_p = xp.empty((capacity, rows.vocab), dtype=rows.q.dtype, device=batch.device)
    used = 0
    rate = xp.zeros((size, n), dtype=rows.q.dtype, device=batch.device)
    rate[:, 0] = 1
    flat_rate, flat_slot = _flat(rate), _flat(slot)
    flat_store_q, flat_store_p = _flat(store_q), _flat(store_p)

    def current(k: Any) -> tuple[Any, Any, Any]:
        """The target and draft rows ``([m, V], [m, V])`` of the nodes at flat places ``k``, and their rows in the
        store (``[m]``, −1 for none)."""
        ids, row = take_rows(flat_ids, k), take_rows(flat_slot, k)
        t, d = take_rows(rows.q, ids), take_rows(rows.p, ids)
        if used:  # rows copied to the store (a child rejected) are read there
            stored = batch.where_true(row >= 0)
            at = take_rows(row, stored)
            put_rows(t, stored, take_rows(store_q, at))
            put_rows(d, stored, take_rows(store_p, at))
        return t, d, row

    def emit(b: Any, k: Any) -> Any:
        """A token from the current target row of the nodes at flat places ``k`` of trees ``b``: a model row's by
        the row source's draw (its running sums are summed once), a stored row's by :func:`categorical` (the same
        token)."""
        draws = stream.take(b)
        if not used:
            return rows.sample("q", take_rows(flat_ids, k), draws)
        row = take_rows(flat_slot, k)
        out = xp.empty_like(row)
        model, stored = batch.where_true(row < 0), batch.where_true(row >= 0)
        put_rows(out, model, rows.sample("q", take_rows(flat_ids, take_rows(k, model)), take_rows(draws, model)))
        put_rows(out, stored, categorical(take_rows(store_q, take_rows(row, stored)), take_rows(draws, stored)))
        return out

    def line13(kw: Any, ku: Any) -> Any:
        """Line 13 for the nodes at flat places ``kw`` under their trie parents at ``ku``, from the parents' current
        rates and rows. A parent's entries are read from the store where its rows were copied there, selected
        elementwise (cheaper than writing through a mask)."""
        x = take_rows(flat_tokens, kw)
        entry = take_rows(flat_ids, ku) * vocab + x
        q_x, p_x = take_rows(flat_q, entry), take_rows(flat_p, entry)
        if used:
            row = take_rows(flat_slot, ku)
            stored = row >= 0
            at = xp.where(stored, row * vocab + x, xp.zeros_like(x))  # row 0 (written) where none is stored
            q_x = xp.where(stored, take_rows(flat_store_q, at), q_x)
            p_x = xp.where(stored, take_rows(flat_store_p, at), p_x)
        return ratio(take_rows(flat_rate, ku) * q_x, p_x)

    def descend(live: Any, start: Any) -> Any:
        """``[m]``: the next leaf of the trees ``live`` in DFS post-order (root → first alive child → … → a leaf,
        by the ``first_kid`` links), from ``start``, a node on that path — the root at first, then the rejected
        leaf's parent (rejecting a leaf changes no node above it) — each node's rate (line 13) computed as the path
        reaches it. Lazily, the same numbers as Alg. 3's recomputation of the subtree after each rejection: a node
        below ``start`` was never visited, and its parent's rate and rows are those the recomputation reads."""
        leaf = xp.asarray(start, copy=True)
        going, b, ku = batch.arange(live.shape[0]), live, live * n + start  # the trees still descending
        for _ in range(shape.height):
            w = take_rows(flat_first_kid, ku)
            has = batch.where_true(w >= 0)
            if has.shape[0] == 0:
                break
            if has.shape[0] < going.shape[0]:  # some reached their leaf
                going, b, ku, w = take_rows(going, has), take_rows(b, has), take_rows(ku, has), take_rows(w, has)
            kw = b * n + w
            put_rows(flat_rate, kw, line13(kw, ku))
            put_rows(leaf, going, w)
            ku = kw
        return leaf

    spans = [(level[0], level[-1] + 1) for level in shape.levels[1:]]  # BFS: each level is a run of ids
    node, y = batch.full(size, 0), batch.full(size, 0)
    order = None if post_order else _trie_order(batch, alive, tparent)

    # The control: line 13 before any rejection, densely (every alive node below the root, every row the model's),
    # and after each rejection for the whole remaining subtree, as Alg. 3 states it (``refresh`` below).
    for start, end in spans if order is not None else ():
        par = tparent[:, start:end]  # [B, L]; −1 for a node merged into another
        safe = xp.where(par >= 0, par, xp.zeros_like(par))
        at = row_id[everyone[:, None], safe]
        x = tokens[:, start:end]
        initial = ratio(rate[everyone[:, None], safe] * rows.q[at, x], rows.p[at, x])
        rate[:, start:end] = xp.where(par >= 0, initial, xp.zeros_like(initial))

    def refresh(todo: Any, below: Any) -> None:
        """Rates (line 13) of the strict descendants of ``below[i]`` in tree ``todo[i]``, level by level (a trie
        parent lies one level up, so its rate is fresh), from the level under ``below``: the trees are taken by
        the depth of ``below``. The control's: it may visit any leaf next, so it keeps every rate current."""
        depth = shape.depths[below]
        for d in range(shape.height):
            at = batch.where_true(depth == d)
            if at.shape[0]:
                _refresh_below(todo[at], below[at], spans[d:])

    def _refresh_below(todo: Any, below: Any, levels: list[tuple[int, int]]) -> None:
        # ``inside``: the descendants found so far; on the first level only ``below``'s children are
        inside = xp.zeros((todo.shape[0], n), dtype=xp.bool, device=batch.device) if len(levels) > 1 else None
        each = batch.arange(todo.shape[0])[:, None]
        for index, (start, end) in enumerate(levels):
            par = tparent[todo, start:end]  # [m, L]
            here = alive[todo, start:end] & (par == below[:, None])
            if index:
                safe = xp.where(par >= 0, par, xp.zeros_like(par))
                here = here | (alive[todo, start:end] & (par >= 0) & inside[each, safe])
            if index + 1 < len(levels):
                inside[:, start:end] = here
            i, j = xp.nonzero(here)
            if i.shape[0]:
                b, w = todo[i], j + start
                rate[b, w] = line13(b * n + w, b * n + par[i, j])

    if order is None:
        first_kid, next_sibling = _trie_links(batch, alive, tparent, source)
        flat_first_kid, flat_next_sibling = _flat(first_kid), _flat(next_sibling)
    flat_alive, flat_tparent, flat_rep = _flat(alive), _flat(tparent), _flat(rep)
    live, start = everyone, batch.full(size, 0)
    while live.shape[0]:
        leaf = descend(live, start) if order is None else _first_leaf(batch, alive[live], tparent[live], order[live])
        k = live * n + leaf
        prob = take_rows(flat_rate, k)
        u = stream.take(live)
        parent = take_rows(flat_tparent, k)
        finish = (prob == 1) | (u < prob) | (parent < 0)  # accepted, or the root rejected (probability 0 exactly)
        done, go = batch.where_true(finish), batch.where_true(~finish)
        b, v = take_rows(live, done), take_rows(k, done)
        put_rows(y, b, emit(b, v))
        put_rows(node, b, take_rows(flat_rep, v))
        if go.shape[0] == 0:
            break
        b, par, kv = take_rows(live, go), take_rows(parent, go), take_rows(k, go)
        kp = b * n + par
        if order is None:  # post-order: the siblings before ``v`` are gone, those after it alive
            put_rows(flat_first_kid, kp, take_rows(flat_next_sibling, kv))
        else:  # the control reads ``alive``; post-order follows the links alone
            flat_alive[kv] = False
        r = take_rows(flat_rate, kp)
        t, d, at = current(kp)
        slack = positive_part(r[:, None] * t - d)  # Eq. 1
        mass = row_sum(slack)
        has = mass > 0
        target = slack / xp.where(has, mass, xp.ones_like(mass))[:, None]
        kept = batch.where_true(~has)  # rare: no mass, the target is kept (its rows put back, not a select)
        if kept.shape[0]:
            put_rows(target, kept, take_rows(t, kept))
        if merge:  # Eq. 2; a draft with no mass left is divided by 1 (the same numbers)
            d[batch.arange(b.shape[0]), take_rows(flat_tokens, kv)] = 0
            left = row_sum(d)
            d = d / xp.where(left > 0, left, xp.ones_like(left))[:, None]
        fresh = batch.where_true(at < 0)  # a first rejection under the parent: its rows get a place in the store
        places = batch.arange(fresh.shape[0]) + used
        put_rows(at, fresh, places)
        put_rows(flat_slot, take_rows(kp, fresh), places)
        used += fresh.shape[0]
        put_rows(store_q, at, target)
        put_rows(store_p, at, d)
        put_rows(flat_rate, kp, xp.where(has, mass / xp.where(has, mass + (1 - r), xp.ones_like(mass)), mass))  # Eq. 3
        if order is not None:
            refresh(b, par)
        live, start = b, par
    return node, y


def _trie_links(batch: Batch, alive: Any, tparent: Any, source: Any) -> tuple[Any, Any]:
    """``(first_kid [B, n], next_sibling [B, n])``: each representative's first trie child and its next trie
    sibling (smallest id; −1 for none; a merged node's entries are never read). The first child is the first child
    of the representative's row source (``source``, :func:`_sources`): in BFS order the children of earlier nodes
    come first, and the smallest child of a group stands for its own. Trie siblings lie in one level (BFS: a run of
    ids), compared a pair of columns at a time (:func:`_columns`) by one key each: the trie parent, or for a removed
    node a key no other node has."""
    xp, shape = batch.xp, batch.shape
    first_kid = xp.reshape(take_rows(shape.kids[:, 0], _flat(source)), alive.shape)
    next_sibling = xp.full(alive.shape, -1, dtype=xp.int64, device=batch.device)
    for level in shape.levels[1:]:
        par, here = _columns(tparent, level), _columns(alive, level)
        key = [xp.where(h, p, -1 - w) for h, p, w in zip(here, par, level)]
        for i in range(len(level) - 1):
            after = xp.full_like(key[i], -1)
            for j in range(len(level) - 1, i, -1):  # the smallest later sibling wins
                after = xp.where(key[i] == key[j], level[j], after)
            next_sibling[:, level[i]] = after
    return first_kid, next_sibling


def _first_leaf(batch: Batch, alive: Any, tparent: Any, order: Any) -> Any:
    """``[m]``: the control's next leaf, the alive leaf first in ``order``."""
    xp = batch.xp
    inner = xp.zeros(alive.shape, dtype=xp.bool, device=batch.device)  # alive nodes with an alive child
    tree, child = xp.nonzero(alive & (tparent >= 0))
    inner[tree, tparent[tree, child]] = True
    key = xp.where(alive & ~inner, order, xp.full_like(order, batch.shape.n))
    return xp.argmin(key, axis=1)


def _trie_order(batch: Batch, alive: Any, tparent: Any) -> Any:
    """``[B, n]``: each representative's place in its trie's BFS numbering (the reference's node ids, which
    the control visits in order): depth by depth, by the parent's place, then by node id."""
    xp, shape = batch.xp, batch.shape
    order = xp.zeros(alive.shape, dtype=xp.int64, device=batch.device)
    start = 1
    for level in shape.levels[1:]:
        cols = xp.asarray(level, dtype=xp.int64, device=batch.device)
        par = xp.where(tparent[:, cols] >= 0, tparent[:, cols], xp.zeros_like(tparent[:, cols]))
        key = xp.where(alive[:, cols], order[batch.arange(batch.size)[:, None], par] * shape.n + cols[None, :],
                       xp.full_like(par, shape.n * shape.n * shape.n))
        places = xp.argsort(xp.argsort(key, axis=1, stable=True), axis=1, stable=True)
        order[:, cols] = places + start
        start += len(level)
    return order
