"""The edge cases of docs/rules.md: each a test. Expected values are derived by hand in the comments."""

from __future__ import annotations

from fractions import Fraction as F

import pytest

from exact import certify, fixed_tree_law, round_law
from simulator.drafting import FixedShape
from simulator.errors import (ExactnessError, InvalidDistributionError, RandomnessError, UnsupportedDraftError,
                              VerifierOutputError)
from simulator.models import ModelView, RandomRationalModel, SyntheticModel, TableModel
from simulator.numeric import as_distribution, residual
from simulator.randomness import (ReplayRandomness, bernoulli_from_uniform, categorical_from_uniform)
from simulator.speculation import speculate
from simulator.trees import DraftTree, make_topology
from simulator.verifiers import VERIFIERS

CHAIN_RULES = ["tv-sps", "tv-rrs", "tv-rrsw", "tv-det", "bv", "greedy-bv"]
CHAIN3 = make_topology("chain", 3)


def context_free(p, q) -> TableModel:
    return TableModel(len(p), {None: p}, {None: q})


def geometric(alpha, h):
    return sum(alpha**t for t in range(1, h + 1))


@pytest.mark.parametrize("name", CHAIN_RULES)
def test_p_equals_q_accepts_everything(name):
    base = RandomRationalModel(vocab=3, seed=4)
    same = type("Same", (), {"vocab": 3, "p": staticmethod(base.q), "q": staticmethod(base.q)})()
    cert = certify(same, FixedShape(CHAIN3), name)
    # tv-det accepts x w.p. q(x), so it is the one rule that does not accept everything when p == q.
    expected = 3 if name != "tv-det" else None
    assert cert.lossless
    if expected is not None:
        assert cert.expected_accepted == expected


@pytest.mark.parametrize("name", CHAIN_RULES)
def test_q_one_hot(name):
    # q = δ_1; the drafted token is accepted iff it is 1; for SpS-type rules α = Σ min(p, q) = p(1) = 1/3.
    cert = certify(context_free([F(1, 2), F(1, 3), F(1, 6)], [F(0), F(1), F(0)]), FixedShape(CHAIN3), name)
    assert cert.lossless
    if name != "tv-det":
        assert cert.expected_accepted == geometric(F(1, 3), 3)


@pytest.mark.parametrize("name", CHAIN_RULES)
def test_p_one_hot(name):
    # The draft is always token 0; SpS accepts it w.p. q(0) = 1/4 per level: E[τ] = 1/4 + 1/16 + 1/64.
    cert = certify(context_free([F(1), F(0), F(0)], [F(1, 4), F(1, 4), F(1, 2)]), FixedShape(CHAIN3), name)
    assert cert.lossless and cert.expected_accepted == geometric(F(1, 4), 3)


@pytest.mark.parametrize("name", CHAIN_RULES)
def test_disjoint_supports_accept_nothing(name):
    cert = certify(context_free([F(1, 2), F(1, 2), F(0)], [F(0), F(0), F(1)]), FixedShape(CHAIN3), name)
    assert cert.lossless and cert.expected_accepted == 0


def test_zero_target_mass_on_a_drafted_token_is_never_accepted():
    tree = DraftTree([-1, 0, 0], [None, 0, 1], vocab=2)
    p = [(F(1, 2), F(1, 2)), None, None]
    q = [(F(0), F(1)), (F(1, 2), F(1, 2)), (F(1, 2), F(1, 2))]
    law = fixed_tree_law(tree, p, q, "tv-rrs", 2)
    # token 0 has q = 0: rejected surely; token 1 then accepted w.p. min(1, q'(1)/p(1)) = 1 with q' = δ_1.
    assert law.law() == {((1,), 0): F(1, 2), ((1,), 1): F(1, 2)}


def test_zero_draft_mass_and_ties_in_ratios():
    # p has a zero; tokens 0 and 1 share the ratio q/p = 1/2 (a tie).
    model = context_free([F(1, 4), F(1, 4), F(1, 2), F(0)], [F(1, 8), F(1, 8), F(1, 2), F(1, 4)])
    for name in ["tv-rrs", "tv-sps", "tv-det"]:
        assert certify(model, FixedShape(make_topology("complete", 2, 2)), name).lossless
    for name in ["bv", "greedy-bv"]:
        assert certify(model, FixedShape(CHAIN3), name).lossless


