"""Hu et al., *Towards Optimal Multi-draft Speculative Decoding* (ICLR 2025, arXiv:2502.18779): greedy draft sampling
(``greedy-k``, the same scheme as ``almost-greedy``), its verifier ``tv-hu`` reaching the optimum ``α*`` of that
scheme, and the subset-selection dual with and without replacement; a worked example by hand at V = 3, k = 2,
certification on random pairs with controls the same test rejects, and the symbolic proof at depth 1."""

from __future__ import annotations

from fractions import Fraction as F

import pytest

from exact.certificate import certify
from exact.prove.optimum import optimum
from exact.prove.prover import prove
from simulator.drafting import DRAFTING, SCHEMES, FixedShape
from simulator.models import TableModel, make_model
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.flows import alpha_star, opt_flow, tuple_law
from simulator.verifiers.hu import drafts_inside, greedy_alpha, subset_selection
from simulator.verifiers.rules import HU, SingleStepRule
from simulator.numeric import ratio, residual
from simulator.verifiers.single_step import Plan, deterministic_plan
from simulator.verifiers.token_tree import tv

# The worked example: draft p, target q; the top token of p is 0, so greedy drafting with k = 2 fixes 0 and draws
# the last child from p' = (0, 2/3, 1/3).
P = (F(1, 2), F(1, 3), F(1, 6))
Q = (F(1, 4), F(1, 4), F(1, 2))
ONE_LEVEL = make_topology("complete", 1, 2)


def test_greedy_k_is_almost_greedy_under_the_papers_name():
    assert SCHEMES["greedy-k"] is SCHEMES["almost-greedy"]
    assert "greedy-k" in DRAFTING and VERIFIERS["tv-hu"].lossless_under == ("almost-greedy", "greedy-k")
    assert tuple_law(P, 2, "greedy-k") == tuple_law(P, 2, "almost-greedy") == {(0, 1): F(2, 3), (0, 2): F(1, 3)}


def test_worked_example_by_hand():
    """Greedy, k = 2: α* = q(0) + min(1/4, 2/3) + min(1/2, 1/3) = 5/6. tv-hu on (0, 1): SpS on 1 against p' accepts
    w.p. (1/4)/(2/3) = 3/8; else r = norm((q − p')_+) = (3/5, 0, 2/5) and token 0 is taken w.p. 3/5: 3/8 each. On
    (0, 2): (1/2)/(1/3) ≥ 1, accepted surely. Acceptance 2/3 · 3/4 + 1/3 = 5/6; outflow (1/4, 1/4, 1/3) ≤ q.
    The dual: H = {0, 1} (the prefix of q/p ascending: 1/2, 3/4, 3) gives greedy 1/2 + P(X = (0, 2)) = 5/6,
    i.i.d. 1 + 1/2 − (5/6)² = 29/36, without replacement Q = 1/3 + 1/4 = 7/12, so 1 + 1/2 − 7/12 = 11/12."""
    assert greedy_alpha(P, Q, 2) == F(5, 6) == alpha_star(P, Q, 2, "greedy-k")[0]
    assert alpha_star(P, Q, 2, "greedy-k")[1] == frozenset({0, 1})
    assert HU.token_acceptance((0, 1), P, Q, "greedy-k") == {0: F(3, 8), 1: F(3, 8)}
    assert HU.token_acceptance((0, 2), P, Q, "greedy-k") == {2: 1, 0: 0}
    assert HU.outflow(P, Q, 2, "greedy-k") == (F(1, 4), F(1, 4), F(1, 3))
    assert HU.planned(P, Q, (0, 1)).residual == (0, 0, 1)  # what is left of r after token 0: the third token
    assert drafts_inside(P, 2, "iid", frozenset({0, 1})) == F(25, 36)
    assert drafts_inside(P, 2, "without-replacement", frozenset({0, 1})) == F(7, 12)
    assert subset_selection(P, Q, 2, "iid") == (F(29, 36), frozenset({0, 1}))
    assert subset_selection(P, Q, 2, "without-replacement") == (F(11, 12), frozenset({0, 1}))
    for law in ("iid", "without-replacement"):
        assert subset_selection(P, Q, 2, law)[0] == alpha_star(P, Q, 2, law)[0] == opt_flow(P, Q, 2, law).acceptance
    # the round at depth 1 on these rows: E[τ] = α* = optimum's E[τ]*
    model = TableModel(3, {None: P}, {None: Q})
    drafter = FixedShape(ONE_LEVEL, "greedy-k")
    cert = certify(model, drafter, "tv-hu")
    assert cert.lossless and cert.expected_accepted == F(5, 6) == optimum(model, drafter).optimum


