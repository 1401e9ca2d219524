"""One round's exact expected acceptance given its rows (``exact.enumeration.expected_acceptance``): against hand
derivations, against the enumeration of every outcome (no lumping, no restriction), against the round's law averaged
over every draft tree, and a rule the lumping is not exact for."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from exact import round_law
from exact.enumeration import (DraftedRound, LumpingChooser, enumerate_outcomes, expected_acceptance,
                               restrict_round)
from simulator.drafting import FixedShape
from simulator.drafting.dyspec import DySpecBudget
from simulator.errors import InvalidParameterError
from simulator.models import ModelView, SyntheticModel
from simulator.trees import DraftTree, make_topology
from simulator.verifiers import VERIFIERS


def _rows(rng: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    return rng.dirichlet(np.full(vocab, 0.6), size=n)


def _round(parents, tokens, p, q) -> DraftedRound:
    return restrict_round(parents, tokens, p, q, [any(par == v for par in parents) for v in range(len(parents))])


def test_sps_on_a_chain_is_the_product_of_its_acceptance_ratios():
    rng = np.random.default_rng(0)
    p, q = _rows(rng, 4, 6), _rows(rng, 4, 6)
    parents, tokens = [-1, 0, 1, 2], [0, 3, 1, 4]
    ratios = [min(1.0, q[v, tokens[v + 1]] / p[v, tokens[v + 1]]) for v in range(3)]
    by_hand = ratios[0] + ratios[0] * ratios[1] + ratios[0] * ratios[1] * ratios[2]
    got = expected_acceptance(VERIFIERS["tv-sps"].fn, _round(parents, tokens, p, q))
    assert got.accepted == pytest.approx(by_hand, abs=1e-12) and got.total == pytest.approx(1, abs=1e-12)


def test_rrs_at_a_root_with_two_children_follows_its_residual():
    rng = np.random.default_rng(1)
    p, q = _rows(rng, 3, 5), _rows(rng, 3, 5)
    parents, tokens = [-1, 0, 0], [0, 2, 4]
    a1 = min(1.0, q[0, 2] / p[0, 2])
    residual = np.maximum(q[0] - p[0], 0)
    residual /= residual.sum()
    a2 = min(1.0, residual[4] / p[0, 4])
    got = expected_acceptance(VERIFIERS["tv-rrs"].fn, _round(parents, tokens, p, q))
    assert got.accepted == pytest.approx(a1 + (1 - a1) * a2, abs=1e-12)


#: a drafted round has one draft row per node: rules that read several draft models' rows (k-models) are left out
#: schemes whose rules read rows a drafted round lacks (k-models: every draft model's) or refuse a tuple their
#: drafting cannot produce (hub): the random tokens below are arbitrary, one draft row a node
CONSTRAINED = {"hub", "k-models"}
CASES = [(name, shape) for name in sorted(VERIFIERS) for shape in (("chain", 3, 1), ("complete", 2, 2),
                                                                   ("multi-chain", 2, 3))
         if make_topology(*shape).name in VERIFIERS[name].shapes and not VERIFIERS[name].float_only
         and not (VERIFIERS[name].lossless_under and set(VERIFIERS[name].lossless_under) <= CONSTRAINED)]


@pytest.mark.parametrize("name,shape", CASES)
def test_lumping_undrafted_outcomes_changes_no_rules_expectation(name, shape):
    rng = np.random.default_rng(zlib.crc32(f"{name} {shape}".encode()))
    parents = list(make_topology(*shape).parents)
    vocab = 9
    for _ in range(3):
        p, q = _rows(rng, len(parents), vocab), _rows(rng, len(parents), vocab)
        tokens = [0] + [int(x) for x in rng.integers(0, vocab, len(parents) - 1)]
        drafted = _round(parents, tokens, p, q)
        full = expected_acceptance(VERIFIERS[name].fn, drafted, lump=False)
        lumped = expected_acceptance(VERIFIERS[name].fn, drafted)
        assert lumped.accepted == pytest.approx(full.accepted, abs=1e-12)
        assert lumped.executions <= full.executions


def test_restricting_to_the_support_changes_nothing():
    rng = np.random.default_rng(2)
    parents, tokens = [-1, 0, 0, 1, 2], [0, 1, 5, 5, 2]
    p, q = np.zeros((5, 8)), np.zeros((5, 8))
    p[:, [1, 2, 5]], q[:, [1, 2, 5, 6]] = _rows(rng, 5, 3), _rows(rng, 5, 4)  # tokens 0, 3, 4, 7: no mass anywhere
    restricted = _round(parents, tokens, p, q)
    assert restricted.support == (1, 2, 5, 6)
    whole = DraftedRound(DraftTree(parents, [None] + tokens[1:], 8), tuple(tuple(r) for r in p),
                         tuple(tuple(r) for r in q), tuple(range(8)))
    for name in ("tv-rrs", "trv", "lv-rrs", "match"):
        a = expected_acceptance(VERIFIERS[name].fn, restricted).accepted
        b = expected_acceptance(VERIFIERS[name].fn, whole, lump=False).accepted
        assert a == pytest.approx(b, abs=1e-12)


def test_a_round_with_too_wide_a_support_names_top_k():
    q = np.full((2, 9000), 1 / 9000)
    with pytest.raises(InvalidParameterError, match="top_k"):
        restrict_round([-1, 0], [0, 3], q, q, [True, False])


@pytest.mark.parametrize("drafter,name", [(FixedShape(make_topology("complete", 2, 2), "iid"), "tv-rrs"),
                                          (FixedShape(make_topology("chain", 2, 1), "iid"), "bv"),
                                          (DySpecBudget(3), "tv-rrsw")])
def test_the_mean_over_every_draft_tree_is_the_rounds_expected_acceptance(drafter, name):
    """Σ_tree P(tree) E[τ | tree, rows] = E[τ] of the round's law (exact/certificate.py), a second method."""
    model = SyntheticModel(4, 0.6, 1.0, 1.0, 3)
    view = ModelView(model, "float")
    total = 0.0
    for draft, prob in enumerate_outcomes(lambda rng: drafter.draft(view, rng), exact=False):
        drafted = DraftedRound(draft.tree, draft.p, draft.q, tuple(range(4)))
        total += prob * expected_acceptance(VERIFIERS[name].fn, drafted).accepted
    assert total == pytest.approx(round_law(model, drafter, name, "float").expected_accepted(), abs=1e-12)


