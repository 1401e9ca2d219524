"""Drafting on demand (simulator/drafting/lazy_draft.py): the exact engine's laws equal eager enumeration's, tokens a
verifier never reads are never choices, node ids stay the topology's or the engine drafts eagerly, and the
size estimate (Knuth's estimator) is exact where it must be."""

from __future__ import annotations

from fractions import Fraction

import pytest

from exact import certify, round_law
from exact.instances import random_instances
from exact.size import estimate_round, sample_executions
from simulator.drafting import SCHEMES, FixedShape
from simulator.errors import SizeLimitError
from simulator.drafting.lazy_draft import Eager, LazyDraft, lazy_drafter
from simulator.limits import limits
from simulator.models import ModelView, SyntheticModel, TableModel
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS

ALL = list(VERIFIERS)


def laws(model, drafter, name, arithmetic="fraction"):
    lazy, eager = (round_law(model, d, name, arithmetic) for d in (drafter, Eager(drafter)))
    return lazy, eager


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_lazy_and_eager_enumeration_give_identical_laws(name):
    # Random rational models (zeros in 30% of entries: short rows, pruned branches), every shape and scheme the
    # rule is defined on; controls included (their lossy laws must agree too).
    spec = VERIFIERS[name]
    arithmetic = "float" if spec.float_only else "fraction"
    lazily = 0
    for inst in random_instances(spec, 12, seed=7, max_nodes=5, max_outcomes=300):
        lazy, eager = laws(inst.model, inst.drafter, name, arithmetic)
        if arithmetic == "fraction":
            assert lazy.outcomes == eager.outcomes, inst.describe()
        else:  # the same factors multiplied in another order (draft × verifier vs one running product): a few ulps
            assert lazy.outcomes.keys() == eager.outcomes.keys(), inst.describe()
            for key, prob in lazy.outcomes.items():
                assert prob == pytest.approx(eager.outcomes[key], rel=1e-14, abs=0), inst.describe()
        lazily += getattr(inst.drafter, "lazy", lambda v: None)(ModelView(inst.model, arithmetic)) is not None
    assert lazily >= 4  # the battery exercises the lazy path, not only the eager fallback


class _IndependentSiblings(LazyDraft):
    """A planted bug: under drafting without replacement, a sibling read first is drawn from the full row,
    ignoring the earlier siblings it is conditioned on."""

    def token(self, v):
        if not self._drawn[v]:
            parent = self.tree.parents[v]
            row = self._view.p(self.tree.path(parent))
            self._tokens[v], self._drawn[v] = self._rng.categorical(row), True
        return self._tokens[v]


class _Planted:
    def __init__(self, topology, scheme):
        self.inner = FixedShape(topology, scheme)
        self.scheme, self.height = scheme, topology.height

    def draft(self, view, rng):
        return self.inner.draft(view, rng)

    def lazy(self, view):
        return lambda rng: _IndependentSiblings(self.inner.topology, view, SCHEMES[self.scheme], rng)


def _second_child_first(tree, p, q, rng):
    """Reads the root's second child before the first: (accept nothing, emit the second child's token)."""
    second = tree.children(0)[1]
    return 0, tree.tokens[second]


def test_the_comparison_rejects_a_lazy_drafter_that_ignores_earlier_siblings():
    # Without replacement, the second child never repeats the first: eager law of y puts no mass where the
    # planted drafter (second child drawn from the full row) does.
    model = SyntheticModel(vocab=3, seed=0)
    topology = make_topology("complete", 1, 2)
    good = round_law(model, FixedShape(topology, "without-replacement"), _second_child_first)
    eager = round_law(model, Eager(FixedShape(topology, "without-replacement")), _second_child_first)
    planted = round_law(model, _Planted(topology, "without-replacement"), _second_child_first)
    assert good.outcomes == eager.outcomes
    assert planted.outcomes != eager.outcomes
    # by hand: P(second = x) = Σ_{a≠x} p(a) p(x) / (1 − p(a)); the planted drafter gives p(x)
    p = ModelView(model).p(())
    by_hand = {x: sum(p[a] * p[x] / (1 - p[a]) for a in range(3) if a != x) for x in range(3)}
    assert {y: prob for (path, y), prob in good.law().items()} == by_hand


def _reads_nothing(tree, p, q, rng):
    return 0, 0


def test_tokens_never_read_are_never_choices():
    # complete(b=2, H=3) at V = 4: 4^14 draft trees if drafted eagerly; a verifier that reads nothing has one
    # execution, and SpS reads one child per level.
    model = SyntheticModel(vocab=4, seed=0)
    drafter = FixedShape(make_topology("complete", 3, 2))
    assert round_law(model, drafter, _reads_nothing).executions == 1
    cert = certify(model, drafter, "tv-sps")
    assert cert.lossless and cert.tvd == 0
    # SpS reads, per level, the first child (4 tokens) and decides accept/reject (2 branches), a rejection
    # drawing the residual (≤ 4): at most (4·(1 + 4))^3 · ... executions; far below 4^14
    assert cert.executions < 4 ** 7


