"""Token verification's law by recursion over (prefix, shape node) (exact/recursions/token_law.py) against a second
method: enumerating the reference rule on every draft tree and choice, wherever enumeration finishes.

The comparison is of the whole completed law over ``Σ^(H+1)``, not only of the verdict, on lossless rules and on
the controls alike (so agreement is not two zeros), and the same comparison rejects a recursion of another rule."""

from __future__ import annotations

import numpy as np
import pytest

from exact import certify
from exact.certificate import FLOAT_TOLERANCE, recursion_law, view_law
from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError
from simulator.models import ModelView, RandomRationalModel, SyntheticModel
from simulator.trees import Topology, make_topology
from simulator.verifiers import VERIFIERS
from oracles import target_joint

RULES = ["tv-sps", "tv-rrs", "tv-kseq", "tv-gr", "bug-residual-q", "bug-accept-all"]
SHAPES = [make_topology("chain", 2, 1), make_topology("complete", 2, 2), make_topology("complete", 1, 3),
          make_topology("multi-chain", 2, 2), Topology("explicit", (-1, 0, 0, 0, 1, 1, 2))]
#: float64 on both sides: each probability is a product of a few rounded factors, each rounded near 1e-16
AGREE = 1e-13


def _models(vocab: int):
    yield SyntheticModel(vocab=vocab, seed=1, rho=0.3, tau_p=0.7, tau_q=1.3)
    yield RandomRationalModel(vocab=vocab, seed=2, zero_prob=0.25)  # zero entries: supports differ


def _enumerated(view: ModelView, drafter: FixedShape, name: str) -> np.ndarray:
    """The completed law by enumerating the reference rule, as a vector over Σ^(H+1) in lexicographic order."""
    completed = view_law(view, drafter, VERIFIERS[name].fn).completed()
    out = np.zeros(view.vocab ** (drafter.height + 1))
    for seq, prob in completed.items():
        out[np.ravel_multi_index(seq, (view.vocab,) * len(seq))] = prob
    return out


def _same(view: ModelView, drafter: FixedShape, recursion: str, enumeration: str) -> bool:
    """Whether the recursion of one rule gives the law, ``E[τ]`` and acceptance profile that enumerating a rule
    gives (the completed laws of two lossless rules are both the target's: ``E[τ]`` and the profile tell them
    apart)."""
    law = recursion_law(view, drafter, recursion)
    enumerated = view_law(view, drafter, VERIFIERS[enumeration].fn)
    return bool(np.abs(law.vector - _enumerated(view, drafter, enumeration)).max() < AGREE
                and abs(law.expected_accepted() - enumerated.expected_accepted()) < AGREE
                and np.allclose(law.profile(), enumerated.profile(), rtol=0, atol=AGREE))


@pytest.mark.parametrize("name", RULES)
@pytest.mark.parametrize("topology", SHAPES, ids=lambda t: f"{t.name}{len(t.parents)}")
def test_recursion_law_equals_enumeration(name, topology):
    for model in _models(3):
        assert _same(ModelView(model, "float"), FixedShape(topology), name, name)


def test_recursion_target_is_the_joint_from_the_rows():
    model = RandomRationalModel(vocab=3, seed=5, zero_prob=0.25)
    drafter = FixedShape(make_topology("complete", 2, 2))
    law = recursion_law(ModelView(model, "float"), drafter, "tv-rrs")
    joint = target_joint(model, 2)  # brute force from the model's rows, independently of both engines
    for seq, prob in joint.items():
        assert abs(law.target_vector[np.ravel_multi_index(seq, (3, 3, 3))] - float(prob)) < 1e-15


def test_the_comparison_rejects_another_rules_law():
    # Controls for the battery: the recursion of one rule against enumeration of another fails the same check, by
    # E[τ] (two lossless rules) and by the law itself (a lossy rule against a lossless one).
    drafter = FixedShape(make_topology("complete", 2, 2))
    view = ModelView(SyntheticModel(vocab=3, seed=1, rho=0.3, tau_p=0.7, tau_q=1.3), "float")
    assert not _same(view, drafter, "tv-rrs", "tv-sps")
    assert not _same(view, drafter, "bug-residual-q", "tv-sps")
    assert not _same(view, drafter, "tv-kseq", "tv-rrs")


@pytest.mark.parametrize("name,lossless", [("tv-rrs", True), ("tv-kseq", True), ("bug-residual-q", False),
                                           ("bug-accept-all", False)])
def test_certificate_by_recursion_at_the_toy_studys_size(name, lossless):
    model = SyntheticModel(vocab=15, seed=0)
    cert = certify(model, FixedShape(make_topology("complete", 4, 2)), name, "float", method="recursion")
    assert cert.lossless is lossless
    if lossless:
        assert cert.tvd <= FLOAT_TOLERANCE and cert.counterexample is None
    else:  # the counterexample is a real sequence whose two probabilities differ
        ce = cert.counterexample
        assert len(ce.sequence) == 5 and abs(ce.verifier_prob - ce.target_prob) > 1e-6


def test_recursion_refuses_what_it_does_not_model():
    view = ModelView(SyntheticModel(vocab=3), "float")
    tree = make_topology("complete", 2, 2)
    with pytest.raises(InvalidParameterError) as err:
        recursion_law(view, FixedShape(tree, "without-replacement"), "tv-sps")
    assert err.value.field == "drafting"
    with pytest.raises(InvalidParameterError) as err:
        recursion_law(ModelView(SyntheticModel(vocab=3), "fraction"), FixedShape(tree), "tv-rrs")
    assert err.value.field == "arithmetic"
    with pytest.raises(InvalidParameterError) as err:
        recursion_law(view, FixedShape(tree), "tv-opt")
    assert err.value.field == "method"
