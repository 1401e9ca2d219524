"""Oracles computed independently of the code under test."""

from __future__ import annotations

import itertools
from fractions import Fraction


def target_joint(model, height: int) -> dict[tuple[int, ...], Fraction]:
    """``q^(H+1)`` by brute force over Σ^(H+1), straight from the model's rows (no engine code)."""
    out = {}
    for seq in itertools.product(range(model.vocab), repeat=height + 1):
        prob = Fraction(1)
        for k in range(len(seq)):
            prob *= Fraction(model.q(seq[:k])[seq[k]])
        if prob:
            out[seq] = prob
    return out


def marginal(law: dict[tuple[int, ...], Fraction], length: int) -> dict[tuple[int, ...], Fraction]:
    out: dict[tuple[int, ...], Fraction] = {}
    for seq, prob in law.items():
        out[seq[:length]] = out.get(seq[:length], 0) + prob
    return out


def recursion_matches_enumeration(name: str, shape: str, depth: int, branching: int, scheme: str,
                                  seeds: range) -> None:
    """Assert that a rule's exact recursion (``certify --method recursion``) gives, outcome by outcome, the law that
    enumerating the reference rule gives, on random exact models with zeros; skip where the rule is undefined."""
    import pytest

    from exact.certificate import recursion_law, view_law
    from simulator.drafting import FixedShape
    from simulator.models import ModelView, RandomRationalModel
    from simulator.trees import make_topology
    from simulator.verifiers import VERIFIERS

    if scheme not in VERIFIERS[name].lossless_under:
        pytest.skip(f"{name} is not defined under {scheme}")
    drafter = FixedShape(make_topology(shape, depth, branching), scheme)
    for seed in seeds:
        view = ModelView(RandomRationalModel(vocab=3, seed=seed, zero_prob=0.2), "fraction")
        assert recursion_law(view, drafter, name).outcomes == view_law(view, drafter, VERIFIERS[name].fn).outcomes


def recursion_in_floats_agrees(name: str) -> None:
    """Assert that a rule's exact recursion in float64 gives each outcome's probability of its run in fractions to
    1e-12 (a synthetic model, complete(b = 2, H = 2)), and that both laws sum to 1."""
    import numpy as np
    import pytest

    from exact.certificate import recursion_law
    from simulator.drafting import FixedShape
    from simulator.models import ModelView, SyntheticModel
    from simulator.trees import make_topology

    model, drafter = SyntheticModel(3, seed=1), FixedShape(make_topology("complete", 2, 2))
    exact = recursion_law(ModelView(model, "fraction"), drafter, name)
    rounded = recursion_law(ModelView(model, "float"), drafter, name)
    for outcome, prob in exact.outcomes.items():
        assert rounded.outcomes[outcome] == pytest.approx(float(prob), rel=1e-12, abs=1e-15)
    assert sum(exact.outcomes.values()) == Fraction(1)
    assert np.isclose(sum(rounded.outcomes.values()), 1.0)
