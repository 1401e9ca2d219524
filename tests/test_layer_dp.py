"""Layer Verification's exact law with the deepest level summed in closed form (exact/recursions/layer_dp.py) against
enumeration of the reference rule.

The reduction is a second method: it must give the very law (every round outcome's probability, as exact fractions)
that enumerating the reference rule gives, wherever enumeration finishes — on the lossless lifts and on lossy ones
(a single-step rule drafted under a tuple law it was not written for), so that agreement is not just two zeros."""

from __future__ import annotations

import pytest

from exact import certify
from exact.certificate import recursion_law, view_law
from exact.law import OutputLaw
from exact.recursions.layer_dp import LayerReduction, layer_law
from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError
from simulator.models import ModelView, RandomRationalModel, SyntheticModel
from simulator.montecarlo.engine import run_seed
from simulator.trees import Topology, make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.layer import lv
from simulator.verifiers.rules import KSEQ, RRS, RULES, SingleStepRule
from oracles import recursion_in_floats_agrees, recursion_matches_enumeration

SHAPES = [("complete", 2, 2, "iid"), ("complete", 1, 3, "iid"), ("tapered", 2, 2, "iid"),
          ("multi-chain", 2, 2, "iid"), ("complete", 2, 2, "without-replacement")]


def _view(seed: int, vocab: int = 3) -> ModelView:
    return ModelView(RandomRationalModel(vocab=vocab, seed=seed, zero_prob=0.2), "fraction")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lv-sps", "lv-rrs", "lv-kseq"])
@pytest.mark.parametrize("shape,depth,branching,scheme", SHAPES)
def test_layer_law_equals_enumeration(name, shape, depth, branching, scheme):
    recursion_matches_enumeration(name, shape, depth, branching, scheme, range(3))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lv-opt", "lv-gr"])
def test_flow_defined_lifts_equal_enumeration(name):
    drafter = FixedShape(make_topology("complete", 2, 2))
    view = _view(1)
    assert recursion_law(view, drafter, name).outcomes == view_law(view, drafter, VERIFIERS[name].fn).outcomes


@pytest.mark.slow
def test_leaves_at_several_depths():
    """An explicit tree whose leaves lie at depths 1, 2 and 3: only the depth-3 ones are summed in closed form,
    the shallower leaves' tokens (which change their inner siblings' scores) are enumerated."""
    parents = (-1, 0, 0, 0, 1, 1, 2, 4, 4)
    drafter = FixedShape(Topology("explicit", parents))
    for seed in range(3):
        view = _view(seed)
        assert recursion_law(view, drafter, "lv-rrs").outcomes == view_law(view, drafter, VERIFIERS["lv-rrs"].fn).outcomes


@pytest.mark.parametrize("rule,law,scheme", [(RRS, "iid", "without-replacement"),
                                             (KSEQ, "iid", "without-replacement")])
def test_lossy_lifts_reproduced_exactly(rule, law, scheme):
    """A rule drafted under a tuple law it was not written for breaks Assumption 4.2: weights are clipped and
    LV is lossy. The reduction gives the same lossy law as enumerating the reference, and the certificate
    machinery rejects it."""
    drafter = FixedShape(make_topology("complete", 2, 2), scheme)
    lossy_seen = False
    for seed in range(4):
        view = _view(seed)
        outcomes, _ = layer_law(view, drafter, rule.name, law)
        assert outcomes == view_law(view, drafter, lv(rule, law)).outcomes
        lossy_seen |= OutputLaw(outcomes.items(), drafter.height, view, True).distance().tvd > 0
    assert lossy_seen


class _AcceptEverything(SingleStepRule):
    """A broken single-step rule: every candidate accepted with probability 1 (acceptances sum above 1)."""

    def token_acceptance(self, candidates, p, q, law):
        return {x: p[0] * 0 + 1 for x in candidates}


def test_acceptances_above_one_are_refused():
    """Where a rule's acceptances of a tuple sum above 1, LV clips ⊥'s weight and the closed form cannot follow:
    the reduction refuses, naming the method, rather than returning a wrong law."""
    broken = _AcceptEverything("broken", plan=RULES["rrs"].plan)
    reduction = LayerReduction(_view(1), make_topology("complete", 1, 2), "iid", broken, "iid")  # p_root: 2 tokens
    with pytest.raises(InvalidParameterError, match="method"):
        reduction.law_of_round()


class _ScaledAcceptance(SingleStepRule):
    """Every distinct candidate accepted with ``total / #distinct``: acceptances summing to ``total``."""

    total = 1.0

    def token_acceptance(self, candidates, p, q, law):
        return {x: self.total / len(set(candidates)) for x in candidates}


@pytest.mark.parametrize("excess,refused", [(1e-14, False), (1e-9, True)])
def test_float_sums_a_rounding_above_one_are_not_refused(excess, refused):
    """In floats a lossless rule's acceptances sum a few ulps either side of 1: within the Bernoulli slack (1e-12)
    the reduction runs; past it, it refuses as in fractions."""
    rule = _ScaledAcceptance("scaled", plan=RULES["rrs"].plan)
    rule.total = 1.0 + excess
    view = ModelView(SyntheticModel(3, seed=0), "float")
    reduction = LayerReduction(view, make_topology("complete", 1, 2), "iid", rule, "iid")
    if refused:
        with pytest.raises(InvalidParameterError, match="method"):
            reduction.law_of_round()
    else:
        assert sum(reduction.law_of_round().values()) == pytest.approx(1.0)


def test_layer_law_refuses_dynamic_trees():
    with pytest.raises(InvalidParameterError, match="drafter"):
        layer_law(_view(0), object(), "rrs")


@pytest.mark.slow
def test_reduction_certifies_where_enumeration_cannot():
    """complete(b = 2, H = 3) at V = 3: 3^14 ≈ 4.8 million draft trees for enumeration, 729 configurations above
    the leaves here; the certificate is exact (TVD = 0 against the target law computed apart), and its E[τ] agrees
    with the Monte Carlo engine (the array rule, a third implementation) within four standard errors."""
    model = SyntheticModel(3, 0.5, 1.0, 1.0, seed=2)
    drafter = FixedShape(make_topology("complete", 3, 2))
    cert = certify(model, drafter, "lv-rrs", method="recursion")
    assert cert.lossless and cert.tvd == 0 and cert.method == "recursion" and cert.executions == 3 ** 6
    mc = run_seed(model, drafter, "lv-rrs", VERIFIERS["lv-rrs"].fn, seed=0, trials=100_000)
    assert abs(float(cert.expected_accepted) - mc.accept_len_mean) < 4 * mc.accept_len_se


def test_reduction_in_floats_agrees_with_fractions():
    recursion_in_floats_agrees("lv-rrs")
