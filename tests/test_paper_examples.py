"""The papers' worked examples (docs/rules.md, worked examples), reproduced exactly with rationals."""

from fractions import Fraction as F

from exact import certify, round_law
from exact.recursions.bounds import chain_coupling_bound
from simulator.drafting import FixedShape
from simulator.models import ModelView, TableModel
from simulator.trees import make_topology

from oracles import marginal

CHAIN2 = make_topology("chain", 2)


def test_block_example_token_verification_is_10_9(block_example):
    cert = certify(block_example, FixedShape(CHAIN2), "tv-sps")
    assert cert.lossless and cert.tvd == 0
    # Leviathan et al.: α = 1 − TV(p, q) = 2/3 per token, E[τ] = α + α² = 10/9.
    assert cert.expected_accepted == F(10, 9)


def test_block_example_block_verification_is_11_9(block_example):
    law = round_law(block_example, FixedShape(CHAIN2), "bv")
    # Hand derivation from the paper's description: AB, BB always accepted; BA: B accepted, then A w.p. 1/2;
    # AA accepted w.p. 1/4 else nothing.  P(τ≥1) = 2/9+1/9+2/9+4/9·1/4 = 6/9,
    # P(τ≥2) = 2/9+1/9+2/9·1/2+4/9·1/4 = 5/9.
    assert law.profile() == [F(6, 9), F(5, 9)]
    assert law.expected_accepted() == F(11, 9)
    assert law.discrepancies()[0] == 0


def test_block_example_unconstrained_coupling_bound_is_12_9(block_example):
    view = ModelView(block_example, "fraction")
    assert chain_coupling_bound(view, 2) == F(12, 9)
    # Greedy BV attains the bound (Block Verification, Sun et al., ICLR 2025, Lemma 9 / Theorem 3) and stays lossless.
    cert = certify(block_example, FixedShape(CHAIN2), "greedy-bv")
    assert cert.lossless and cert.expected_accepted == F(12, 9)


def test_greedy_bv_without_modification_gives_ba_one_third(block_example):
    # Appendix C: P(first two tokens = BA) = 2/9·1 + 4/9·3/4·1/3 = 1/3 instead of M_b(BA) = 2/9.
    lossy = round_law(block_example, FixedShape(CHAIN2), "bug-greedy-bv-nomod")
    assert marginal(lossy.completed(), 2)[(1, 0)] == F(1, 3)
    fixed = round_law(block_example, FixedShape(CHAIN2), "greedy-bv")
    assert marginal(fixed.completed(), 2)[(1, 0)] == F(2, 9)
    cert = certify(block_example, FixedShape(CHAIN2), "bug-greedy-bv-nomod")
    assert not cert.lossless and cert.counterexample is not None


def test_rrs_and_rrsw_single_step_acceptance():
    # docs/rules.md: p = [.5,.3,.2], q = [.2,.3,.5], k = 2: RRS with replacement 0.76, without replacement 0.82.
    p, q = [F(5, 10), F(3, 10), F(2, 10)], [F(2, 10), F(3, 10), F(5, 10)]
    model = TableModel(3, {None: p}, {None: q})
    star = make_topology("complete", 1, 2)
    assert round_law(model, FixedShape(star), "tv-rrs").profile() == [F(76, 100)]
    assert round_law(model, FixedShape(star, "without-replacement"), "tv-rrsw").profile() == [F(82, 100)]
