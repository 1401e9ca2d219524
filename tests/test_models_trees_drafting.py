"""Model pairs, topologies and drafting schemes against hand derivations."""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

from exact.enumeration import enumerate_outcomes
from simulator.drafting import draft_tree
from simulator.errors import InvalidDistributionError, InvalidParameterError, InvalidTreeError
from simulator.models import ModelView, RandomRationalModel, SyntheticModel, TableModel
from simulator.numeric import is_rational
from simulator.trees import DraftTree, make_topology


# ---- models -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed, context", [(12, (1, 4, 0)), (12, ()), (2**40 + 7, (2, 2))])
def test_synthetic_rows_follow_spec_formula(seed, context):
    # The spec's generator, SeedSequence([seed, len(context), *context]) as a list, against the model's rows one
    # at a time and all at once; a seed past 32 bits takes SeedSequence's own word split.
    m = SyntheticModel(vocab=5, rho=0.3, tau_p=0.7, tau_q=1.9, seed=seed)
    key = np.random.SeedSequence([seed, len(context), *context])
    u, ep, eq = np.random.default_rng(key).standard_normal((3, 5))
    lp, lq = 0.3 * u + 0.7 * ep, 0.3 * u + 0.7 * eq
    p, q = np.exp(lp / 0.7) / np.exp(lp / 0.7).sum(), np.exp(lq / 1.9) / np.exp(lq / 1.9).sum()
    np.testing.assert_allclose(m.p(context), p, rtol=1e-13)
    np.testing.assert_allclose(m.q(context), q, rtol=1e-13)
    rows = m.row_arrays([context, (0,)])
    np.testing.assert_allclose(rows[0][0], p, rtol=1e-13)
    np.testing.assert_allclose(rows[1][0], q, rtol=1e-13)
    assert not np.allclose(rows[1][1], q)  # another context's row: the comparison can fail


def test_synthetic_rows_do_not_depend_on_query_order():
    a, b = SyntheticModel(vocab=4, seed=1), SyntheticModel(vocab=4, seed=1)
    contexts = [(), (0,), (3, 2), (2, 3), (0, 0, 1)]
    first = {c: a.q(c) for c in contexts}
    second = {c: b.q(c) for c in reversed(contexts)}
    assert first == second
    assert a.q((3, 2)) != a.q((2, 3))  # prefix-dependent


def test_synthetic_extremes():
    same = SyntheticModel(vocab=4, rho=1.0, seed=2)
    assert same.p((1,)) == same.q((1,))  # ρ = 1: shared logits
    cold = SyntheticModel(vocab=4, tau_p=1e-6, tau_q=1e-6, seed=2)
    assert max(cold.p(())) == pytest.approx(1.0) and all(np.isfinite(cold.p(())))
    assert SyntheticModel(vocab=1).p(()) == [1.0]
    for field, kwargs in [("rho", {"rho": 1.5}), ("tau_p", {"tau_p": 0.0}), ("tau_q", {"tau_q": -1.0}),
                          ("vocab", {"vocab": 0}), ("seed", {"seed": -1}), ("rho", {"rho": float("nan")})]:
        with pytest.raises(InvalidParameterError) as err:
            SyntheticModel(**kwargs)
        assert err.value.field == field


def test_random_rational_rows_are_exact_with_zeros():
    m = RandomRationalModel(vocab=4, seed=3, zero_prob=0.5)
    rows = [m.p((i,)) for i in range(4)] + [m.q((i, j)) for i in range(4) for j in range(4)]
    assert all(sum(r) == 1 and all(is_rational(x) for x in r) for r in rows)
    assert any(x == 0 for r in rows for x in r)
    assert m.q((1, 2)) == RandomRationalModel(vocab=4, seed=3, zero_prob=0.5).q((1, 2))


def test_table_model_from_json_defaults_and_errors():
    m = TableModel.from_json({"vocab": 2, "p": {"*": ["1/2", "1/2"], "1": [1, 0]}, "q": {"": ["1/3", "2/3"]}})
    assert m.p((1,)) == [1, 0] and m.p((0, 1)) == [F(1, 2), F(1, 2)]
    with pytest.raises(InvalidDistributionError) as err:
        m.q((0,))
    assert err.value.field == 'q["0"]'
    with pytest.raises(InvalidDistributionError) as err:
        TableModel.from_json({"vocab": 2, "p": {"": ["1/2", "1/3"]}, "q": {"": [1, 0]}})
    assert err.value.field == 'table.p[""]'
    with pytest.raises(InvalidParameterError) as err:
        TableModel.from_json({"vocab": 2, "p": {"": [1, 0]}})
    assert err.value.field == "table.q"


def test_model_view_converts_floats_exactly_and_validates():
    view = ModelView(SyntheticModel(vocab=3, seed=0), "fraction")
    row = view.q((1,))
    assert sum(row) == 1 and all(is_rational(x) for x in row)

    class Broken:
        vocab = 2

        def p(self, context):
            return [0.5, float("nan")]

        def q(self, context):
            return [0.7, 0.7]

    with pytest.raises(InvalidDistributionError) as err:
        ModelView(Broken(), "float").p(())
    assert err.value.field == 'p[""][1]'
    with pytest.raises(InvalidDistributionError) as err:
        ModelView(Broken(), "float").q((0,))
    assert err.value.field == 'q["0"]'


