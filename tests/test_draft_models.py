"""Several draft models (docs/models.md, "Several draft models") and the ``k-models`` drafting scheme
(docs/drafting.md): one-model rows unchanged, :class:`DraftRows` reaching the schemes and the verifiers in both
drafting paths, the exact law of a ``k-models`` tree derived by hand, and which rules stay lossless under it."""

from __future__ import annotations

import itertools
import json
import math
import pickle
from dataclasses import replace
from fractions import Fraction as F

import numpy as np
import pytest

from exact.certificate import certify, round_law
from exact.enumeration import enumerate_outcomes
from exact.instances import random_instances
from exact.prove.optimum import optimum
from exact.prove.prover import prove
from exact.reproducer import capture, parse_reproducer
from exact.size import estimate_round
from exact.subject import subject
from simulator.drafting import SCHEMES, FixedShape, draft_models_for
from simulator.drafting.lazy_draft import Eager
from simulator.errors import InvalidDistributionError, InvalidParameterError
from simulator.models import (DraftRows, ModelView, RandomRationalModel, SyntheticModel, TableModel, make_model,
                              table_json)
from simulator.trees import make_topology
from simulator.verifiers.registry import VERIFIERS
from specproof.gate.shrink import shrink

P0 = [F(1, 2), F(1, 2), F(0)]
P1 = [F(0), F(1, 4), F(3, 4)]
Q = [F(1, 6), F(1, 3), F(1, 2)]


def two_drafts() -> TableModel:
    """One target, two different draft models, the same rows at every context."""
    return TableModel(3, {None: P0}, {None: Q}, [{None: P1}])


# ---- one draft model: rows unchanged ------------------------------------------------------------------------------

