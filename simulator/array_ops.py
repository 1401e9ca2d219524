"""The arithmetic every array rule shares, written once for numpy and torch (``array-api-compat``).

Each function mirrors a scalar one of :mod:`simulator.numeric`, :mod:`simulator.randomness` or a reference rule
operation for operation, so an array rule decides as its reference does on the same uniforms. Shapes: rows
``[m, V]``, per-row scalars ``[m]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from array_api_compat import array_namespace, device


def take_rows(table: Any, index: Any) -> Any:
    """``table[index]`` for a 1-D ``index`` of non-negative entries: whole rows (or blocks, or a 1-D table's entries)
    gathered along the first axis — a copy, the same numbers. numpy's ``take`` runs 2-6x faster than fancy indexing
    on the narrow rows read here; torch's ``index_select`` is called directly, since array-api-compat's ``take``
    first maps negative indices (three more operations: 4x the time of gathering 10^4 entries)."""
    if isinstance(table, np.ndarray):
        return table.take(index, axis=0)
    return table.index_select(0, index)


def put_rows(table: Any, index: Any, values: Any) -> None:
    """``table[index] = values`` in place, along the first axis, for a 1-D ``index`` of distinct non-negative
    entries (the inverse of :func:`take_rows`): numpy's indexed assignment, torch's ``index_copy_`` (its indexed
    assignment costs 1.5x more on 10^4 entries)."""
    if isinstance(table, np.ndarray):
        table[index] = values
    else:
        table.index_copy_(0, index, values)


def row_sum(w: Any) -> Any:
    """``[m, V] -> [m]``: left-to-right sums (:func:`simulator.numeric.total`); :func:`column_sum` of the transpose,
    except for a float64 tensor on the CPU: the last column of torch's running sum along the rows, which adds left
    to right in float64 there (the same numbers, 3-10x faster than a loop of adds; a float32 one accumulates in
    float64 and rounds once, other numbers)."""
    xp = array_namespace(w)
    if isinstance(w, np.ndarray):
        return column_sum(w.T)
    if w.dtype == xp.float64 and str(device(w)) == "cpu":
        return xp.cumulative_sum(w, axis=1)[:, -1]
    return column_sum(xp.permute_dims(w, (1, 0)))


def column_sum(w):
    """``[V, m] -> [m]``: left-to-right sums down the first axis (:func:`simulator.numeric.total` per column).
    numpy adds a row at a time (its ``sum`` adds in pairs and rounds otherwise; the loop is ~4x faster than
    ``cumsum`` on the toy study's narrow rows, and reads contiguous memory when ``w`` is stored row-major);
    other libraries take the last row of the running sum (sequential on the CPU; a GPU scan may round the last
    bit differently)."""
    if isinstance(w, np.ndarray) or device(w) == "cpu" or str(device(w)) == "cpu":
        # a row at a time, in place (torch on the CPU too: its running sum down the first axis is 3-4x slower)
        out = w[0].copy() if isinstance(w, np.ndarray) else w[0].clone()
        for j in range(1, w.shape[0]):
            out += w[j]
        return out
    xp = array_namespace(w)
    return xp.cumulative_sum(w, axis=0)[-1, ...]


def ratio(num, den):
    """:func:`simulator.numeric.ratio`: ``min(1, num/den)``, ``x/0 = 1`` for ``x > 0``, ``0/0 = 0``."""
    xp = array_namespace(num, den)
    zero = den == 0
    r = num / xp.where(zero, xp.ones_like(den), den)
    r = xp.where(r < 1, r, xp.ones_like(r))
    return xp.where(zero, xp.astype(num > 0, r.dtype), r)


def positive_part(x: Any) -> Any:
    """``x`` where positive, else 0 (:func:`simulator.numeric.positive_part`), by ``clip``: ``where(x > 0, x, 0)``
    selects by branching on the condition, 5x slower on rows of mixed signs (both libraries). The same numbers
    up to the sign of a zero (torch keeps a −0; the reference's is −0 for any negative): no comparison tells them
    apart, and sums and products keep the magnitudes."""
    return array_namespace(x).clip(x, min=0.0)


def positive_residual(diff, fallback):
    """``[m, V]``: ``norm(diff_+)`` row by row, or ``fallback``'s row where the positive part has no mass
    (:func:`simulator.numeric.residual`)."""
    xp = array_namespace(diff, fallback)
    diff = xp.where(diff > 0, diff, xp.zeros_like(diff))
    mass = row_sum(diff)
    has = mass > 0
    return xp.where(has[:, None], diff / xp.where(has, mass, xp.ones_like(mass))[:, None], fallback)


def inverse_cdf(running, u):
    """``(index [m], none [m])``: per row the first index whose running sum exceeds ``u·Σw`` (it carries a positive
    weight, since a running sum of non-negative weights only rises there), and whether no index does (``u = 1``,
    or rounding at the top)."""
    xp = array_namespace(running, u)
    above = running > (u * running[:, -1])[:, None]
    return xp.argmax(xp.astype(above, xp.int8), axis=1), ~above[:, -1]


def guide_buckets(vocab: int) -> int:
    """The number of buckets of a guide table over rows of ``vocab`` weights: a power of two (so that a uniform's
    bucket ``⌊u·G⌋`` and the edges ``b/G`` are exact), at least ``8·vocab`` (so that at most one bucket in eight holds
    a running sum, the only buckets whose uniforms need a search)."""
    return 8 * (1 << max(0, vocab - 1).bit_length())


def guide_table(running: np.ndarray, buckets: int) -> np.ndarray:
    """``[C, G]`` (numpy, computed on the host): for each row's running sums and each bucket ``[b/G, (b+1)/G)`` of the
    uniforms (the last one closed: the draw accepts ``u = 1``), the token :func:`guided_inverse_cdf` returns — the
    first index whose running sum exceeds ``u·Σw`` — if it is the same for every ``u`` of the bucket (``V``: none),
    else ``−1 −`` the token for ``u = b/G``, where its search starts (the guide-table method of Chen and Asau, with
    settled buckets read without a search).

    Exact: ``b/G`` is a float, and ``fl(u·Σw)`` is non-decreasing in ``u``, so every threshold of the bucket lies in
    ``[fl((b/G)·Σw), fl(((b+1)/G)·Σw)]`` and the token lies between the tokens of the two ends; a bucket is
    settled when they agree. The token for a threshold ``T`` is the count of running sums ``≤ T`` (they never
    fall): each running sum is counted from the first edge at or above it, found from ``⌈G·s/Σw⌉`` and corrected
    on the exact edges; a row of the table is then one run per count."""
    count, vocab = running.shape
    total = running[:, -1:]
    edges = lambda b: (b / buckets) * total  # noqa: E731 — fl((b/G)·Σw), the thresholds of the edges
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.ceil(running * (buckets / np.where(total > 0, total, 1.0)))
    first = np.clip(np.where(total > 0, first, 0), 0, buckets).astype(np.int64)
    for _ in range(buckets + 1):  # move each estimate to the first edge at or above its running sum
        low = (first < buckets) & (edges(first) < running)
        high = (first > 0) & ~low & (edges(first - 1) >= running)
        if not (low.any() or high.any()):
            break
        first = first + low - high
    steps = np.diff(first, axis=1, prepend=0, append=buckets + 1)  # edges per count of running sums ≤ them
    dtype = np.int8 if vocab < 2**7 - 1 else np.int16 if vocab < 2**15 - 1 else np.int32  # −1 − V .. V
    token = np.repeat(np.tile(np.arange(vocab + 1, dtype=dtype), count), steps.reshape(-1)).reshape(count, -1)
    low, high = token[:, :-1], token[:, 1:]
    return np.where(low != high, -1 - low, low)  # unsettled: −1 − the token at the lower edge


def guided_inverse_cdf(running, guide, ctx, u):
    """:func:`inverse_cdf` of the rows ``running[ctx]`` with uniforms ``u``, the same ``(index, none)`` without
    reading whole rows: a settled bucket of the guide (:func:`guide_table`) gives the token at once; otherwise the
    search starts at the guide's token for the bucket's lower edge and steps forward while the running sum is at or
    below ``u·Σw``. About one uniform in eight needs a step or two, where the full search compares ``V``. ``u`` lies
    in ``[0, 1]``, as the counter streams give it (the only callers: the row sources' draws)."""
    xp = array_namespace(running, u)
    vocab, buckets = running.shape[1], guide.shape[1]
    bucket = xp.astype(u * buckets, xp.int64)  # u = 1 (allowed) belongs to the last bucket, whose edges reach Σw
    bucket = xp.minimum(bucket, xp.full_like(bucket, buckets - 1))
    index = xp.astype(xp.take(xp.reshape(guide, (-1,)), ctx * buckets + bucket), xp.int64)
    search = xp.nonzero(index < 0)[0]
    if search.shape[0]:
        flat = xp.reshape(running, (-1,))
        base = ctx[search] * vocab
        threshold = u[search] * xp.take(flat, base + (vocab - 1))
        found = -1 - index[search]
        active = xp.nonzero(found < vocab)[0]
        active = active[xp.take(flat, base[active] + found[active]) <= threshold[active]]
        while active.shape[0]:
            found[active] += 1
            active = active[found[active] < vocab]
            active = active[xp.take(flat, base[active] + found[active]) <= threshold[active]]
        index[search] = found
    none = index >= vocab
    if bool(xp.any(none)):  # rare: u = 1, or rounding at the top
        index = xp.where(none, xp.zeros_like(index), index)
    return index, none


def last_positive(weights):
    """``[m]``: the last index of a positive weight per row (where :func:`inverse_cdf` finds none)."""
    xp = array_namespace(weights)
    positive = xp.astype(xp.flip(weights, axis=1) > 0, xp.int8)
    return weights.shape[1] - 1 - xp.argmax(positive, axis=1)


def categorical(weights, u):
    """``[m]``: :func:`simulator.randomness.categorical_from_uniform` row by row."""
    xp = array_namespace(weights, u)
    index, none = inverse_cdf(xp.cumulative_sum(weights, axis=1), u)
    return xp.where(none, last_positive(weights), index)


def ipow(x, k):
    """:func:`simulator.numeric.ipow` per element: repeated multiplication, ``k`` a number or one per element."""
    xp = array_namespace(x)
    if isinstance(k, int):
        k = xp.full(x.shape, k, dtype=xp.int64, device=device(x))
    k = xp.broadcast_to(xp.asarray(k, device=device(x)), x.shape)
    out = x
    for j in range(2, int(xp.max(k)) + 1 if 0 not in k.shape else 1):
        out = xp.where(k >= j, out * x, out)
    return out


def distinct_rows(rows):
    """``(first [d], inverse [m])``: where each distinct row of ``rows`` ``[m, c]`` first stands (in the order found)
    and each row's index among them. Rows are ordered by two keys (the last column, then a fixed projection) and
    neighbours compared exactly, so different rows are never merged (rows of equal keys that differ stay apart;
    interleaved, a row may be kept twice — solved twice, never wrongly). ``np.unique(axis=0)`` gives the same at 20× the
    cost on LV's rows: it sorts whole rows, and a level's rows share their long draft prefix."""
    xp = array_namespace(rows)
    count, width = rows.shape
    weights = xp.asarray([1.0 / (j + 1) for j in range(width)], dtype=rows.dtype, device=device(rows))
    order = xp.argsort(rows @ weights, stable=True)
    order = order[xp.argsort(rows[order, -1], stable=True)]
    ranked = rows[order]
    new = xp.concat([xp.ones(1, dtype=xp.bool, device=device(rows)),
                     xp.any(ranked[1:] != ranked[:-1], axis=1)])
    inverse = xp.empty(count, dtype=xp.int64, device=device(rows))
    inverse[order] = xp.cumulative_sum(xp.astype(new, xp.int64)) - 1
    return order[new], inverse


def _ranking_keys(p, q, clipped: bool):
    """The score GBV ranks tokens by, higher first (:func:`simulator.verifiers.multipath.ranking`): ``q/p``, ``+∞``
    where ``p = 0``; ``clipped``: ``min(1, q/p)``, 1 where ``p = 0`` (the control's)."""
    xp = array_namespace(p, q)
    zero = p == 0
    quotient = q / xp.where(zero, xp.ones_like(p), p)
    if clipped:
        return xp.where(zero | (q >= p), xp.ones_like(p), quotient)
    return xp.where(zero, xp.full_like(p, float("inf")), quotient)


def ranking_place(p, q, x, clipped: bool = False):
    """``[m]``: the place of token ``x[i]`` in GBV's ranking of row ``i`` (0 best; ties by token id): the tokens
    scored higher, plus the tokens of equal score and smaller id — a count over the row, where the whole ranking
    (:func:`ranking_tables`) needs a sort."""
    xp = array_namespace(p, q)
    key = _ranking_keys(p, q, clipped)
    mine = xp.take_along_axis(key, x[:, None], axis=-1)
    ids = xp.arange(p.shape[-1], dtype=x.dtype, device=device(p))[None, :]
    ahead = (key > mine) | ((key == mine) & (ids < x[:, None]))
    return xp.sum(xp.astype(ahead, xp.int64), axis=-1)


def ranked_below(p, q):
    """``[m, V]``: the draft mass ranked below each token in GBV's (unclipped) ranking, summed from the worst token
    up (:func:`~simulator.verifiers.multipath.selected_law`)."""
    xp = array_namespace(p, q)
    worst_first = xp.flip(xp.argsort(-_ranking_keys(p, q, False), axis=-1, stable=True), axis=-1)
    mass = xp.take_along_axis(p, worst_first, axis=-1)
    return _scatter(worst_first, xp.cumulative_sum(mass, axis=-1, include_initial=True)[..., :-1])


def ranking_tables(p, q, clipped: bool = False):
    """GBV's ranking (:func:`simulator.verifiers.multipath.ranking`) per row: ``rank [m, V]``, each token's place
    (0 best; ``q/p`` descending, ``p = 0`` first, ties by token id; ``clipped``: by ``min(1, q/p)``, the
    control's), and ``lower [m, V]`` (:func:`ranked_below`)."""
    xp = array_namespace(p, q)
    order = xp.argsort(-_ranking_keys(p, q, clipped), axis=-1, stable=True)
    places = xp.broadcast_to(xp.arange(p.shape[-1], dtype=xp.int64, device=device(p)), p.shape)
    return _scatter(order, places), ranked_below(p, q)


def _scatter(index, values):
    """``out[i, index[i, j]] = values[i, j]`` for a permutation ``index`` per row (the inverse of a gather). The
    array API has no scatter: numpy's ``put_along_axis``, the tensor's own ``scatter`` elsewhere (an inverse
    permutation by a second sort costs ten times more on torch)."""
    if isinstance(values, np.ndarray):
        out = np.empty_like(values)
        np.put_along_axis(out, index, values, axis=-1)
        return out
    return values.new_empty(values.shape).scatter_(-1, index, values)
