"""DySpec's dynamic trees, ADED's adaptive drafts and multi-round generation (issue 5).

Hand-derived trees for both DySpec algorithms, exact certificates (rationals) of the lossless pairings with
the lossy ones flagged, the App. D.1 greedy-optimality check against brute force (and a non-greedy tree it
rejects), ADED's table, search and update, and the multi-round law of the first N tokens.
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

from exact import certify
from exact.generation_law import generation_law
from specproof.reports.greedy_tree import best_subtree_weight, greedy_subtree
from specproof.reports.theorems import check_dyspec_greedy
from simulator.drafting.aded import Aded, AdedConfig, TrigramTable, candidate_tree, mcts_candidates
from simulator.drafting.drafter_registry import DrafterOptions, make_drafter
from simulator.drafting import FixedShape
from simulator.drafting.dyspec import DySpecBudget, DySpecThreshold
from simulator.errors import InvalidParameterError
from simulator.montecarlo.generations import run_generations
from simulator.montecarlo.engine import monte_carlo
from simulator.numeric import is_rational
from simulator.models import ModelView, RandomRationalModel, SyntheticModel, TableModel
from simulator.randomness import ReplayRandomness
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.registry import check_pairing

P = [F(1, 2), F(1, 3), F(1, 6)]


def context_free(p, q=None) -> TableModel:
    return TableModel(len(p), {None: p}, {None: q or p})


def test_dyspec_budget_tree_by_hand():
    # Slots: root (1, p). u=.1 draws 0 (share 1/2): sibling slot 1/2 (p without 0 = [0, 2/3, 1/3]) and child
    # slot 1/2 — a tie, the sibling opened first wins. u=.1 draws 1 (share 2/3): slots 1/6 and 1/3. The child
    # slot of token 0 (1/2) is next: u=.9 draws 2. Three tokens: the root holds 0 and 1, node "0" holds 2.
    view = ModelView(context_free(P), "fraction")
    draft = DySpecBudget(3).draft(view, ReplayRandomness([0.1, 0.1, 0.9]))
    assert draft.tree.parents == (-1, 0, 0, 1) and draft.tree.tokens == (None, 0, 1, 2)
    assert draft.p[1] == tuple(P) and draft.p[2] is None and draft.q[3] == tuple(P)


def test_dyspec_threshold_tree_by_hand():
    # t = 0.3, depth 2. Root (v=1): draws 0 (child value 1/2, v → 1/2), then 1 from [0, 2/3, 1/3] (child 1/3,
    # v → 1/6 < t). Node "0" (1/2): draws 2 (child 1/12, v → 5/12), then 0 from [3/5, 2/5, 0] (v → 1/6).
    # Node "1" (1/3): draws 0 (v → 1/6). Depth 2 reached.
    view = ModelView(context_free(P), "fraction")
    draft = DySpecThreshold(0.3, 2).draft(view, ReplayRandomness([0.1, 0.1, 0.9, 0.1, 0.1]))
    assert draft.tree.parents == (-1, 0, 0, 1, 1, 2) and draft.tree.tokens == (None, 0, 1, 2, 0, 0)


def test_dyspec_settings_are_checked():
    for make, field in ((lambda: DySpecBudget(0), "budget"), (lambda: DySpecThreshold(0.0, 2), "threshold"),
                        (lambda: DySpecThreshold(1.5, 2), "threshold"), (lambda: DySpecThreshold(0.2, 0), "max_depth")):
        with pytest.raises(InvalidParameterError) as err:
            make()
        assert err.value.field == field


@pytest.mark.slow
@pytest.mark.parametrize("vocab,budgets", [(2, range(1, 7)), (3, range(1, 7)), (4, (2, 4, 6))])
def test_dyspec_trees_are_certified_under_rrsw_and_trv_and_flag_the_wrong_rules(vocab, budgets):
    for budget in budgets:
        model = RandomRationalModel(vocab, seed=100 * vocab + budget, zero_prob=0.2)
        drafter = DySpecBudget(budget)
        for name in ("tv-rrsw", "trv", "dyspec", "tv-sps"):
            cert = certify(model, drafter, name)
            assert cert.lossless and cert.tvd == 0 and is_rational(cert.tvd), (name, vocab, budget)
    # Negative controls on the same drafter: RRS with the i.i.d. law, DySpec's printed N(0,1) (float only).
    model = RandomRationalModel(3, seed=2, zero_prob=0.0)
    for name, arithmetic in (("tv-rrs", "fraction"), ("bug-dyspec-printed", "float")):
        cert = certify(model, DySpecBudget(4), name, arithmetic)
        assert not cert.lossless and cert.counterexample is not None, name


def test_dyspec_threshold_trees_are_certified():
    for seed in range(4):
        model = RandomRationalModel(3, seed=seed, zero_prob=0.2)
        for name in ("tv-rrsw", "trv"):
            assert certify(model, DySpecThreshold(0.3, 2), name).tvd == 0


def test_layer_verification_is_refused_on_dynamic_trees():
    with pytest.raises(InvalidParameterError) as err:
        check_pairing("lv-rrs", "dyspec")
    assert err.value.field == "verifier" and "tuple law" in err.value.message
    check_pairing("lv-rrs", "iid")  # a fixed shape is fine
    # library callers get the same refusal as the command line, from every engine
    model = RandomRationalModel(3, seed=0)
    for run in (lambda: certify(model, DySpecBudget(3), "lv-kseq"),
                lambda: monte_carlo(lambda s: model, DySpecBudget(3), "lv-rrs", VERIFIERS["lv-rrs"].fn, 1, 10),
                lambda: run_generations(lambda s: model, DySpecBudget(3), "lv-rrs", VERIFIERS["lv-rrs"].fn, 1, 2, 3)):
        with pytest.raises(InvalidParameterError, match="tuple law"):
            run()
    assert certify(model, DySpecBudget(3), "tv-rrsw").lossless  # the control: a rule defined there certifies


def test_greedy_tree_is_maximum_weight_and_the_check_rejects_a_non_greedy_tree():
    (check,) = check_dyspec_greedy(60, seed=1)
    assert check.holds and check.instances == 60
    # Hand instance: p = (1/2, 1/3, 1/6) at every context; N = 3: greedy takes "0" (1/2) then "1" (1/3),
    # weight 1 + 1/2 + 1/3 = 11/6; the chain 0 → 00 weighs 1 + 1/2 + 1/4 = 7/4 < 11/6.
    view = ModelView(context_free(P), "fraction")
    nodes, weight = greedy_subtree(view, 3)
    assert nodes == [(), (0,), (1,)] and weight == F(11, 6) == best_subtree_weight(view, 3)
    assert F(7, 4) - best_subtree_weight(view, 3) < 0  # what the check reports for a non-greedy tree


CORPUS = [[0, 1, 2, 0, 1, 2], [0, 1, 1, 0, 1, 2], [2, 2, 0, 1]]


def test_trigram_table_and_its_update_by_hand():
    table = TrigramTable.from_corpus(CORPUS, 3)
    # (0, 1) is followed by 2 three times and by 1 once.
    assert table.row(0, 1) == ((2, F(3, 4)), (1, F(1, 4)))
    assert table.row(-1, -1) == ((0, F(2, 3)), (2, F(1, 3)))  # the sequences' first tokens
    updated = table.adjusted([2, 0, 1, 1], max_length=3, increment=F(1, 10), max_prob=F(1))
    # The last three tokens (0, 1, 1) hold one tri-gram: (0, 1) → 1 gains 1/10; nothing else changes.
    assert updated.row(0, 1) == ((2, F(3, 4)), (1, F(7, 20)))
    assert updated.row(2, 0) == table.row(2, 0)
    capped = table.adjusted([0, 1, 2], 3, F(1, 2), F(9, 10))
    assert capped.score(0, 1, 2) == F(9, 10)
    with pytest.raises(InvalidParameterError) as err:
        TrigramTable.from_corpus([[0, 5]], 3)
    assert err.value.field == "corpus[0][1]"


def test_mcts_candidates_follow_the_table_and_merge_into_a_trie():
    table = TrigramTable.from_corpus(CORPUS, 3)
    config = AdedConfig(iterations=40, length=2, candidates=3)
    candidates = mcts_candidates(table, (0, 1), config)
    assert candidates and all(len(c) <= 2 for c in candidates)
    for c in candidates:  # every step of a candidate is a continuation the table knows
        history = [0, 1, *c]
        assert all(table.score(*history[i - 2:i + 1]) > 0 for i in range(2, len(history)))
    assert mcts_candidates(table, (0, 1), config) == candidates  # deterministic given table and context
    tree = candidate_tree([(2, 0), (2, 1), (1,)], 3)
    assert tree.parents == (-1, 0, 0, 1, 1) and tree.tokens == (None, 2, 1, 0, 1)


def test_mcts_ranks_sentences_by_their_tri_gram_score():
    # After (0, 1) the corpus continues with 3 twice and 2 once: scores 1 + 2/3 and 1 + 1/3 (Alg. 1 line 37
    # counts every generated token, the first included), so (3,) ranks first.
    table = TrigramTable.from_corpus([[0, 1, 3], [0, 1, 3], [0, 1, 2]], 4)
    assert mcts_candidates(table, (0, 1), AdedConfig(iterations=10, length=1, candidates=2)) == [(3,), (2,)]


def aded(model, length=2, candidates=3) -> Aded:
    return make_drafter("aded", model=model, options=DrafterOptions(
        aded=AdedConfig(iterations=15, length=length, candidates=candidates)))


@pytest.mark.slow
def test_aded_over_three_rounds_is_certified_under_sample_and_match_and_per_row_is_flagged():
    for seed in range(2):
        model = RandomRationalModel(3, seed=seed, zero_prob=0.0)
        drafter = aded(model)
        # Rounds emit at most 3 tokens (2 drafted + 1), so 7 tokens take at least 3 rounds.
        law = generation_law(model, drafter, "match", 7, context=(0,))
        assert min(law.rounds) >= 3 and law.lossless and law.tvd == 0 and is_rational(law.tvd)
        control = generation_law(model, drafter, "bug-match-per-row", 7, context=(0,))
        assert not control.lossless and control.counterexample is not None
        ce = control.counterexample
        assert control.law.get(ce.sequence, 0) == ce.verifier_prob != ce.target_prob
    # The table learns from the output: after a round the drafter (and so its next draft) changes.
    model = RandomRationalModel(3, seed=0, zero_prob=0.0)
    drafter = aded(model)
    assert drafter.advance((0, 1, 2, 0, 1, 2)).table != drafter.table


def test_generation_law_carries_greedy_bv_modified_target_across_rounds():
    model = RandomRationalModel(3, seed=5)
    chain = FixedShape(make_topology("chain", 2))
    assert generation_law(model, chain, "greedy-bv", 5).tvd == 0
    assert generation_law(model, chain, "bug-greedy-bv-nomod", 5).tvd > 0  # the same without the carried target
    assert generation_law(model, chain, "bv", 5).tvd == 0


@pytest.mark.slow
def test_monte_carlo_generation_agrees_with_the_exact_rounds():
    model = SyntheticModel(3, seed=0)
    drafter = DySpecBudget(3)
    exact = generation_law(model, drafter, "tv-rrsw", 4, "float")
    mc = run_generations(lambda s: model, drafter, "tv-rrsw", VERIFIERS["tv-rrsw"].fn, 1, 4000, 4)
    # Per trial the number of rounds lies in 1..4; its SD is at most 1.5, so 4000 trials give SE ≤ 0.024.
    assert abs(mc.rounds_mean - float(exact.expected_rounds)) < 4 * 0.024


def test_generation_repeats_exactly_with_the_same_seeds():
    model = SyntheticModel(4, seed=1)
    drafter = DySpecBudget(3)
    a = run_generations(lambda s: model, drafter, "trv", VERIFIERS["trv"].fn, 2, 50, 5)
    b = run_generations(lambda s: model, drafter, "trv", VERIFIERS["trv"].fn, 2, 50, 5)
    assert a == b and np.isfinite(a.accepted_per_round_se)


def test_the_dynamic_report_renders_a_fixed_record():
    """specproof.reports.dynamic's rendering on a hand-made record: the tallies' verdicts, the greedy check, the
    comparison rows and the JSON, with nothing certified or sampled."""
    from specproof.reports.dynamic import DynamicResults, Tally, dynamic_json, dynamic_markdown
    from specproof.reports.theorems import Check

    wrong = Tally("dyspec (Alg. 1)", "tv-rrs", False)
    wrong.add(False, 0.25, "vocab=2", type("Ce", (), {"sequence": (0, 1), "verifier_prob": 0.5, "target_prob": 0.25}))
    right = Tally("dyspec (Alg. 1)", "tv-rrsw", True, instances=1, lossless=1)
    greedy = Check("greedy", "DySpec App. D.1", 10, 0.0, "")
    comparison = [{"tau": 1.0, "verifier": "tv-rrsw", "drafter": "DySpec budget 6", "accepted_per_round": 1.5,
                   "se": 0.1, "rounds_mean": 4.0, "dyspec_minus_this": 0.0, "dyspec_minus_this_se": None}]
    results = DynamicResults(8, 2, 20, 8, [right, wrong], [], greedy, comparison,
                             {1.0: {"root_children": 5.5, "height": 1.25}})
    assert results.ok and results.aded_instances == 2
    text = dynamic_markdown(results, "specproof dynamic")
    assert "| dyspec (Alg. 1) | `tv-rrs` | lossy | 1 | 0 | 0.25 | as expected | vocab=2: sequence [0, 1] has 0.5 " \
           "vs target 0.25 |" in text
    assert "10 random rational instances (vocabulary 2–3, sizes 2–6)" in text and "**holds**" in text
    assert "τ = 1: 5.50 root children, height 1.25 on average, over 2 × 20 drafts" in text
    assert "| 1 | `tv-rrsw` | DySpec budget 6 | 1.5000 | 0.1000 | 4.00 | +0.0000 | – |" in text
    data = dynamic_json(results, "specproof dynamic")
    assert data["greedy"] == {"instances": 10, "worst_margin": 0.0, "holds": True}
    assert data["dyspec_shapes"] == {"1.0": {"root_children": 5.5, "height": 1.25}}