def _unnormalised_plan(candidates, p, q) -> Plan:
    """A plausible bug: SpS on the last child against p itself, not p' = p renormalised outside the top tokens."""
    x, fixed = candidates[-1], list(candidates[:-1])
    rest = deterministic_plan(fixed, p, residual(q, p))
    return Plan(((len(fixed), ratio(q[x], p[x])),) + rest.steps, rest.residual)


UNNORMALISED = tv(SingleStepRule("hu-unnormalised", plan=_unnormalised_plan), "greedy-k")
PAIRS = range(8)


@pytest.mark.parametrize("depth, branching", [(1, 2), (1, 3), (2, 2)])
def test_lossless_under_greedy_k_and_both_controls_lossy(depth, branching):
    """LOSSLESS on 8 random rational pairs (V = 3) under greedy-k; the same certification rejects tv-hu under i.i.d.
    drafting and a tv-hu whose SpS forgets to renormalise the draft outside the top tokens."""
    topology = make_topology("complete", depth, branching)
    iid_lossy = bug_lossy = 0
    for seed in PAIRS:
        model = make_model("random-rational", None, 3, seed)
        for scheme in ("greedy-k", "almost-greedy"):
            cert = certify(model, FixedShape(topology, scheme), "tv-hu")
            assert cert.lossless and cert.tvd == 0, (seed, scheme)
        iid_lossy += not certify(model, FixedShape(topology, "iid"), "tv-hu").lossless
        bug_lossy += not certify(model, FixedShape(topology, "greedy-k"), UNNORMALISED).lossless
    assert iid_lossy >= 4 and bug_lossy >= 4, (iid_lossy, bug_lossy)


def test_tv_hu_reaches_the_optimum_at_depth_one():
    for seed in range(4):
        model = make_model("random-rational", None, 4, seed)
        drafter = FixedShape(make_topology("complete", 1, 2 + seed % 2), "greedy-k")
        best = optimum(model, drafter)
        assert best.proved and certify(model, drafter, "tv-hu").expected_accepted == best.optimum


def test_proved_at_depth_one():
    """Every pair of rows at V = 2 (by lifting: every tree of branchings 0 and 2); a control refuted there."""
    proof = prove("tv-hu", ONE_LEVEL, "greedy-k", 2, method="lifting")
    assert proof.verdict == "PROVED", proof.reason
    cells = prove("tv-hu", ONE_LEVEL, "greedy-k", 2, method="cells")
    assert cells.verdict == "PROVED", cells.reason


def test_short_support_and_one_child():
    """A row of two positive tokens under k = 3 drafts both, deterministically; k = 1 is SpS on p itself."""
    p, q = (F(1, 2), F(1, 2), F(0)), (F(1, 5), F(2, 5), F(2, 5))
    assert tuple_law(p, 3, "greedy-k") == {(0, 1): 1}
    assert greedy_alpha(p, q, 3) == F(3, 5) == sum(HU.outflow(p, q, 3, "greedy-k"), F(0))
    assert HU.planned(P, Q, (2,)).steps == ((0, 1),) and HU.planned(P, Q, (0,)).steps == ((0, F(1, 2)),)
    assert HU.planned(P, Q, (0,)).residual == (0, 0, 1)  # norm((q − p)_+): only the third token gains


def test_the_theorem_check_holds_and_fails_with_a_wrong_rule_or_dual(monkeypatch):
    """``specproof theorems --check hu`` at a small scale holds; with RRS in tv-hu's place (the greedy acceptance
    check) or with draws without replacement counted as i.i.d. (the dual check) it fails."""
    from simulator.verifiers import hu, rules
    from specproof.reports.theorems import check_hu

    assert all(c.holds for c in check_hu(20, 0))
    monkeypatch.setattr(rules, "HU", rules.RRS)
    monkeypatch.setattr(hu, "drafts_inside", lambda p, k, law, subset: sum((p[x] for x in subset), p[0] * 0) ** k)
    dual, greedy, ceiling = check_hu(20, 0)
    assert not dual.holds and not greedy.holds and ceiling.holds
