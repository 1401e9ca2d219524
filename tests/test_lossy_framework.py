"""Lossy-by-design rules (docs/lossy.md): the knobs, the exact price certify reports (TVD, per position, KL), the
TVD budget of certify and the gate, hunt --maximize tvd, and SGLang's threshold rule against hand derivations."""

from __future__ import annotations

import json
import math
from fractions import Fraction as F

import numpy as np
import pytest
from click.testing import CliRunner

from exact import certify
from exact.subject import subject
from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError, UndecidedComparisonError
from simulator.models import RandomRationalModel
from simulator.models.model_pairs import TableModel
from simulator.montecarlo.engine import run_trials
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.lossy.interval import exact, greater
from specproof.cli import app as cli


def _table(p0, q0, vocab=2) -> TableModel:
    """One draft row and one target row for every context."""
    return TableModel(vocab, {None: p0}, {None: q0})


def _threshold(**knobs):
    return subject({"verifier": "sglang-threshold", "verifier_kwargs": knobs}).fn


def test_threshold_acc_below_one_prices_exactly_as_derived_by_hand():
    """V = 2, one drafted token, top-k drafting: the draft's top token 0 (p = 3/4) is accepted with probability
    min(1, q(0) / threshold_acc) = (1/3)/(1/2) = 2/3, otherwise the other token is drawn: the first token is 0 with
    probability 2/3 against the target's 1/3; the second follows the target either way. TVD = 1/3 (position 0:
    1/3; position 1: the rows are the same after either token, so 0), KL = 2/3·log 2 + 1/3·log(1/2) = log(2)/3."""
    model = _table((F(3, 4), F(1, 4)), (F(1, 3), F(2, 3)))
    cert = certify(model, FixedShape(make_topology("chain", 1, 1), "top-k"), _threshold(threshold_acc=0.5))
    assert cert.tvd == F(1, 3) and cert.position_tvd == (F(1, 3), 0)
    assert cert.kl == pytest.approx(math.log(2) / 3, rel=1e-12)
    assert cert.expected_accepted == F(2, 3) and not cert.lossless


def test_threshold_at_one_one_is_lossless_with_distinct_siblings_and_lossy_with_duplicates():
    """At (1, 1) the walk samples the target by inverse CDF over distinct siblings: LOSSLESS on 8 random rational
    pairs under top-k and without-replacement drafting. Its negative control is i.i.d. drafting, where two equal
    siblings count a token's mass twice. By hand, V = 2, two i.i.d. children, p = (3/4, 1/4), q = (2/5, 3/5):
    siblings (0, 0) accept 0 with probability min(1, 2·2/5) = 4/5; (0, 1) and (1, 0) sample q exactly; (1, 1)
    accept 1 surely. P(first token 0) = 9/16·4/5 + 6/16·2/5 = 3/5 against 2/5: TVD 1/5."""
    rule = _threshold(threshold_single=1, threshold_acc=1)
    for seed in range(8):
        model = RandomRationalModel(3, seed)
        for scheme in ("top-k", "without-replacement"):
            assert certify(model, FixedShape(make_topology("complete", 2, 2), scheme), rule).tvd == 0, (seed, scheme)
    model = _table((F(3, 4), F(1, 4)), (F(2, 5), F(3, 5)))
    cert = certify(model, FixedShape(make_topology("complete", 1, 2), "iid"), rule)
    assert cert.tvd == F(1, 5) and not cert.lossless


def test_threshold_single_zero_accepts_tokens_the_target_excludes_and_kl_is_infinite():
    """The kernel has no q(x) > 0 test: at threshold_single = 0 a drafted token of target probability 0 passes
    (q(x) ≥ 0), so the law leaves the target's support: KL is infinite, and said so."""
    model = _table((F(1, 2), F(1, 2)), (F(1), F(0)))
    cert = certify(model, FixedShape(make_topology("chain", 1, 1), "iid"), _threshold(threshold_single=0))
    assert cert.off_support == F(1, 2) and cert.kl == math.inf and cert.to_json()["kl"] == "inf"