def _synthetic_by_hand(vocab: int, rhos: list[float], tau: float, seed: int, context: tuple[int, ...]):
    """docs/models.md's recipe: normals keyed by SeedSequence([seed, len(context), *context]), in the order
    u, ε^{p_0}, ε^q, ε^{p_1}, …; a softmax of each logit vector over τ."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, len(context), *context]))
    u, eps_p0, eps_q = (rng.standard_normal(vocab) for _ in range(3))
    eps = [eps_p0] + [rng.standard_normal(vocab) for _ in rhos[1:]]

    def softmax(z):
        e = np.exp(z - z.max())
        return (e / e.sum()).tolist()

    rho = rhos[0]
    return [softmax((r * u + (1 - r) * e) / tau) for r, e in zip(rhos, eps)], softmax((rho * u + (1 - rho) * eps_q) / tau)


def test_one_draft_model_rows_are_the_numbers_they_were():
    # frozen from the code before several draft models existed
    synthetic = SyntheticModel(4, 0.5, 1.0, 1.0, 3)
    assert synthetic.p((1,)) == [0.2800019236273792, 0.3501442588340323, 0.18190451684674375, 0.18794930069184485]
    assert synthetic.q((1,)) == [0.19250108964792845, 0.09831484411741667, 0.1828787237549978, 0.5263053424796571]
    rational = RandomRationalModel(4, 11)
    assert rational.p((2, 0)) == [0, 0, F(1, 4), F(3, 4)] and rational.q((2, 0)) == [F(1, 2), F(3, 8), 0, F(1, 8)]
    assert synthetic.describe()["rho"] == 0.5 and "draft_models" not in rational.describe()
    view = ModelView(synthetic, "float")
    assert type(view.p((1,))) is tuple and type(ModelView(rational).p(())) is tuple


@pytest.mark.parametrize("context", [(), (2,), (0, 3, 1)])
def test_synthetic_rows_follow_the_documented_recipe_and_keep_the_first_rho(context):
    drafts, target = _synthetic_by_hand(5, [0.3, 0.8, 0.1], 0.7, 9, context)
    many = SyntheticModel(5, [0.3, 0.8, 0.1], 0.7, 0.7, 9)
    one = SyntheticModel(5, 0.3, 0.7, 0.7, 9)
    assert many.draft_models == 3 and many.rho == 0.3
    assert np.allclose(many.draft_rows(context), drafts, rtol=0, atol=1e-15)  # one softmax's rounding apart
    assert np.allclose(many.q(context), target, rtol=0, atol=1e-15)
    assert many.p(context) == one.p(context) == many.draft_rows(context)[0]  # bit for bit
    assert many.q(context) == one.q(context)
    assert np.array_equal(many.row_arrays([context])[0], one.row_arrays([context])[0])  # draft model 0
    assert many.describe()["rho"] == [0.3, 0.8, 0.1]


def test_random_rational_extra_drafts_come_after_p_and_q():
    one, three = RandomRationalModel(4, 11), RandomRationalModel(4, 11, draft_models=3)
    for context in [(), (2, 0), (3,)]:
        rows = three.draft_rows(context)
        assert len(rows) == 3 and rows[0] == one.p(context) and three.q(context) == one.q(context)
        assert all(sum(row) == 1 for row in rows)
    assert any(three.draft_rows(c)[1] != three.draft_rows(c)[0] for c in [(), (0,), (1,)])
    assert three.describe()["draft_models"] == 3


# ---- DraftRows ----------------------------------------------------------------------------------------------------

def test_draft_rows_is_model_zeros_row_and_survives_pickling():
    rows = ModelView(two_drafts()).p((1,))
    assert isinstance(rows, DraftRows) and rows == tuple(P0) and rows.models == (tuple(P0), tuple(P1))
    again = pickle.loads(pickle.dumps(rows))
    assert type(again) is DraftRows and again.models == rows.models and again == rows
    assert type(tuple(rows)) is tuple
    float_rows = ModelView(two_drafts(), "float").p(())
    assert all(type(x) is float for row in float_rows.models for x in row)


class _Recording:
    """A verifier that records the type of every draft row it reads, then accepts nothing."""

    def __init__(self) -> None:
        self.seen: set[type] = set()

    def __call__(self, tree, p, q, rng):
        for v in range(len(tree.parents)):
            if tree.children(v):
                self.seen.add(type(p[v]))
        return 0, rng.categorical(q[0])


@pytest.mark.parametrize("lazy", [True, False])
def test_draft_rows_reach_the_scheme_and_the_verifier(lazy):
    drafter = FixedShape(make_topology("complete", 2, 2), "k-models")
    assert drafter.lazy(ModelView(two_drafts())) is not None  # k-models never runs short: drafted on demand
    verifier = _Recording()
    round_law(two_drafts(), drafter if lazy else Eager(drafter), verifier)
    assert verifier.seen == {DraftRows}


@pytest.mark.parametrize("rule", ["tv-rrs", "trv"])
def test_lazy_and_eager_k_models_drafting_give_the_same_law(rule):
    model = RandomRationalModel(3, 0, draft_models=2)
    drafter = FixedShape(make_topology("complete", 2, 2), "k-models")
    lazy, eager = round_law(model, drafter, rule), round_law(model, Eager(drafter), rule)
    assert dict(lazy.completed()) == dict(eager.completed()) and lazy.distance().tvd > 0


# ---- the k-models scheme --------------------------------------------------------------------------------------

def test_k_models_draws_child_i_from_model_i():
    rows = DraftRows([P0, P1])
    law = dict(enumerate_outcomes(lambda rng: tuple(SCHEMES["k-models"](rows, 2, rng))))
    assert law == {(a, b): P0[a] * P1[b] for a in range(3) for b in range(3) if P0[a] * P1[b]}
    assert dict(enumerate_outcomes(lambda rng: tuple(SCHEMES["k-models"](rows, 1, rng)))) == {(0,): F(1, 2),
                                                                                              (1,): F(1, 2)}


def test_a_k_models_tree_has_the_law_derived_by_hand():
    # complete(b=2, H=2): the root's children (a, b), then a's children (c, d) and b's (e, f), every pair drawn
    # (model 0, model 1): P = p0(a) p1(b) · p0(c) p1(d) · p0(e) p1(f) (the rows do not depend on the context)
    drafter = FixedShape(make_topology("complete", 2, 2), "k-models")
    view = ModelView(two_drafts())
    trees: dict[tuple, F] = {}
    for draft, prob in enumerate_outcomes(lambda rng: drafter.draft(view, rng)):
        key = tuple(draft.tree.tokens[1:])
        trees[key] = trees.get(key, 0) + prob
    expected = {}
    for a, b, c, d, e, f in np.ndindex(3, 3, 3, 3, 3, 3):
        prob = P0[a] * P1[b] * P0[c] * P1[d] * P0[e] * P1[f]
        if prob:
            expected[(a, b, c, d, e, f)] = prob
    assert trees == expected and sum(trees.values()) == 1


def test_k_models_refuses_one_draft_model_and_too_many_children():
    one = TableModel(3, {None: P0}, {None: Q})
    with pytest.raises(InvalidParameterError) as err:
        certify(one, FixedShape(make_topology("complete", 1, 2), "k-models"), "tv-det")
    assert err.value.field == "drafting"
    with pytest.raises(InvalidParameterError) as err:
        certify(two_drafts(), FixedShape(make_topology("complete", 1, 3), "k-models"), "tv-det")
    assert err.value.field == "branching"


# ---- rules under k-models -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", ["tv-det", "match", "tv-sps"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rules_lossless_under_k_models(rule, seed):
    """``tv-det`` and ``match`` never read ``p``: lossless under any drafting. ``tv-sps`` reads ``p`` only at a node's
    first child, which k-models draws from draft model 0, whose row ``p`` is: SpS on it is lossless too."""
    model = RandomRationalModel(3, seed, draft_models=2)
    assert any(model.draft_rows(c)[0] != model.draft_rows(c)[1] for c in [(), (0,), (1,), (2,)])  # they differ
    cert = certify(model, FixedShape(make_topology("complete", 2, 2), "k-models"), rule)
    assert cert.lossless and cert.tvd == 0


def test_a_rule_that_treats_every_child_as_drawn_from_p_is_lossy_under_k_models():
    # the negative control of the test above: RRS with replacement reads p at every sibling, and under k-models
    # the second sibling was drawn from draft model 1, not p; on the same instances it is lossy
    model = RandomRationalModel(3, 0, draft_models=2)
    drafter = FixedShape(make_topology("complete", 2, 2), "k-models")
    assert not certify(model, drafter, "tv-rrs").lossless
    assert certify(model, FixedShape(make_topology("complete", 2, 2), "iid"), "tv-rrs").lossless


# ---- tables, reproducers, errors ----------------------------------------------------------------------------------

def test_table_json_round_trips_every_draft_model(tmp_path):
    model = RandomRationalModel(3, 5, draft_models=2)
    data = table_json(model, 1)
    assert set(data) == {"vocab", "drafts", "q"} and len(data["drafts"]) == 2
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    back = make_model("table", path, 0, 0)
    assert back.draft_models == 2
    for context in [(), (0,), (2,)]:
        assert back.draft_rows(context) == model.draft_rows(context) and back.q(context) == model.q(context)
    assert set(table_json(RandomRationalModel(3, 5), 1)) == {"vocab", "p", "q"}


@pytest.mark.parametrize("data, field", [
    ({"vocab": 2, "p": {"*": [1, 0]}, "drafts": [{"*": [1, 0]}, {"*": [0, 1]}], "q": {"*": [1, 0]}}, "table.drafts"),
    ({"vocab": 2, "drafts": [{"*": [1, 0]}], "q": {"*": [1, 0]}}, "table.drafts"),
    ({"vocab": 2, "drafts": {"*": [1, 0]}, "q": {"*": [1, 0]}}, "table.drafts"),
    ({"vocab": 2, "drafts": [{"*": [1, 0]}, {"*": [1, 1]}], "q": {"*": [1, 0]}}, 'table.drafts[1]["*"]'),
    ({"vocab": 2, "drafts": [{"*": [1, 0]}, {"0": [0, 1]}], "q": {"*": [1, 0]}}, None),
])
def test_table_errors_name_the_field(data, field):
    if field is None:  # a draft table without the context asked for: the error names that table's row
        model = TableModel.from_json(data)
        with pytest.raises(InvalidDistributionError) as err:
            ModelView(model).p((1,))
        assert err.value.field == 'drafts[1]["1"]'
        return
    with pytest.raises((InvalidParameterError, InvalidDistributionError)) as err:
        TableModel.from_json(data)
    assert err.value.field == field


@pytest.mark.parametrize("call, field", [
    (lambda: SyntheticModel(3, []), "rho"),
    (lambda: SyntheticModel(3, [0.5, 1.5]), "rho"),
    (lambda: SyntheticModel(3, [0.5, math.nan]), "rho"),
    (lambda: RandomRationalModel(3, 0, draft_models=0), "draft-models"),
    (lambda: make_model("synthetic", None, 3, 0, draft_models=2), "draft-models"),
    (lambda: make_model("random-rational", None, 3, 0, draft_models=0), "draft-models"),
    (lambda: make_model("random-rational", None, 3, 0, rho=[0.2, 0.4]), "rho"),
])
def test_bad_parameters_are_typed_errors_naming_the_field(call, field):
    with pytest.raises(InvalidParameterError) as err:
        call()
    assert err.value.field == field


def test_make_model_builds_several_draft_models():
    assert make_model("synthetic", None, 3, 0, rho=[0.2, 0.9]).draft_models == 2
    assert make_model("synthetic", None, 3, 0, rho=(0.2,)).draft_models == 1
    assert make_model("random-rational", None, 3, 0, draft_models=4).draft_models == 4


def test_a_lossy_k_models_certificate_replays_from_its_reproducer():
    model = RandomRationalModel(3, 0, draft_models=2)
    drafter = FixedShape(make_topology("complete", 2, 2), "k-models")
    cert = certify(model, drafter, "tv-rrs")
    case = capture(model, drafter, subject({"verifier": "tv-rrs"}), "fraction")
    data = json.loads(json.dumps(case.to_json(cert)))
    assert "p" not in data and len(data["drafts"]) == 2 and data["drafts"][0] and data["drafts"][1]
    again = parse_reproducer(data).certify()
    assert not cert.lossless and again.tvd == cert.tvd == F(2, 9)
    one = capture(RandomRationalModel(3, 0), FixedShape(make_topology("complete", 2, 2), "iid"),
                  subject({"verifier": "tv-rrs"}), "fraction").to_json()
    assert "p" in one and "drafts" not in one  # one draft model: the reproducer's JSON as before


def test_batteries_draft_k_models_on_pairs_with_enough_draft_models():
    assert draft_models_for("iid", make_topology("complete", 2, 3)) == 1
    assert draft_models_for("k-models", make_topology("chain", 3)) == 2
    assert draft_models_for("k-models", make_topology("explicit", parents=[-1, 0, 0, 0, 1])) == 3
    spec = replace(VERIFIERS["tv-det"], lossless_under=("k-models",))
    instances = list(random_instances(spec, 12, seed=3))
    assert {i.drafting for i in instances} == {"k-models"}
    for inst in instances:
        assert inst.model.draft_models == draft_models_for("k-models", inst.topology)
        assert certify(inst.model, inst.drafter, "tv-det").lossless
    estimate = estimate_round(RandomRationalModel(3, 0, draft_models=2),
                              FixedShape(make_topology("complete", 2, 2), "k-models"), "tv-det")
    assert estimate.log10_trees == pytest.approx(6 * math.log10(3))  # as i.i.d.: 3^6 ordered token lists at most


def test_the_prover_gives_each_draft_model_its_own_symbols():
    """``specproof prove`` under k-models: draft model 1's row is symbols of its own, so a proof covers every pair of
    draft models. At V = 2 and depth 1 ``tv-sps`` is proved lossless; ``tv-rrs`` at V = 3 is refuted by a random
    exact point whose reproducer carries both draft models and replays lossy."""
    topology = make_topology("complete", 1, 2)
    claimed = lambda rule: subject({"verifier": rule, "schemes": ["k-models"]}, "verifier")  # noqa: E731
    proof = prove(claimed("tv-sps"), topology, "k-models", 2)
    assert proof.verdict == "PROVED" and "d1_r_0" in proof.space.names
    refuted = prove(claimed("tv-rrs"), topology, "k-models", 3, probes=20)
    assert refuted.verdict == "REFUTED" and len(refuted.witness.drafts) == 1
    again = refuted.witness.certify()
    assert not again.lossless and again.tvd == refuted.witness_tvd
    with pytest.raises(InvalidParameterError) as err:
        prove(claimed("tv-sps"), topology, "k-models", 2, method="lifting")
    assert err.value.field == "method"


def test_the_shrinker_keeps_every_draft_model_and_finds_the_hand_case():
    """Shrunk, tv-rrs's loss under k-models is: p_0 = δ_2, p_1 = δ_1, q = (1/2, 1/2, 0) at the root of two
    children. Child 0 is 2, rejected (q(2) = 0); the residual is q, and child 1 = 1 is accepted with
    min(1, q(1)/p_0(1)) = 1 (p_0(1) = 0), so the output is 1 always: TVD 1/2."""
    case = capture(RandomRationalModel(3, 0, draft_models=2), FixedShape(make_topology("complete", 2, 2), "k-models"),
                   subject({"verifier": "tv-rrs"}), "fraction")
    small = shrink(case, 20)
    assert small.complete and small.case.parents == (-1, 0, 0) and len(small.case.drafts) == 1
    assert small.case.p[()] == (0, 0, 1) and small.case.drafts[0][()] == (0, 1, 0)
    assert small.case.q[()] == (F(1, 2), F(1, 2), 0) and small.certificate.tvd == F(1, 2)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_optimum_under_k_models_is_the_min_cut_of_its_coupling(seed):
    """At depth 1 the best acceptance with drafts X_0 ~ p_0, X_1 ~ p_1 (independent) is the largest P(Y ∈ {X_0,
    X_1}) over couplings with Y ~ q; by max-flow min-cut it is min over token sets T of
    q(V∖T) + P(some X_i ∈ T) = 1 − q(T) + 1 − (1 − p_0(T))(1 − p_1(T)). The LP (``optimum``) must reach exactly it."""
    model = RandomRationalModel(3, seed, draft_models=2)
    (p0, p1), q = model.draft_rows(()), model.q(())
    cut = min(2 - sum(q[y] for y in T) - (1 - sum(p0[y] for y in T)) * (1 - sum(p1[y] for y in T))
              for r in range(4) for T in itertools.combinations(range(3), r))
    assert optimum(model, FixedShape(make_topology("complete", 1, 2), "k-models")).optimum == cut
