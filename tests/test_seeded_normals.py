"""The seeded normals on arrays (:mod:`simulator.models.seeded_normals`) are numpy's, bit for bit: row ``i`` is
``default_rng(SeedSequence(entropy[i])).standard_normal(count)``. The synthetic model's rows are built from them, and
every Monte Carlo number depends on those rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.models import seeded_normals as sn
from simulator.models import ContextTree, SyntheticModel
from simulator.models.model_pairs import _context_seed


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


@pytest.mark.parametrize("length, streams, count", [(1, 300, 45), (2, 40, 1), (4, 500, 7), (5, 2000, 45),
                                                    (6, 20000, 45), (9, 300, 200)])
def test_rows_are_numpys_generators(length, streams, count):
    """Entropy of one to nine words (the pool of four filled, and words mixed in past it), ``count`` from 1 to 200:
    every draw the same bits as numpy's own generator. 20,000 streams × 45 draws hold hundreds of wedge tests and
    tail draws (left to numpy)."""
    entropy = np.random.default_rng(length).integers(0, 2**32, size=(streams, length), dtype=np.uint32)
    assert _same(sn.standard_normals(entropy, count), sn.numpy_normals(entropy, count))


def test_every_path_of_the_ziggurat_is_taken_and_numpy_finishes_what_the_arrays_cannot():
    """The rows are right on each path: all draws direct, a wedge test (accepted and refused), the tail layer and a
    context running past the words drawn ahead (left to numpy through ``fallback``, counted here)."""
    assert sn._trusted() is not None
    entropy = np.random.default_rng(7).integers(0, 2**32, size=(30000, 3), dtype=np.uint32)
    handed: list[int] = []

    def fallback(rows, count):
        handed.append(len(rows))
        return sn.numpy_normals(rows, count)

    out = sn._normals(entropy, 45, fallback)
    assert _same(out, sn.numpy_normals(entropy, 45))
    assert sum(handed) > 100  # tail draws: about one context in a hundred
    saved = sn._EXTRA_RAWS
    try:
        sn._EXTRA_RAWS = 1  # few words ahead: contexts with a refused wedge test run past them
        handed.clear()
        assert _same(sn._normals(entropy[:3000], 45, fallback), sn.numpy_normals(entropy[:3000], 45))
        assert sum(handed) > 30
    finally:
        sn._EXTRA_RAWS = saved


def _uniform_word(u53: int, after: int) -> tuple[int, int]:
    """A state whose output is the word ``u53 << 11`` (a uniform of ``u53 / 2^53``) one step after a state whose
    output is ``after``, and the odd increment between them."""
    mult, mask = sn._PCG_MULT, sn._M128
    first = after  # high half 0: the output is the low half
    for high in range(1, 64):
        second = (high << 64) | ((u53 << 11) ^ high)  # high < 2^58: no rotation, the output is high ^ low
        inc = (second - first * mult) & mask
        if inc & 1:
            return first, inc
    raise AssertionError("no odd increment")


def _accepts(generator, layer: int, abscissa: int, u53: int) -> bool:
    """Whether numpy returns the wedge draw of this layer and abscissa when its uniform is ``u53 / 2^53``."""
    first, inc = _uniform_word(u53, layer | (abscissa << 9))
    inverse = pow(sn._PCG_MULT, -1, 1 << 128)
    generator.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": ((first - inc) * inverse) & sn._M128,
                                                                         "inc": inc}, "has_uint32": 0, "uinteger": 0}
    value = generator.standard_normal()
    return value == abscissa * sn._trusted().width[layer]


@pytest.mark.parametrize("layer", [1, 2, 17, 128, 200, 254, 255])
def test_the_wedge_heights_are_numpys_to_well_within_the_margin(layer):
    """The wedge test ``(f[i−1] − f[i])·u + f[i] < exp(−x²/2)`` with this module's heights decides as numpy's: the
    abscissa where numpy's decision turns (found by bisection, the uniform ½) brackets this module's left side to
    within 1e-14, far inside :data:`~simulator.models.seeded_normals.WEDGE_MARGIN`, past which decisions go to numpy."""
    tables = sn._trusted()
    generator = np.random.Generator(np.random.PCG64(0))
    u53 = 2**52  # u = 1/2
    low, high = int(tables.threshold[layer]), 2**52 - 1
    assert _accepts(generator, layer, low, u53) and not _accepts(generator, layer, high, u53)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if _accepts(generator, layer, mid, u53) else (low, mid)
    lhs = (tables.height[layer - 1] - tables.height[layer]) * 0.5 + tables.height[layer]
    upper, lower = (math.exp(-0.5 * (a * tables.width[layer]) ** 2) for a in (low, high))
    assert lower - 1e-14 <= lhs <= upper + 1e-14
    assert sn.WEDGE_MARGIN >= 100 * 1e-14


def test_the_synthetic_models_rows_come_from_its_context_generators():
    """``row_arrays`` over a :class:`ContextTree` and over a list of contexts of mixed lengths (a seed of 2^32 and
    more takes numpy's generators one by one) gives each context's rows as ``p(context)`` and ``q(context)``."""
    for seed in (3, 2**32 + 3):
        model = SyntheticModel(5, rho=0.4, tau_p=0.8, seed=seed)
        tree = ContextTree(5, 3)
        p, q = model.row_arrays(tree)
        contexts = list(tree)
        assert [tree[i] for i in range(len(tree))] == contexts and len(contexts) == 1 + 5 + 25 + 125
        assert all(np.array_equal(p[i], model.p(c)) and np.array_equal(q[i], model.q(c))
                   for i, c in enumerate(contexts))
        mixed = [(4, 4), (), (1,), (0, 2, 3), (2,)]
        p2, q2 = model.row_arrays(mixed)
        assert all(np.array_equal(q2[i], model.q(c)) for i, c in enumerate(mixed))
    normals = sn.standard_normals(np.array([[3, 2, 4, 1]], dtype=np.uint32), 15)
    assert _same(normals[0], _context_seed(3, (4, 1)).standard_normal(15))