def test_threshold_monte_carlo_agrees_with_the_exact_law_within_three_standard_errors():
    """Another instance (synthetic-free: a random rational pair, a complete tree, top-k drafting, thresholds
    (0.6, 0.7)): the mean accepted length and the frequency of the likeliest completed sequence
    are within 3 standard errors of their exact values (8,000 rounds)."""
    model = RandomRationalModel(3, 5)
    drafter = FixedShape(make_topology("complete", 2, 2), "top-k")
    rule = _threshold(threshold_single=0.6, threshold_acc=0.7)
    cert = certify(model, drafter, rule)
    from exact.certificate import round_law
    law = round_law(model, drafter, rule).completed()
    cell = max(law, key=law.get)
    accepted, sequences = run_trials(model, drafter, rule, seed=11, trials=range(8_000))
    assert abs(accepted.mean() - float(cert.expected_accepted)) <= 3 * accepted.std(ddof=1) / np.sqrt(len(accepted))
    hits = (sequences == np.array(cell)).all(axis=1)
    p = float(law[cell])
    assert abs(hits.mean() - p) <= 3 * math.sqrt(p * (1 - p) / len(hits))


def test_knobs_are_checked_and_named():
    with pytest.raises(InvalidParameterError) as err:
        _threshold(threshold_acc=0)
    assert err.value.field == "verifier-kwargs.threshold_acc"
    with pytest.raises(InvalidParameterError) as err:
        _threshold(threshold=0.5)
    assert err.value.field == "verifier-kwargs.threshold" and "threshold_single" in err.value.message
    with pytest.raises(InvalidParameterError) as err:
        subject({"verifier": "tv-sps", "verifier_kwargs": {"x": 1}})
    assert err.value.field == "verifier-kwargs"
    assert VERIFIERS["sglang-threshold"].lossy_by_design and not VERIFIERS["sglang-threshold"].is_control
    what = subject({"verifier": "sglang-threshold", "verifier_kwargs": {"threshold_acc": 0.5}})
    assert what.kind == "lossy by design" and what.control_note("iid") is None
    assert subject(what.fn).description["verifier_kwargs"] == {"threshold_acc": 0.5}  # the function keeps its knobs


def test_exp_log_comparisons_are_decided_exactly_and_a_tie_is_refused():
    assert greater(lambda c: c.exp(exact(c, F(1, 3))), lambda c: exact(c, F(13956, 10000)), "rule", "row")
    assert not greater(lambda c: c.exp(exact(c, F(1, 3))), lambda c: exact(c, F(13957, 10000)), "rule", "row")
    with pytest.raises(UndecidedComparisonError) as err:
        greater(lambda c: c.log(c.exp(exact(c, F(1, 3)))), lambda c: exact(c, F(1, 3)), "typical", "q[0]")
    assert err.value.field == "typical.q[0]"


CERTIFY = ["certify", "--verifier", "sglang-threshold", "--verifier-kwargs", "threshold_acc=0.5", "--model", "table",
           "--topology", "chain", "--depth", "1", "--drafting", "top-k"]


def test_certify_prints_the_price_and_a_budget_turns_the_exit_code(tmp_path):
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"vocab": 2, "p": {"*": ["3/4", "1/4"]}, "q": {"*": ["1/3", "2/3"]}}))
    runner = CliRunner()
    plain = runner.invoke(cli.main, [*CERTIFY, "--table", str(table)])
    assert plain.exit_code == 1 and "TVD per position: 1/3" in plain.output and "KL(law ‖ target) = 0.231049" in \
        plain.output and "control run" not in plain.output, plain.output
    within = runner.invoke(cli.main, [*CERTIFY, "--table", str(table), "--tvd-budget", "0.34"])
    assert within.exit_code == 0 and "WITHIN BUDGET" in within.output, within.output
    over = runner.invoke(cli.main, [*CERTIFY, "--table", str(table), "--tvd-budget", "0.33", "--json",
                                    str(tmp_path / "c.json")])
    assert over.exit_code == 1 and "OVER BUDGET: TVD 1/3" in over.output, over.output
    assert json.loads((tmp_path / "c.json").read_text())["within_budget"] is False
    bad = runner.invoke(cli.main, ["certify", "--verifier-kwargs", "a=1", "--vocab", "2"])
    assert bad.exit_code == 2 and "verifier-kwargs" in bad.output