@pytest.mark.parametrize("name,parents,tokens", [
    ("tv-opt", [-1, 0, 0], [None, 1, 0]), ("tv-gr", [-1, 0, 0], [None, 0, 1]), ("lv-opt", [-1, 0, 0], [None, 1, 1]),
    ("lv-gr", [-1, 0, 0], [None, 1, 0]), ("gbv", [-1, 0, 1], [None, 0, 1]), ("gbv", [-1, 0, 0], [None, 1, 0]),
])
@pytest.mark.parametrize("arithmetic", ["fraction", "float"])
def test_a_drafted_token_of_zero_draft_mass_is_refused_where_the_rule_divides_by_it(name, parents, tokens, arithmetic):
    """Flow-defined rules have flows only for tuples drafting can produce, and GBV's path law divides by the
    path's draft mass: a hand-made tree holding a token of zero draft probability gets a typed error naming
    the token (drafters never produce one), not a KeyError, a ZeroDivisionError or a NaN."""
    conv = F if arithmetic == "fraction" else float
    tree = DraftTree(parents, tokens, vocab=3)
    row = (conv(1, 2), conv(0), conv(1, 2)) if arithmetic == "fraction" else (0.5, 0.0, 0.5)
    p = [row if tree.children(v) else None for v in range(len(parents))]
    q = [tuple(conv(x) for x in (F(1, 5), F(3, 10), F(1, 2)))] * len(parents)
    with pytest.raises(UnsupportedDraftError, match="token 1 has zero draft probability") as err:
        VERIFIERS[name].fn(tree, p, q, ReplayRandomness([0.5] * 12))
    assert err.value.field == "tokens"


def test_residual_with_zero_total_mass_returns_the_target_not_nan():
    q = (F(1, 2), F(1, 2))
    assert residual(q, q) == q
    assert residual((0.5, 0.5), (0.5, 0.5)) == (0.5, 0.5)
    # BV with p == q at the root only (prefix-dependent): the root residual has zero mass and stays unused.
    base = RandomRationalModel(vocab=3, seed=8)
    model = type("RootEqual", (), {"vocab": 3, "q": staticmethod(base.q),
                                   "p": staticmethod(lambda c: base.q(c) if c == () else base.p(c))})()
    assert certify(model, FixedShape(CHAIN3), "bv").lossless


def test_duplicate_siblings():
    # V = 3 with three i.i.d. children: duplicate siblings have positive probability. (With V = 2, RRSw
    # happens to survive duplicates: after one rejection its residual and draft are the same point mass.)
    model = RandomRationalModel(vocab=3, seed=1, zero_prob=0.0)
    star = make_topology("complete", 1, 3)
    assert certify(model, FixedShape(star), "tv-rrs").lossless
    assert certify(model, FixedShape(star), "tv-det").lossless
    lossy = certify(model, FixedShape(star), "tv-rrsw")  # docs/rules.md: RRSw is lossy with duplicates
    assert not lossy.lossless and lossy.counterexample is not None


def test_uniform_exactly_zero_or_one():
    assert bernoulli_from_uniform(0.0, 0) is False and bernoulli_from_uniform(0.0, F(1, 10**9)) is True
    assert bernoulli_from_uniform(1.0, 1) is True and bernoulli_from_uniform(1.0, 0.999) is False
    assert categorical_from_uniform(0.0, [0, 0, 3, 1]) == 2
    assert categorical_from_uniform(1.0, [0, 2, 3, 0]) == 2
    view = ModelView(SyntheticModel(vocab=3, seed=0), "float")
    topology = make_topology("complete", 2, 2)
    for u in (0.0, 1.0):
        out = speculate(view, FixedShape(topology), VERIFIERS["tv-rrs"].fn, ReplayRandomness([u] * 64))
        assert 0 <= out.y < 3
    with pytest.raises(RandomnessError) as err:
        ReplayRandomness([0.2, 1.5])
    assert err.value.field == "uniforms[1]"
    with pytest.raises(RandomnessError) as err:
        speculate(view, FixedShape(topology), VERIFIERS["tv-rrs"].fn, ReplayRandomness([0.5]))
    assert err.value.field == "uniforms"


@pytest.mark.parametrize("rho", [0.0, 1.0])
def test_rho_zero_and_one(rho):
    model = SyntheticModel(vocab=3, rho=rho, seed=5)
    cert = certify(model, FixedShape(CHAIN3), "bv")
    assert cert.lossless
    if rho == 1.0:  # identical logits and temperatures: p == q, all accepted
        assert cert.expected_accepted == 3


@pytest.mark.parametrize("arithmetic", ["fraction", "float"])
def test_temperatures_near_zero(arithmetic):
    model = SyntheticModel(vocab=3, tau_p=1e-4, tau_q=1e-3, seed=6)
    cert = certify(model, FixedShape(make_topology("complete", 2, 2)), "tv-rrs", arithmetic)
    assert cert.lossless and cert.tvd == cert.tvd  # not NaN


@pytest.mark.parametrize("name", CHAIN_RULES)
def test_vocab_one(name):
    cert = certify(SyntheticModel(vocab=1), FixedShape(CHAIN3), name)
    assert cert.lossless and cert.expected_accepted == 3


