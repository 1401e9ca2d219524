"""TRV's exact recursion over subtrees (exact/recursions/traversal_dp.py) against enumeration of the reference rule.

The recursion is a second method: it must give the very law (every round outcome's probability, as exact
fractions) that enumerating the reference rule gives, wherever enumeration finishes — on lossless variants and on
a lossy one alike, so that agreement is not just two zeros."""

from __future__ import annotations

from functools import partial

import pytest

from exact import certify
from exact.certificate import recursion_law, view_law
from exact.law import OutputLaw
from exact.recursions.traversal_dp import traversal_law
from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError
from simulator.models import ModelView, RandomRationalModel, SyntheticModel
from simulator.montecarlo.engine import run_seed
from simulator.trees import Topology, make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.traversal import traversal_verify
from oracles import recursion_in_floats_agrees, recursion_matches_enumeration

SHAPES = [("complete", 2, 2, "iid"), ("complete", 1, 3, "iid"), ("tapered", 2, 2, "iid"),
          ("complete", 2, 2, "without-replacement")]


def _view(seed: int, vocab: int = 3) -> ModelView:
    return ModelView(RandomRationalModel(vocab=vocab, seed=seed, zero_prob=0.2), "fraction")


@pytest.mark.parametrize("name", ["trv", "trv-iid"])
@pytest.mark.parametrize("shape,depth,branching,scheme", SHAPES)
def test_recursion_law_equals_enumeration(name, shape, depth, branching, scheme):
    recursion_matches_enumeration(name, shape, depth, branching, scheme, range(4))


def test_recursion_on_an_unbalanced_explicit_tree():
    parents = (-1, 0, 0, 0, 1, 1, 4, 2)  # children of different shapes under one node: merged shapes differ
    drafter = FixedShape(Topology("explicit", parents))
    for seed in range(3):
        view = _view(seed)
        assert recursion_law(view, drafter, "trv").outcomes == view_law(view, drafter, VERIFIERS["trv"].fn).outcomes


def test_recursion_reproduces_a_lossy_variant_exactly():
    """Alg. 3 as printed on i.i.d. trees — duplicates kept apart, the draft zeroed on rejection — is lossy
    (docs/corrections.md). The recursion with those options gives the same lossy law as enumerating the reference
    with them, and the same certificate machinery rejects it."""
    drafter = FixedShape(make_topology("complete", 2, 2))
    printed = partial(traversal_verify, merge=False, zero_draft=True)
    lossy_seen = False
    for seed in range(6):
        view = _view(seed)
        outcomes, _ = traversal_law(view, drafter, merge=False, zero_draft=True)
        assert outcomes == view_law(view, drafter, printed).outcomes
        tvd = OutputLaw(outcomes.items(), drafter.height, view, True).distance().tvd
        lossy_seen |= tvd > 0
    assert lossy_seen


def test_recursion_certifies_where_enumeration_cannot():
    """complete(b = 2, H = 3) at V = 3: 3^14 ≈ 4.8 million draft trees for enumeration; the recursion's certificate is
    exact (TVD = 0 against the target law computed apart), and its E[τ] agrees with the Monte Carlo engine (the
    array rule, a third implementation) within four standard errors."""
    model = SyntheticModel(3, 0.5, 1.0, 1.0, seed=2)
    drafter = FixedShape(make_topology("complete", 3, 2))
    cert = certify(model, drafter, "trv", method="recursion")
    assert cert.lossless and cert.tvd == 0 and cert.method == "recursion"
    mc = run_seed(model, drafter, "trv", VERIFIERS["trv"].fn, seed=0, trials=100_000)
    assert abs(float(cert.expected_accepted) - mc.accept_len_mean) < 4 * mc.accept_len_se


def test_recursion_refuses_what_it_does_not_cover():
    drafter = FixedShape(make_topology("complete", 1, 2))
    with pytest.raises(InvalidParameterError, match="method"):
        certify(RandomRationalModel(3), drafter, "tv-rrs", method="recursion")
    with pytest.raises(InvalidParameterError, match="method"):
        certify(RandomRationalModel(3), drafter, "trv", method="sampling")


def test_recursion_in_floats_agrees_with_fractions():
    recursion_in_floats_agrees("trv")


def test_certify_command_by_recursion_and_its_refusals(tmp_path):
    """The command line: TRV by recursion says so; a verifier without a recursion, and a reproducer (certified as
    found, by enumeration), are refused with exit 2 naming ``method``."""
    from click.testing import CliRunner
    from specproof.cli import app as cli
    shape = ["--topology", "complete", "--depth", "2", "--branching", "2", "--vocab", "3"]
    done = CliRunner().invoke(cli.main, ["certify", "--verifier", "trv", *shape, "--method", "recursion"])
    assert done.exit_code == 0 and "LOSSLESS" in done.output and "sub-problems" in done.output
    refused = CliRunner().invoke(cli.main, ["certify", "--verifier", "tv-rrs", *shape, "--method", "recursion"])
    assert refused.exit_code == 2 and "method" in refused.output
    case = tmp_path / "case.json"
    case.write_text('{"vocab": 2, "parents": [-1, 0], "tokens": [null, 0], "verifier": "trv", '
                    '"p": {"0": ["2/3", "1/3"]}, "q": {"0": ["1/3", "2/3"], "1": ["1/4", "3/4"]}}')
    refused = CliRunner().invoke(cli.main, ["certify", "--case", str(case), "--method", "recursion"])
    assert refused.exit_code == 2 and "method" in refused.output
