"""SpecHub (Sun, Zhou, Chen, Sun; EMNLP 2024, arXiv:2411.05289): the hub drafting scheme's pair law, the ``spechub``
verifier's step on a worked example derived by hand, its certification under hub drafting, a negative control the
same test rejects, and its proof at depth 1."""

from __future__ import annotations

import dataclasses
from fractions import Fraction as F

import pytest

from exact import certify, round_law
from exact.enumeration import enumerate_outcomes
from exact.instances import random_instances
from simulator.drafting import SCHEMES, FixedShape
from simulator.drafting.lazy_draft import Eager
from simulator.errors import InvalidParameterError, UnsupportedDraftError
from simulator.models import RandomRationalModel, TableModel
from simulator.numeric import residual
from simulator.trees import DraftTree, make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.flows import alpha_star, tuple_law
from simulator.verifiers.rules import SPECHUB, SingleStepRule
from simulator.verifiers.single_step import plan_acceptance
from simulator.verifiers.spechub import spechub_plan
from simulator.verifiers.token_tree import tv

ONE_LEVEL = make_topology("complete", 1, 2)
TWO_LEVELS = make_topology("complete", 2, 2)

# The worked example (derived by hand below): a = 0, P(x, a) = p(x), P(a, x) = p(a)p(x)/(1 − p(a)) = p(x).
P = (F(1, 2), F(1, 4), F(1, 4))
Q = (F(3, 8), F(1, 16), F(9, 16))


def _pairs(p, count=2):
    """The scheme's law of the children's tokens, enumerated from its code."""
    out = {}
    for tokens, prob in enumerate_outcomes(lambda rng: tuple(SCHEMES["hub"](p, count, rng))):
        out[tokens] = out.get(tokens, 0) + prob
    return out


def test_hub_scheme_law_at_v3_by_hand():
    # p = (3/5, 1/4, 3/20): a = 0; P(1, 0) = 1/4, P(2, 0) = 3/20; P(0, 1) = (3/5)(1/4)/(2/5) = 3/8,
    # P(0, 2) = (3/5)(3/20)/(2/5) = 9/40 (together 10/40 + 6/40 + 15/40 + 9/40 = 1).
    p = (F(3, 5), F(1, 4), F(3, 20))
    expected = {(1, 0): F(1, 4), (2, 0): F(3, 20), (0, 1): F(3, 8), (0, 2): F(9, 40)}
    assert _pairs(p) == expected
    assert tuple_law(p, 2, "hub") == expected
    # ties by token id: the uniform row's top token is 0; a zero of p is never drafted
    assert _pairs((F(1, 3),) * 3) == {(1, 0): F(1, 3), (2, 0): F(1, 3), (0, 1): F(1, 6), (0, 2): F(1, 6)}
    assert _pairs((F(1, 4), F(3, 4), F(0))) == {(0, 1): F(1, 4), (1, 0): F(3, 4)}


def test_hub_with_one_positive_token_drafts_it_alone_and_spechub_is_sps_there():
    # The short-support rule: one child, the top token; SpecHub on it accepts w.p. min(1, q(a)/p(a)) = q(a) and
    # corrects from norm((q − p)_+), so the node's output has law q.
    assert _pairs((F(0), F(1), F(0))) == {(1,): 1}
    q = (F(1, 2), F(1, 3), F(1, 6))
    plan = spechub_plan([1], (F(0), F(1), F(0)), q)
    assert plan.steps == ((0, F(1, 3)),) and plan.residual == (F(3, 4), F(0), F(1, 4))
    model = TableModel(3, {None: (F(0), F(1), F(0))}, {None: q})
    cert = certify(model, FixedShape(ONE_LEVEL, "hub"), "spechub")
    assert cert.lossless and cert.expected_accepted == F(1, 3)


def test_hub_needs_two_children_at_every_inner_node():
    for topology in (make_topology("chain", 2), make_topology("complete", 1, 3),
                     make_topology("explicit", parents=[-1, 0, 0, 1])):
        with pytest.raises(InvalidParameterError) as err:
            FixedShape(topology, "hub")
        assert err.value.field == "branching"
    with pytest.raises(InvalidParameterError) as err:
        SCHEMES["hub"](P, 3, None)
    assert err.value.field == "branching"
    FixedShape(make_topology("explicit", parents=[-1, 0, 0, 2, 2]), "hub")  # an explicit tree of pairs is fine