# ---- topologies ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,depth,b,parents", [
    ("chain", 3, 1, [-1, 0, 1, 2]),
    ("chain", 0, 1, [-1]),
    ("multi-chain", 2, 2, [-1, 0, 0, 1, 2]),
    ("complete", 2, 2, [-1, 0, 0, 1, 1, 2, 2]),
    ("binary", 2, 5, [-1, 0, 0, 1, 1, 2, 2]),
    # tapered: root b children; sibling idx i of s siblings gets max(s − i, 1) children (App. G)
    ("tapered", 2, 2, [-1, 0, 0, 1, 1, 2]),
    ("tapered", 3, 2, [-1, 0, 0, 1, 1, 2, 3, 3, 4, 5]),
    ("tapered", 2, 3, [-1, 0, 0, 0, 1, 1, 1, 2, 2, 3]),
])
def test_topologies_match_hand_built_parent_lists(name, depth, b, parents):
    assert list(make_topology(name, depth, b).parents) == parents


@pytest.mark.parametrize("parents,field", [
    ([], "parents"), ([0, 0], "parents[0]"), ([-1, 1], "parents[1]"), ([-1, 0, 0, 1, 2, 1], "parents[5]"),
    ([-1, "0"], "parents[1]"),
])
def test_malformed_trees_name_the_field(parents, field):
    with pytest.raises(InvalidTreeError) as err:
        make_topology("explicit", parents=parents)
    assert err.value.field == field


def test_draft_tree_api_and_token_errors():
    tree = DraftTree([-1, 0, 0, 1], [None, 2, 0, 1], vocab=3)
    assert tree.children(0) == (1, 2) and tree.depth(3) == 2 and tree.path(3) == (2, 1)
    for tokens, field in [([None, 2, 0], "tokens"), ([0, 2, 0, 1], "tokens[0]"), ([None, 2, 3, 1], "tokens[2]")]:
        with pytest.raises(InvalidTreeError) as err:
            DraftTree([-1, 0, 0, 1], tokens, vocab=3)
        assert err.value.field == field
    with pytest.raises(InvalidParameterError) as err:
        make_topology("complete", depth=-1)
    assert err.value.field == "depth"
    with pytest.raises(InvalidParameterError) as err:
        make_topology("ring")
    assert err.value.field == "topology"


# ---- drafting ------------------------------------------------------------------------------------------
P = [F(1, 2), F(1, 3), F(1, 6), F(0)]


def tree_law(scheme: str, children: int, p=P) -> dict:
    model = TableModel(len(p), {None: p}, {None: p})
    view = ModelView(model, "fraction")
    topology = make_topology("complete", 1, children)
    law: dict = {}
    for draft, prob in enumerate_outcomes(lambda rng: draft_tree(topology, view, scheme, rng)):
        key = draft.tree.tokens[1:]
        law[key] = law.get(key, 0) + prob
    return law


def test_iid_drafting_law():
    law = tree_law("iid", 2)
    assert law[(0, 0)] == F(1, 4) and law[(1, 2)] == F(1, 18) and sum(law.values()) == 1
    assert all(3 not in k for k in law)


def test_without_replacement_drafting_law_and_short_support():
    law = tree_law("without-replacement", 2)
    # P(x1, x2) = p(x1) p(x2) / (1 − p(x1))
    assert law[(1, 0)] == F(1, 3) * F(1, 2) / (1 - F(1, 3))
    assert law[(2, 1)] == F(1, 6) * F(1, 3) / (1 - F(1, 6))
    assert sum(law.values()) == 1 and all(len(set(k)) == 2 for k in law)
    # Only 3 tokens have draft mass: asking for 4 children gives 3 (never a zero-probability child).
    assert {len(k) for k in tree_law("without-replacement", 4)} == {3}
    assert tree_law("without-replacement", 3, [F(1), F(0), F(0), F(0)]) == {(0,): 1}


def test_almost_greedy_and_top_k_drafting():
    law = tree_law("almost-greedy", 3)
    # top-2 fixed (0, 1), the last child from the rest renormalised: only token 2 has mass there.
    assert law == {(0, 1, 2): 1}
    law = tree_law("almost-greedy", 2)
    assert law == {(0, 1): F(1, 3) / F(1, 2), (0, 2): F(1, 6) / F(1, 2)}
    assert tree_law("top-k", 2) == {(0, 1): 1}
    # ties in p are broken by token id
    assert tree_law("top-k", 2, [F(1, 3), F(1, 3), F(1, 3), F(0)]) == {(0, 1): 1}
    assert tree_law("top-k", 9) == {(0, 1, 2): 1}


def test_unknown_drafting_scheme_is_named():
    with pytest.raises(InvalidParameterError) as err:
        tree_law("beam", 2)
    assert err.value.field == "drafting"
