"""The shared array arithmetic (simulator/array_ops.py), and K-SEQ's ``ρ*`` in its array step
(simulator/verifiers/single_step_arrays.py): one implementation, bit-identical on numpy and torch, and equal row by
row to the scalar functions the reference rules use."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import array_ops
from simulator.numeric import ipow, ratio, residual
from simulator.verifiers import single_step_arrays
from simulator.randomness import categorical_from_uniform
from simulator.verifiers.single_step import kseq_rho

torch = pytest.importorskip("torch")


def _rows(rng: np.random.Generator, m: int, v: int) -> np.ndarray:
    w = rng.random((m, v)) * (rng.random((m, v)) > 0.3)
    w[w.sum(1) == 0, 0] = 1.0
    return w / w.sum(1, keepdims=True)


def test_shared_array_arithmetic_is_the_scalar_reference_on_numpy_and_torch_bit_for_bit():
    rng = np.random.default_rng(11)
    p, q = _rows(rng, 400, 6), _rows(rng, 400, 6)
    u = rng.random(400)
    u[:3] = [0.0, 1.0, 0.5]
    k = rng.integers(1, 5, 400)
    x, y = p[:, 0] * (rng.random(400) > 0.2), q[:, 1] * (rng.random(400) > 0.2)
    cases = {
        "ratio": (lambda m, a, b: m.ratio(a, b), (x, y), [ratio(a, b) for a, b in zip(x, y)]),
        "residual": (lambda m, a, b: m.positive_residual(a - b, a), (q, p),
                     [residual(list(a), list(b)) for a, b in zip(q, p)]),
        "categorical": (lambda m, w, s: m.categorical(w, s), (p, u),
                        [categorical_from_uniform(float(s), list(w)) for w, s in zip(p, u)]),
        "ipow": (lambda m, a, e: m.ipow(a, e), (x, k), [ipow(float(a), int(e)) for a, e in zip(x, k)]),
        "kseq_rho": (lambda m, a, b: single_step_arrays.kseq_rho(a, b, np.asarray(k)) if isinstance(a, np.ndarray)
                     else single_step_arrays.kseq_rho(a, b, torch.from_numpy(k)), (p, q),
                     [kseq_rho(tuple(map(float, a)), tuple(map(float, b)), int(e)) for a, b, e in zip(p, q, k)]),
    }
    for name, (fn, args, expected) in cases.items():
        on_numpy = np.asarray(fn(array_ops, *args))
        on_torch = fn(array_ops, *(torch.from_numpy(np.asarray(a)) for a in args)).numpy()
        assert np.array_equal(on_numpy, on_torch), name
        assert np.array_equal(on_numpy, np.asarray(expected, dtype=on_numpy.dtype)), name


def test_ranking_place_counts_what_the_sort_ranks():
    """GBV reads a drafted token's place by a count over the row (``ranking_place``); it must be the place the
    reference's sort gives (``multipath.ranking``: ``q/p`` descending, ``p = 0`` first, ties by token id) — here on
    rows full of ties (equal ratios, several ``p = 0``), both rankings, every token."""
    from simulator.array_ops import ranking_place
    from simulator.verifiers.multipath import _clipped, _unclipped, ranking
    rng = np.random.default_rng(3)
    p = rng.integers(0, 3, (200, 5)).astype(float)
    q = rng.integers(0, 3, (200, 5)).astype(float)
    for clipped, score in ((False, _unclipped), (True, _clipped)):
        for x in range(5):
            got = ranking_place(p, q, np.full(200, x), clipped)
            expected = [ranking(list(pr), list(qr), score).index(x) for pr, qr in zip(p, q)]
            assert got.tolist() == expected


def test_kseq_rho_in_blocks_is_the_reference_row_by_row(monkeypatch):
    """numpy's ``kseq_rho`` works through blocks of rows (``KSEQ_BLOCK_ROWS``) on transposed copies: a batch of
    several blocks, the last one short, each row with its own ``k``, must give the scalar reference's ``ρ*`` on
    every row, bit for bit (a block boundary that dropped or shifted a row's ``k`` would not)."""
    monkeypatch.setattr(single_step_arrays, "KSEQ_BLOCK_ROWS", 64)
    rng = np.random.default_rng(5)
    p, q = _rows(rng, 200, 7), _rows(rng, 200, 7)
    k = rng.integers(1, 5, 200)
    expected = [kseq_rho(tuple(map(float, a)), tuple(map(float, b)), int(e)) for a, b, e in zip(p, q, k)]
    assert np.array_equal(single_step_arrays.kseq_rho(p, q, k), expected)
    shifted = np.roll(k, 1)
    assert not np.array_equal(single_step_arrays.kseq_rho(p, q, shifted), expected)


def test_guided_inverse_cdf_is_the_full_search_on_numpy_and_torch():
    """The guide-table draw (``guided_inverse_cdf``) must return the full inverse-CDF search's token and "none"
    flag for every row and uniform: rows with zeros (flat running sums), a row of one positive weight, weights of
    wildly different sizes, a row of zeros, uniforms at 0, on every bucket edge ``b/G`` and just below it, and
    just below 1 (``1 − 2^−53``) — with as many buckets as the engine uses and with fewer than tokens. A table
    whose settled buckets are off by one must be caught by the same comparison."""
    rng = np.random.default_rng(8)
    w = _rows(rng, 300, 7)
    w[0] = [0, 0, 0, 1.0, 0, 0, 0]
    w[1] = [1e-300, 1.0, 0, 0, 1e-17, 0, 0]
    w[2] = [0.0] * 7
    w[3] = [1 / 3, 1 / 3, 0, 1 / 3, 0, 0, 0]
    running = np.cumsum(w, axis=1)
    for buckets in (array_ops.guide_buckets(7), 4):
        edges = np.arange(buckets) / buckets
        u = np.concatenate([[0.0, 1 - 2**-53, 1.0], edges, np.nextafter(edges[1:], 0), rng.random(5000)])
        ctx = np.concatenate([rng.integers(0, 4, 2 * buckets + 2), rng.integers(0, 300, 5000)])
        expected = array_ops.inverse_cdf(running[ctx], u)
        guide = array_ops.guide_table(running, buckets)
        assert (guide < 0).any() and (guide >= 0).any()  # both kinds of bucket are exercised
        for lib in (np, torch):
            to = (lambda a: a) if lib is np else torch.from_numpy
            index, none = array_ops.guided_inverse_cdf(to(running), to(guide), to(ctx), to(u))
            assert np.array_equal(np.asarray(none), expected[1])
            assert np.array_equal(np.asarray(index)[~expected[1]], expected[0][~expected[1]])
        wrong = np.where(guide >= 0, np.minimum(guide + 1, 7), guide).astype(guide.dtype)
        index, none = array_ops.guided_inverse_cdf(running, wrong, ctx, u)
        assert not np.array_equal(np.where(none, -1, index), np.where(expected[1], -1, expected[0]))


def test_distinct_rows_merges_equal_rows_only_on_numpy_and_torch():
    """Every row must map to a representative equal to it in every column (so merging never changes a problem),
    and two different rows with the same sort keys (last column and projection: ``2·1 = 6·(1/3)``) must stay
    apart; rows of distinct keys that are equal must share one (the count is numpy's ``unique``)."""
    rng = np.random.default_rng(3)
    base = rng.random((40, 4))
    base[0] = [2.0, 0.0, 0.0, 0.5]
    base[1] = [0.0, 0.0, 6.0, 0.5]  # same keys as row 0, a different row
    rows = base[rng.integers(0, 40, 2000)]
    for lib in (np, torch):
        to = (lambda a: a) if lib is np else torch.from_numpy
        first, inverse = (np.asarray(a) for a in array_ops.distinct_rows(to(rows)))
        assert np.array_equal(rows[first][inverse], rows)
        plain = rows[(rows[:, 3] != 0.5)]  # without the pair of equal keys, which interleave when sorted
        assert len(array_ops.distinct_rows(to(plain))[0]) == len(np.unique(plain, axis=0))
    wrong = np.where(np.arange(2000) % 2 == 0, inverse, 0)
    assert not np.array_equal(rows[first][wrong], rows)


def test_take_rows_is_fancy_indexing_on_numpy_and_torch():
    """``take_rows`` must read the rows (or blocks) ``table[index]`` reads — repeats, any order, none — on both
    libraries; a gather along the other axis (the control) reads other numbers."""
    rng = np.random.default_rng(3)
    for table in (rng.random((40, 6)), rng.random((40, 3, 5))):
        for index in (rng.integers(0, 40, 500), np.array([39, 0, 0, 7]), np.zeros(0, dtype=np.int64)):
            assert np.array_equal(array_ops.take_rows(table, index), table[index])
            got = array_ops.take_rows(torch.from_numpy(table), torch.from_numpy(index))
            assert np.array_equal(got.numpy(), table[index])
    table, index = rng.random((6, 6)), np.array([1, 4])
    assert not np.array_equal(np.take(table, index, axis=1), table[index])