def test_worked_example_step_by_step():
    # p = (1/2, 1/4, 1/4), q = (3/8, 1/16, 9/16); a = 0 and every pair has mass 1/4.
    # Layer 1, (x, 0) offers x: x = 1 w.p. min(1, (1/16)/(1/4)) = 1/4 (keeps 3/16), x = 2 w.p. 1 (q(2) left 5/16).
    # Layer 2, (0, x) offers x: x = 1 w.p. 0 (keeps 1/4), x = 2 w.p. min(1, (5/16)/(1/4)) = 1 (q(2) left 1/16).
    # Layer 3, (0, ·) offers 0: min(1, (3/8)/(1/4)) = 1 (q(0) left 1/8).
    # Layer 4, (·, 0) offers 0: min(1, (1/8)/(3/16)) = 2/3 (q(0) left 0). Residual: (0, 0, 1/16) normalised.
    assert spechub_plan([1, 0], P, Q).steps == ((0, F(1, 4)), (1, F(2, 3)))
    assert spechub_plan([2, 0], P, Q).steps == ((0, F(1)), (1, F(2, 3)))  # its second step is never reached
    assert spechub_plan([0, 1], P, Q).steps == ((1, F(0)), (0, F(1)))
    assert spechub_plan([0, 2], P, Q).steps == ((1, F(1)), (0, F(1)))
    assert spechub_plan([0, 1], P, Q).residual == (0, 0, 1)
    # P(accept | pair): (1, 0) → 1 w.p. 1/4, 0 w.p. (3/4)(2/3) = 1/2; the others accept surely.
    assert plan_acceptance(spechub_plan([1, 0], P, Q), 2) == [F(1, 4), F(1, 2)]
    assert plan_acceptance(spechub_plan([2, 0], P, Q), 2) == [1, 0]
    assert plan_acceptance(spechub_plan([0, 1], P, Q), 2) == [1, 0]
    # The output law: 0: (1/4)(1/2) + 1/4 = 3/8; 1: (1/4)(1/4) = 1/16; 2: 1/4 + 1/4 + the rejected 1/16 = 9/16 = q.
    # Acceptance 15/16 = α* of the hub law: q(a) + Σ_{x≠a} min(q(x), p(x)/(1 − p(a))) = 3/8 + 1/16 + 1/2.
    assert sum(SPECHUB.outflow(P, Q, 2, "hub")) == F(15, 16) == alpha_star(P, Q, 2, "hub")[0]
    model = TableModel(3, {None: P}, {None: Q})
    cert = certify(model, FixedShape(ONE_LEVEL, "hub"), "spechub")
    assert cert.lossless and cert.tvd == 0 and cert.expected_accepted == F(15, 16)


#: a mutated SpecHub: the correction drawn from SpS's residual norm((q − p)_+) instead of what the pairs left of q
MUTATED = SingleStepRule("spechub-sps-residual",
                         plan=lambda c, p, q: dataclasses.replace(spechub_plan(c, p, q), residual=residual(q, p)))


def test_negative_control_the_same_certificate_rejects():
    # p as in the worked example, q = (0, 5/8, 3/8). Layer 1: 1 and 2 accepted surely (q left: 3/8 on 1, 1/8 on 2);
    # layer 2: (0, 1) takes 1/4 of token 1 (1/8 left), (0, 2) takes 1/8 of token 2 w.p. 1/2 (keeps 1/8); layers
    # 3–4 find q(0) = 0. Accepted 7/8; what is left of q, (0, 1/8, 0), is the correct residual (0, 1, 0). SpS's
    # residual norm((q − p)_+) = (0, 3/4, 1/4) sends 2 mass 3/8 + (1/8)(1/4) = 13/32: TVD (1/8)(1/4) = 1/32.
    q = (F(0), F(5, 8), F(3, 8))
    model = TableModel(3, {None: P}, {None: q})
    drafter = FixedShape(ONE_LEVEL, "hub")
    assert certify(model, drafter, "spechub").tvd == 0
    bad = certify(model, drafter, tv(MUTATED, "hub"))
    assert not bad.lossless and bad.tvd == F(1, 32)