def _peeking(tree, p, q, rng):
    """Not a rule of ours: after drawing ``y ~ q_0`` it accepts the first child when ``q_0(y)`` is large, a use of
    the drawn token beyond which drafted token it equals."""
    y = rng.categorical(q[0])
    first = tree.children(0)[0]
    return (first, 0) if q[0][y] > 0.2 else (0, y)


def test_lumping_is_not_exact_for_a_rule_that_reads_the_drawn_tokens_row():
    rng = np.random.default_rng(4)
    q = np.array([[0.05, 0.3, 0.05, 0.25, 0.35], [0.2] * 5])
    drafted = _round([-1, 0], [0, 1], _rows(rng, 2, 5), q)
    full = expected_acceptance(_peeking, drafted, lump=False).accepted
    assert full == pytest.approx(0.3 + 0.25 + 0.35)
    assert expected_acceptance(_peeking, drafted).accepted != pytest.approx(full)


def test_draws_over_nodes_are_never_lumped():
    class Recorder:
        def categorical(self, weights):
            self.seen = list(weights)
            return 0

    inner = Recorder()
    LumpingChooser(inner, vocab=3, nodes=3, kept=[0]).categorical([0.2, 0.3, 0.5])
    assert inner.seen == [0.2, 0.3, 0.5]