def test_hunt_maximize_keeps_the_pair_of_largest_tvd(tmp_path):
    case = tmp_path / "case.json"
    out = CliRunner().invoke(cli.main, ["hunt", "--verifier", "sglang-threshold", "--verifier-kwargs",
                                        "threshold_acc=0.5", "--drafting", "top-k", "--maximize", "tvd",
                                        "--time-limit", "1", "--case-out", str(case), "--json",
                                        str(tmp_path / "h.json")])
    assert out.exit_code == 1 and "the largest TVD of" in out.output, out.output
    found = json.loads((tmp_path / "h.json").read_text())
    assert found["maximize"] == "tvd" and found["pairs"] >= 1
    again = CliRunner().invoke(cli.main, ["certify", "--case", str(case), "--json", str(tmp_path / "c.json")])
    assert json.loads((tmp_path / "c.json").read_text())["tvd"] == found["found"]["found"]["tvd"], again.output


GATE = """
[gate]
hunt_seconds = 0
[battery]
models = ["random-rational"]
seeds = [0, 1]
vocab = [2, 3]
topologies = ["chain"]
drafting = ["top-k"]
[[check]]
name = "priced"
verifier = "sglang-threshold"
verifier_kwargs = {threshold_acc = 0.5}
tvd_budget = BUDGET
"""


def test_the_gate_budget_holds_and_fails_naming_the_instance_and_baselines_keep_the_tvd(tmp_path):
    config = tmp_path / "specproof.toml"
    runner = CliRunner()
    config.write_text(GATE.replace("BUDGET", "0.9"))
    ok = runner.invoke(cli.main, ["gate", "--config", str(config), "--update-baselines"])
    assert ok.exit_code == 0 and "TVD ≤ 9/10" in ok.output, ok.output
    baselines = json.loads((tmp_path / "specproof-baselines.json").read_text())["priced"]
    assert all(set(v) == {"expected_accepted", "tvd"} for v in baselines.values())
    config.write_text(GATE.replace("BUDGET", "0.01"))
    over = runner.invoke(cli.main, ["gate", "--config", str(config)])
    assert over.exit_code == 1 and "OVER BUDGET on" in over.output and "first: random-rational seed=0" in over.output
    key = next(iter(baselines))
    baselines[key]["tvd"] = "1/7"
    (tmp_path / "specproof-baselines.json").write_text(json.dumps({"priced": baselines}))
    config.write_text(GATE.replace("BUDGET", "0.9"))
    moved = runner.invoke(cli.main, ["gate", "--config", str(config)])
    assert moved.exit_code == 1 and "TVD moved on 1 instance(s)" in moved.output, moved.output


def test_law_and_mc_take_the_knobs(tmp_path):
    """``law`` reads a case's verifier_kwargs: on one drafted token 0 with q = (1/3, 2/3), threshold_acc 1/2
    accepts it with probability 2/3 (at the default, 1/3); ``mc`` takes --verifier-kwargs as certify does."""
    case = tmp_path / "case.json"
    body = {"vocab": 2, "parents": [-1, 0], "tokens": [None, 0], "p": {"0": ["3/4", "1/4"]},
            "q": {"0": ["1/3", "2/3"], "1": ["1/2", "1/2"]}, "verifier": "sglang-threshold"}
    runner = CliRunner()
    for knobs, accepted in (({}, "1/3"), ({"threshold_acc": 0.5}, "2/3")):
        case.write_text(json.dumps({**body, "verifier_kwargs": knobs} if knobs else body))
        out = runner.invoke(cli.main, ["law", "--case", str(case)])
        assert out.exit_code == 0 and json.loads(out.output)["expected_accepted"] == accepted, out.output
    means = []
    for knobs in ("threshold_acc=1", "threshold_acc=0.2"):
        mc = runner.invoke(cli.main, ["mc", "--verifier", "sglang-threshold", "--verifier-kwargs", knobs,
                                      "--drafting", "top-k", "--topology", "chain", "--depth", "1", "--seeds", "1",
                                      "--trials", "400", "--json", str(tmp_path / "mc.json")])
        assert mc.exit_code in (0, 1), mc.output
        means.append(json.loads((tmp_path / "mc.json").read_text())["accept_len_mean"])
    assert means[1] > means[0]
