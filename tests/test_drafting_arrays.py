"""The drafting schemes' array kernels draw as the reference schemes do, uniform for uniform, on numpy and torch
(simulator.drafting.arrays against simulator.drafting.SCHEMES under ReplayRandomness)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.drafting import SCHEMES
from simulator.drafting.arrays import ARRAY_SCHEMES, array_scheme
from simulator.errors import InvalidParameterError
from simulator.randomness import ReplayRandomness


def _libraries():
    torch = pytest.importorskip("torch")
    return [("numpy", np.asarray), ("torch", torch.as_tensor)]


@pytest.mark.parametrize("name", sorted(ARRAY_SCHEMES))
def test_kernels_draw_as_the_reference_schemes(name):
    rng = np.random.default_rng(7)
    for _ in range(200):
        vocab = int(rng.integers(2, 9))
        count = int(rng.integers(1, min(vocab, 4) + 1))
        rows = rng.random((3, vocab)) * (rng.random((3, vocab)) > 0.3)
        rows[:, 0] += 0.01
        rows /= rows.sum(axis=1, keepdims=True)
        if name == "without-replacement" and ((rows > 0).sum(axis=1) < count).any():
            continue
        uniforms = rng.random((3, count))
        uniforms[rng.random(uniforms.shape) < 0.05] = 0.0  # the edge of [0, 1)
        expected = [list(SCHEMES[name](list(rows[i]), count, ReplayRandomness(list(uniforms[i])))) for i in range(3)]
        for _, convert in _libraries():
            drawn = np.asarray(ARRAY_SCHEMES[name](convert(rows), convert(uniforms))).tolist()
            assert drawn == expected


def test_a_drawn_token_is_never_drawn_again_without_replacement():
    rows = np.array([[0.97, 0.01, 0.01, 0.01]])
    drawn = ARRAY_SCHEMES["without-replacement"](rows, np.array([[0.5, 0.5, 0.5]]))
    assert sorted(drawn[0].tolist()) == sorted(set(drawn[0].tolist())) and drawn[0, 0] == 0


def test_too_little_mass_and_unknown_schemes_name_the_drafting():
    with pytest.raises(InvalidParameterError) as err:
        ARRAY_SCHEMES["without-replacement"](np.array([[0.5, 0.5, 0.0]]), np.array([[0.1, 0.2, 0.3]]))
    assert err.value.field == "drafting"
    with pytest.raises(InvalidParameterError) as err:
        array_scheme("top-k")
    assert err.value.field == "drafting" and "iid" in str(err.value)