def test_node_ids_that_could_shift_make_the_engine_draft_eagerly():
    # A root draft row with one positive token: without replacement the root gets 1 child, not 2, and every
    # later node's BFS id shifts. The lazy drafter declines; iid drafting (never short) stays lazy.
    table = TableModel(2, {None: [Fraction(1), Fraction(0)]}, {None: [Fraction(1, 2), Fraction(1, 2)]})
    topology = make_topology("complete", 2, 2)
    view = ModelView(table)
    assert lazy_drafter(topology, view, SCHEMES["without-replacement"], never_short=False) is None
    assert FixedShape(topology, "without-replacement").lazy(view) is None
    assert FixedShape(topology, "iid").lazy(view) is not None
    full = TableModel(2, {None: [Fraction(1, 3), Fraction(2, 3)]}, {None: [Fraction(1, 2), Fraction(1, 2)]})
    assert FixedShape(topology, "without-replacement").lazy(ModelView(full)) is not None


def test_lazy_tree_reads_like_a_draft_tree():
    model = SyntheticModel(vocab=3, seed=1)
    topology = make_topology("complete", 2, 2)
    make = FixedShape(topology).lazy(ModelView(model))

    class First:  # always the first branch
        def categorical(self, weights):
            return next(i for i, w in enumerate(weights) if w > 0)

        def bernoulli(self, prob):
            return True
    draft = make(First())
    tree = draft.tree
    assert "?" in repr(tree) and len(tree) == 7 and tree.children(0) == (1, 2)
    assert tree.path(4)[0] == tree.tokens[1] and len(tree.path(4)) == 2
    assert draft.p[4] is None and len(draft.q[4]) == 3
    assert list(tree.tokens)[0] is None and "?" not in repr(tree)
    with pytest.raises(IndexError):
        tree.tokens[7]


def test_knuth_estimate_is_exact_on_a_uniform_choice_tree():
    # three categorical choices of four equally likely... any weights: every descent meets widths 4, 4, 4
    def program(rng):
        return [rng.categorical([1, 2, 3, 4]) for _ in range(3)]
    mean, low = sample_executions(program, exact=True)
    assert mean == pytest.approx(3 * 0.6020599913279624) and low == pytest.approx(mean)


def test_knuth_estimate_is_unbiased_on_an_unbalanced_tree():
    # branch 0 ends at once, branch 1 opens 8 more leaves: 9 leaves; the estimator gives 2 or 16, mean 9
    def program(rng):
        if rng.categorical([1, 1]):
            rng.categorical([1] * 8)
    mean, _ = sample_executions(program, exact=True, probes=4000)
    assert 10 ** mean == pytest.approx(9, rel=0.05)


def test_size_check_admits_what_fits_and_refuses_what_cannot():
    model = SyntheticModel(vocab=3, seed=0)
    deep = FixedShape(make_topology("complete", 3, 2))
    with limits(max_executions=500_000):
        estimate = estimate_round(model, deep, "tv-rrs")
        estimate.check(500_000)  # fits: 3^14 trees would have been refused up front
        assert "drafted on demand" in estimate.describe() and "95% confidence" in estimate.describe()
        # Traversal Verification reads every token (it merges duplicate siblings): 4^39 trees
        wide = FixedShape(make_topology("complete", 3, 3))
        with pytest.raises(SizeLimitError, match="max_executions"):
            estimate_round(SyntheticModel(vocab=4, seed=0), wide, "trv").check(500_000)


@pytest.mark.slow
def test_output_law_memory_grows_with_distinct_outcomes_not_executions():
    # 300,000 executions of 3 distinct outcomes: kept as a list (the old engine) they need tens of MB
    import tracemalloc

    from exact.law import OutputLaw
    from simulator.speculation import RoundOutcome

    outcomes = [RoundOutcome((), y) for y in range(3)]
    stream = ((outcomes[i % 3], 1 / 300_000) for i in range(300_000))
    tracemalloc.start()
    law = OutputLaw(stream, 0, None, exact=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert law.executions == 300_000 and len(law.outcomes) == 3
    assert peak < 1_000_000, peak


def test_a_model_scoring_whole_trees_is_drafted_eagerly():
    # A causal LM's rows come from one tree-attention pass over the whole tree (batch_rows): drawn row by row
    # they would come from other passes, and a bug in that pass would go uncertified (tests/test_real.py).
    class TreeScored(SyntheticModel):
        def batch_rows(self, name, contexts):
            return [getattr(self, name)(c) for c in contexts]

    topology = make_topology("complete", 2, 2)
    assert FixedShape(topology).lazy(ModelView(TreeScored(3))) is None
    assert FixedShape(topology).lazy(ModelView(SyntheticModel(3))) is not None