@pytest.mark.parametrize("name", CHAIN_RULES)
def test_depth_zero(name):
    model = RandomRationalModel(vocab=3, seed=2)
    law = round_law(model, FixedShape(make_topology("chain", 0)), name)
    assert law.law() == {((), y): model.q(())[y] for y in range(3) if model.q(())[y] > 0}
    assert law.discrepancies()[0] == 0 and law.expected_accepted() == 0


@pytest.mark.parametrize("row,field", [
    ([F(1, 2), F(-1, 2), F(1)], "p[1]"), ([0.5, float("nan"), 0.5], "p[1]"), ([0.5, 0.6, 0.0], "p"),
    ([F(1, 2), F(1, 2)], "p"), ([0.5, "x", 0.5], "p[1]"), ([0.5, float("inf"), 0.5], "p[1]"),
])
def test_invalid_rows_raise_typed_errors(row, field):
    with pytest.raises(InvalidDistributionError) as err:
        as_distribution(row, 3, "p", "fraction")
    assert err.value.field == field


def test_misuse_of_the_randomness_interface_and_bad_verifier_output():
    tree = DraftTree([-1, 0], [None, 0], vocab=2)
    p, q = [(F(1, 2), F(1, 2)), None], [(F(1, 2), F(1, 2)), (F(1, 2), F(1, 2))]
    cases = [
        (lambda t, p, q, rng: (0, rng.categorical([1, 1]) if rng.bernoulli(F(3, 2)) else 0), RandomnessError, "prob"),
        (lambda t, p, q, rng: (0, rng.categorical([0, 0])), RandomnessError, "weights"),
        (lambda t, p, q, rng: (0, rng.categorical([-1, 2])), RandomnessError, "weights[0]"),
        (lambda t, p, q, rng: (0, int(rng.bernoulli(0.5))), ExactnessError, "arithmetic"),
        (lambda t, p, q, rng: (5, 0), VerifierOutputError, "node"),
        (lambda t, p, q, rng: (0, 2), VerifierOutputError, "y"),
        (lambda t, p, q, rng: 0, VerifierOutputError, "verifier"),
    ]
    for fn, error, field in cases:
        with pytest.raises(error) as err:
            fixed_tree_law(tree, p, q, fn, 2)
        assert err.value.field == field


def test_chain_verifiers_refuse_trees():
    with pytest.raises(UnsupportedDraftError) as err:
        certify(RandomRationalModel(vocab=2), FixedShape(make_topology("complete", 2, 2)), "bv")
    assert err.value.field == "tree"


def test_gbv_selected_law_when_the_path_mass_is_below_the_last_bit():
    """GBV's law of the best path divides two differences of powers, ``((c + m p_x)^k − c^k)/((A + m)^k − A^k)``.
    Here the first chain's token 2 (``p = 1e-18``, ranked first: ``q/p`` is huge) is selected, so at depth 2
    ``A = F(2) = 1 − 1e-18`` rounds to 1 and ``m = 1e-18`` lies below its last bit: written as differences the
    law is ``0/0`` (a ZeroDivisionError in the reference, NaN in the array rule). By hand, with ``m`` cancelled: at
    ``k = 2``, ``p̃(x) = p_x (2c + m p_x)/(2A + m) ≈ p_x`` — the selected path is the best by a margin, so its
    next token follows ``p``. The reference and the array rule (numpy and torch) both give that."""
    import numpy as np
    from simulator.verifiers.multipath import selected_law
    from simulator.verifiers.batched.frame import Batch, DenseRows, GivenDraft, ReplayStream, TreeShape
    from simulator.verifiers.batched.multipath import gbv
    p_root, p_next = [0.5, 0.5, 1e-18], [0.25, 0.25, 0.5]
    q_row = [0.25, 0.25, 0.5]
    parents, tokens = [-1, 0, 0, 1, 2], [None, 2, 0, 1, 1]
    tree = DraftTree(parents, tokens, vocab=3)
    p, q = [p_root, p_next, p_next, None, None], [q_row] * 5
    law = selected_law(tree, [0, 1, 3], p, q, 2)
    assert law[1] == pytest.approx(p_next, rel=1e-12)
    exact = selected_law(tree, [0, 1, 3], [[F(x) for x in r] if r else None for r in p],
                         [[F(x) for x in r] for r in q], 2)
    assert [float(x) for x in exact[1]] == pytest.approx(law[1], rel=1e-12)  # the exact law, written as before
    rows = np.array([[p_root, p_next, p_next, q_row, q_row]]), np.array([q_row] * 5)[None]
    shape = TreeShape(tuple(parents), np, None)
    uniforms = np.full((1, 8), 0.3)
    dense = DenseRows(*rows)
    node, y = gbv(Batch(shape, GivenDraft(np.array([[0, 2, 0, 1, 1]]), dense.ids()), dense, ReplayStream(uniforms)))
    assert (int(node[0]), int(y[0])) == VERIFIERS["gbv"].fn(tree, p, q, ReplayRandomness([0.3] * 8))