def test_spechub_refuses_what_hub_drafting_cannot_produce():
    with pytest.raises(UnsupportedDraftError) as err:
        spechub_plan([1, 2], P, Q)  # neither is the top token
    assert err.value.field == "tokens"
    with pytest.raises(UnsupportedDraftError) as err:
        spechub_plan([0, 1, 2], P, Q)
    assert err.value.field == "branching"
    with pytest.raises(UnsupportedDraftError):  # under i.i.d. drafting a pair (1, 1) comes up
        certify(RandomRationalModel(3, seed=1, zero_prob=0), FixedShape(ONE_LEVEL, "iid"), "spechub")
    tree = DraftTree([-1, 0, 0], [None, 0, 0], 3)
    with pytest.raises(UnsupportedDraftError):
        VERIFIERS["spechub"].fn(tree, [P, None, None], [Q, Q, Q], None)


@pytest.mark.parametrize("topology", [ONE_LEVEL, TWO_LEVELS], ids=["depth 1", "depth 2"])
def test_lossless_on_8_random_rational_pairs_and_lazy_equals_eager(topology):
    drafter = FixedShape(topology, "hub")
    for seed in range(8):
        model = RandomRationalModel(3 if topology is TWO_LEVELS else 4, seed=seed, zero_prob=0.25)
        cert = certify(model, drafter, "spechub")
        assert cert.lossless and cert.tvd == 0, seed
        if seed < 2:  # drafting on demand draws exactly what eager drafting draws
            assert round_law(model, drafter, "spechub").outcomes == round_law(model, Eager(drafter),
                                                                              "spechub").outcomes


def test_random_instances_of_the_registry_are_pairs_everywhere():
    shapes = set()
    for inst in random_instances(VERIFIERS["spechub"], 12, seed=3):
        counts = {inst.topology.parents[1:].count(v) for v in set(inst.topology.parents[1:])}
        assert counts == {2} and inst.drafting == "hub"
        shapes.add(inst.topology.name)
        assert certify(inst.model, inst.drafter, "spechub").tvd == 0
    assert shapes == {"complete", "binary", "explicit"}


def test_prove_at_depth_1_v2():
    from exact.prove.prover import prove
    proof = prove("spechub", ONE_LEVEL, "hub", 2)
    assert proof.verdict == "PROVED"


def test_theorem_check_spechub_meets_the_lp_optimum_and_flags_a_rule_below_it():
    from exact.prove.optimum import rule_margins
    from specproof.reports.theorems import CHECKS
    fn, _ = CHECKS["spechub"]
    optimal, over_rrs, over_rrsw = fn(6, 5)
    assert optimal.instances == 6 and optimal.worst_margin == 0 and optimal.as_expected
    assert over_rrs.expected is None and over_rrsw.expected is None  # the paper's experiments, not a theorem
    # The same margin flags a lossless rule below the ceiling: deterministic RRS never reads p, so it is lossless
    # under hub drafting too. On the worked example it accepts x1 w.p. q(x1), else x2 w.p. q(x2)/(1 − q(x1)):
    # (1, 0) and (0, 1) 1/16 + 3/8 = 7/16, (2, 0) and (0, 2) 9/16 + 3/8 = 15/16; on average 11/16 = 15/16 − 1/4.
    model = TableModel(3, {None: P}, {None: Q})
    margin = rule_margins([(model, FixedShape(ONE_LEVEL, "hub"), "worked example")], ["tv-det", "spechub"],
                          equal=True)
    assert margin.worst == F(-1, 4) and "tv-det" in margin.where


def test_gate_battery_keeps_the_shapes_hub_drafting_can_draft():
    from exact.subject import subject
    from specproof.gate.battery import battery, instances
    found = instances(battery(), subject("spechub"))  # the default battery's chain is left out
    assert found and {(inst["topology"], inst["drafting"]) for inst in found} == {("complete", "hub")}


def test_layer_verification_lifts_spechub_through_its_hub_flows():
    # The plan's flows under the hub tuple law are what Layer Verification lifts: lossless at depth 2 as well.
    from simulator.verifiers.layer import lv
    lifted = lv(SPECHUB, "hub")
    for seed in (1, 7):
        model = RandomRationalModel(3, seed=seed, zero_prob=0.25)
        assert certify(model, FixedShape(TWO_LEVELS, "hub"), lifted).tvd == 0
    with pytest.raises(InvalidParameterError) as err:
        tuple_law(P, 3, "hub")
    assert err.value.field == "branching"
