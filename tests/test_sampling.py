"""Sampling mode against the exact law, replay, and determinism.

Statistical test: Pearson's chi-square goodness of fit of the sampled ``(path, y)`` counts against the
verifier's exact law, at false-alarm rate ALPHA = 1e-4 per test. The sample size is the smallest that gives
power ≥ 0.99 against every alternative at total-variation distance ≥ 0.01 (the bound of
:mod:`simulator.montecarlo.statistics`).
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
from scipy import stats

from exact import round_law
from simulator.drafting import FixedShape
from simulator.models import ModelView, SyntheticModel
from simulator.randomness import ReplayRandomness, SamplingRandomness
from simulator.montecarlo.engine import sample_rounds
from simulator.speculation import speculate
from simulator.montecarlo.statistics import sample_size
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS

ALPHA = 1e-4
DETECTABLE_TVD = 0.01
POWER = 0.99


def chi_square_rejects(samples, law: dict) -> bool:
    counts = collections.Counter((o.path, o.y) for o in samples)
    if set(counts) - set(law):
        return True  # an outcome the exact law gives probability zero
    n = sum(counts.values())
    observed = np.array([counts.get(k, 0) for k in law], dtype=float)
    expected = np.array([float(v) * n for v in law.values()])
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return statistic > stats.chi2.isf(ALPHA, len(law) - 1)


CASES = [("tv-rrs", "complete", 1, 3, "iid"), ("greedy-bv", "chain", 2, 2, "iid")]


@pytest.mark.slow
@pytest.mark.parametrize("name,shape,depth,vocab,drafting", CASES)
def test_sampling_mode_matches_exact_law_and_detects_a_control(name, shape, depth, vocab, drafting):
    model = SyntheticModel(vocab=vocab, seed=11)
    topology = make_topology(shape, depth, 2)
    law = {k: v for k, v in round_law(model, FixedShape(topology, drafting), name).law().items() if v > 0}
    n = sample_size(len(law), DETECTABLE_TVD, ALPHA, POWER)
    assert 1e5 < n < 3e5
    samples = list(sample_rounds(model, FixedShape(topology, drafting), VERIFIERS[name].fn, range(n), seed=1))
    assert not chi_square_rejects(samples, law)
    # The same test must reject a lossy rule whose law differs from this one by ≥ 0.01 in TVD.
    control = "bug-accept-all"
    control_law = round_law(model, FixedShape(topology, drafting), control).law()
    gap = sum(abs(control_law.get(k, 0) - law.get(k, 0)) for k in set(law) | set(control_law)) / 2
    assert gap >= DETECTABLE_TVD
    bad = list(sample_rounds(model, FixedShape(topology, drafting), VERIFIERS[control].fn, range(n), seed=1))
    assert chi_square_rejects(bad, law)


def test_replay_reproduces_sampling_decisions():
    model = SyntheticModel(vocab=4, seed=3)
    view = ModelView(model, "float")
    topology = make_topology("tapered", 3, 2)
    for trial in range(200):
        uniforms = np.random.default_rng([5, trial]).random(256)
        a = speculate(view, FixedShape(topology), VERIFIERS["tv-rrs"].fn, SamplingRandomness([5, trial]))
        b = speculate(view, FixedShape(topology), VERIFIERS["tv-rrs"].fn, ReplayRandomness(uniforms))
        assert a == b


def test_sampling_is_deterministic_and_independent_of_batching():
    model = SyntheticModel(vocab=3, seed=4)
    topology = make_topology("complete", 2, 2)
    fn = VERIFIERS["tv-rrs"].fn
    whole = list(sample_rounds(model, FixedShape(topology), fn, range(50), seed=9))
    again = list(sample_rounds(model, FixedShape(topology), fn, range(50), seed=9))
    parts = list(sample_rounds(model, FixedShape(topology), fn, range(0, 20), seed=9)) + \
        list(sample_rounds(model, FixedShape(topology), fn, range(20, 50), seed=9))
    assert whole == again == parts
    assert whole != list(sample_rounds(model, FixedShape(topology), fn, range(50), seed=10))
