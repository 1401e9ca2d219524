"""TensorRT-LLM's MTP relaxed acceptance (simulator/verifiers/lossy/relaxed.py, docs/lossy.md#relaxed): its exact
distance to the target's sampling law and to greedy decoding against a hand derivation, Monte Carlo against the
exact E[τ], greedy decoding at relaxed_topk 1 with its control, and the knobs' refusals."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

from exact import certify
from simulator.completion import REFERENCES
from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError
from simulator.models import RandomRationalModel, TableModel
from simulator.montecarlo.engine import run_trials
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.registry import load_verifier
from specproof.cli import app as cli

#: p uniform; the target's root row (1/2, 3/10, 1/5) and every later row (1/5, 3/10, 1/2)
WORKED = {"vocab": 3, "p": {"*": ["1/3", "1/3", "1/3"]},
          "q": {"": ["1/2", "3/10", "1/5"], "*": ["1/5", "3/10", "1/2"]}}
CHAIN2 = FixedShape(make_topology("chain", 2))


def relaxed(**knobs):
    return load_verifier("relaxed", knobs)[1]


def test_worked_instance_distances_equal_the_hand_derivation():
    """relaxed_topk 2, relaxed_delta 1/5, a chain of depth 2 drafted i.i.d. from the uniform p.

    The candidates at the root are the top-2 {0, 1}: token 1 passes as q(1) = 3/10 = 1/2 − 1/5 (the kernel breaks
    only on threshold > value, so equality passes); at every later position {2, 1} likewise. Greedy decoding reads
    (0, 2, 2). With draft (d1, d2), each 1/9:
      d1 = 2 (1/3): rejected at the root, emits the argmax 0, completed greedily: (0, 2, 2);
      d1 ∈ {0, 1}, d2 = 0 (1/9 each): d1 kept, emits the argmax 2, completed: (d1, 2, 2);
      d1 ∈ {0, 1}, d2 ∈ {1, 2} (1/9 each): both kept, bonus argmax 2: (d1, d2, 2).
    L(0,2,2) = 1/3 + 1/9 + 1/9 = 5/9, L(0,1,2) = 1/9, L(1,1,2) = 1/9, L(1,2,2) = 2/9; E[τ] = 2·4/9 + 2/9 = 10/9.
    TVD to greedy decoding = 1 − 5/9 = 4/9. The target gives (0,1,2) 3/40, (0,2,2) 1/8, (1,1,2) 9/200, (1,2,2) 3/40,
    so the TVD to q^3 is Σ (L − Q)_+ = 13/360 + 155/360 + 119/1800 + 53/360 = 17/25."""
    model = TableModel.from_json(WORKED)
    cert = certify(model, CHAIN2, relaxed(relaxed_topk=2, relaxed_delta=0.2))
    assert (cert.tvd, cert.references["greedy"].tvd, cert.expected_accepted) == (Fraction(17, 25), Fraction(4, 9),
                                                                                 Fraction(10, 9))
    assert not cert.lossless and not cert.lossless_against("greedy")
    # just below the boundary token 1 fails at every position, and the rule is greedy decoding: (0, 2, 2) surely
    below = certify(model, CHAIN2, relaxed(relaxed_topk=2, relaxed_delta=0.19))
    assert below.references["greedy"].tvd == 0 and below.lossless_against("greedy")
    assert below.tvd == 1 - Fraction(1, 8)


def test_monte_carlo_agrees_with_the_exact_expected_accepted_length():
    model, drafter = RandomRationalModel(vocab=4, seed=3), FixedShape(make_topology("chain", 3))
    verify = relaxed(relaxed_topk=3, relaxed_delta=0.3)
    exact = certify(model, drafter, verify).expected_accepted
    accepted, _ = run_trials(model, drafter, verify, seed=5, trials=range(4000))
    se = accepted.std(ddof=1) / np.sqrt(len(accepted))
    assert 0 < exact < 3 and se > 0
    assert abs(accepted.mean() - float(exact)) <= 3 * se, (accepted.mean(), float(exact), se)


@pytest.mark.parametrize("seed", range(4))
def test_topk_one_is_greedy_decoding_and_a_wider_window_is_not(seed):
    model = RandomRationalModel(vocab=3, seed=seed)  # weights 1..4 with zeros: ties at the top occur
    greedy = certify(model, CHAIN2, relaxed())  # the shipped defaults: relaxed_topk 1, relaxed_delta 0
    assert greedy.lossless_against("greedy") and greedy.references["greedy"].tvd == 0
    assert not greedy.lossless and greedy.tvd > 0  # greedy decoding is not the target's sampling law
    wide = certify(model, CHAIN2, relaxed(relaxed_topk=3, relaxed_delta=1))  # every token of the top 3 passes
    assert not wide.lossless_against("greedy") and wide.references["greedy"].tvd > 0
    assert wide.expected_accepted > greedy.expected_accepted


def test_a_token_the_target_excludes_can_be_accepted():
    """The kernel ranks all V tokens: with relaxed_delta ≥ the top-1's probability a token of probability 0 in the
    top relaxed_topk passes, and the output leaves the target's support."""
    model = TableModel.from_json({"vocab": 3, "p": {"*": ["1/3", "1/3", "1/3"]}, "q": {"*": ["2/3", "1/3", "0"]}})
    cert = certify(model, FixedShape(make_topology("chain", 1)), relaxed(relaxed_topk=3, relaxed_delta=1))
    assert cert.off_support == Fraction(1, 3)  # draft token 2, accepted, then anything after it


@pytest.mark.parametrize("knobs,field", [
    ({"relaxed_topk": 0}, "relaxed_topk"), ({"relaxed_topk": 2.5}, "relaxed_topk"),
    ({"relaxed_topk": True}, "relaxed_topk"), ({"relaxed_topk": "3"}, "relaxed_topk"),
    ({"relaxed_delta": -0.1}, "relaxed_delta"), ({"relaxed_delta": "x"}, "relaxed_delta"),
    ({"relaxed_delta": float("nan")}, "relaxed_delta"), ({"relaxed_topp": 1}, "relaxed_topp")])
def test_bad_knobs_are_refused_naming_the_knob(knobs, field):
    with pytest.raises(InvalidParameterError) as err:
        load_verifier("relaxed", knobs)
    assert err.value.field == f"verifier-kwargs.{field}"


def test_topk_above_the_vocabulary_is_refused_as_torch_topk_refuses_it():
    model = TableModel.from_json(WORKED)
    with pytest.raises(InvalidParameterError, match="torch.topk") as err:
        certify(model, CHAIN2, relaxed(relaxed_topk=4))
    assert err.value.field == "verifier-kwargs.relaxed_topk"
    assert certify(model, CHAIN2, relaxed(relaxed_topk=3)).expected_accepted > 0  # k = V ranks the whole row


def test_certify_prints_and_writes_the_distance_to_greedy_decoding(tmp_path):
    table, out = tmp_path / "t.json", tmp_path / "c.json"
    table.write_text(json.dumps(WORKED))
    run = CliRunner().invoke(cli.main, ["certify", "--model", "table", "--table", str(table), "--topology", "chain",
                                        "--depth", "2", "--verifier", "relaxed", "--verifier-kwargs",
                                        "relaxed_topk=2,relaxed_delta=0.2", "--json", str(out)])
    assert run.exit_code == 1, run.output
    assert "TVD to greedy decoding (the target's argmax continuation) = 4/9 (0.444444): LOSSY" in run.output
    assert json.loads(out.read_text())["references"]["greedy"]["tvd"] == "4/9"


def test_every_reference_the_registry_names_exists():
    assert all(set(spec.references) <= set(REFERENCES) for spec in VERIFIERS.values())
    assert VERIFIERS["relaxed"].references == ("greedy",)
