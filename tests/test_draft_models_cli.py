"""Several draft models on the command line (issue 69, item 1): ``--rho 0.3,0.8`` and ``--draft-models K`` on every
command that builds a model, a case's and a reproducer's ``drafts`` list, the gate's ``rho`` list and
``draft_models``; refusals naming the field; one draft model's output exactly as before.

The hand-derived instance (``K_MODELS_TABLE``): V = 3, one root with two children under ``k-models``, draft model 0
``p0 = (1/3, 1/3, 1/3)`` for child 1, draft model 1 ``(1, 0, 0)`` for child 2 (always token 0), target
``q = (1/2, 1/2, 0)`` at every context.

* ``tv-sps`` (SpS on the first child, which draft model 0 drew): accepts ``x1`` with ``min(1, q/p0)``, so token 0 or
  1 (each 1/3) and never 2; ``E[accepted] = Σ min(p0, q) = 2/3``; on rejection it draws from
  ``norm((q − p0)+) = (1/2, 1/2, 0)``: LOSSLESS.
* ``tv-rrs`` (recursive rejection, every child tested against ``p0``): when ``x1 = 2`` is rejected (1/3) the residual
  is ``(1/2, 1/2, 0)`` and child 2's token 0 passes with ``min(1, (1/2)/(1/3)) = 1``: the first token is 0 with
  probability ``1/3 + 1/3 = 2/3``, not 1/2: TVD 1/6 (the second token is ``q``'s on both sides), the negative
  control.
* The ceiling: every ``y = 0`` (1/2) can be accepted (child 2 is 0), a ``y = 1`` only where ``x1 = 1`` (1/3):
  ``E[τ]* = 1/2 + 1/3 = 5/6``.
"""

from __future__ import annotations

import json
from fractions import Fraction as F
from pathlib import Path

import pytest
from click.testing import CliRunner

from specproof.cli import app as cli
from specproof.gate.battery import baseline_key, battery, instances
from exact.subject import subject
from simulator.errors import InvalidParameterError
from simulator.verifiers import VERIFIERS

K_MODELS_TABLE = {"vocab": 3, "drafts": [{"": ["1/3", "1/3", "1/3"]}, {"": ["1", "0", "0"]}],
                  "q": {"*": ["1/2", "1/2", "0"]}}
#: a model description's keys with one draft model, as every output had them before several draft models
ONE_DRAFT_KEYS = {"synthetic": {"model", "vocab", "rho", "tau_p", "tau_q", "seed"},
                  "random-rational": {"model", "vocab", "seed", "max_weight", "zero_prob"},
                  "table": {"model", "vocab"}}
SHAPE_KEYS = {"topology", "parents", "depth", "drafting", "branching"}
K_MODELS = ["--drafting", "k-models", "--topology", "complete", "--depth", "1", "--branching", "2"]


def invoke(*args) -> tuple[int, str]:
    result = CliRunner().invoke(cli.main, [str(a) for a in args])
    return result.exit_code, result.output


def table(tmp_path: Path, data: dict = K_MODELS_TABLE) -> Path:
    path = tmp_path / "table.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("command", ["certify", "mc", "generate", "hunt", "optimum"])
def test_every_model_command_takes_a_rho_list_and_draft_models(command):
    main_command = cli.main.commands[command]
    ctx = main_command.make_context(command, ["--rho", "0.3, 0.8", "--draft-models", "2"])
    assert ctx.params["rho"] == (0.3, 0.8) and ctx.params["draft_models"] == 2
    ctx = main_command.make_context(command, ["--rho", "0.5"])
    assert ctx.params["rho"] == 0.5 and type(ctx.params["rho"]) is float and ctx.params["draft_models"] == 1


@pytest.mark.parametrize("args,field", [
    (["--rho", "0.3,x"], "rho"),
    (["--rho", "0.3,1.5"], "rho"),
    (["--rho", "0.3,"], "rho"),
    (["--rho", "0.3,nan"], "rho"),
    (["--draft-models", "0"], "draft_models"),
    (["--draft-models", "2"], "draft-models"),  # the synthetic model takes one rho per draft model
    (["--draft-models", "2", "--model", "table", "--table", "examples/block_example.json"], "draft-models"),
    (["--rho", "0.3,0.8", "--model", "random-rational"], "rho"),
    (["--drafting", "k-models"], "drafting"),  # one draft model
    (["--rho", "0.3,0.8", "--drafting", "k-models", "--branching", "3"], "drafting"),  # 3 children, 2 models
])
def test_refusals_name_the_field_before_any_work(args, field):
    code, out = invoke("certify", "--verifier", "tv-sps", *args)
    assert code == 2 and out.startswith(f"error: {field}: "), out
    assert "Traceback" not in out


def test_one_draft_model_describes_the_model_with_exactly_the_keys_it_always_had(tmp_path):
    for model in ("synthetic", "random-rational"):
        code, out = invoke("certify", "--verifier", "tv-rrs", "--model", model, "--depth", "1",
                           "--json", tmp_path / "c.json")
        config = json.loads((tmp_path / "c.json").read_text())["config"]
        assert code == 0 and set(config) == ONE_DRAFT_KEYS[model] | SHAPE_KEYS, config
        assert "draft models" not in out
    code, _ = invoke("certify", "--verifier", "bv", "--model", "table", "--table", "examples/block_example.json",
                     "--topology", "chain", "--depth", "2", "--json", tmp_path / "c.json")
    config = json.loads((tmp_path / "c.json").read_text())["config"]
    assert code == 0 and set(config) == ONE_DRAFT_KEYS["table"] | SHAPE_KEYS
    code, _ = invoke("optimum", "--no-rules", "--depth", "1", "--json", tmp_path / "o.json")
    assert code == 0 and set(json.loads((tmp_path / "o.json").read_text())["config"]) == (
        ONE_DRAFT_KEYS["synthetic"] | SHAPE_KEYS)


def test_certify_on_two_draft_models_by_hand_with_its_negative_control(tmp_path):
    path = table(tmp_path)
    code, out = invoke("certify", "--verifier", "tv-sps", "--model", "table", "--table", path, *K_MODELS,
                       "--json", tmp_path / "c.json")
    cert = json.loads((tmp_path / "c.json").read_text())
    assert code == 0 and "tv-sps: LOSSLESS" in out and "model table (2 draft models)" in out
    assert F(cert["expected_accepted"]) == F(2, 3) and cert["config"]["draft_models"] == 2
    code, out = invoke("certify", "--verifier", "tv-rrs", "--model", "table", "--table", path, *K_MODELS,
                       "--json", tmp_path / "c.json")
    assert code == 1 and "tv-rrs: LOSSY" in out
    assert F(json.loads((tmp_path / "c.json").read_text())["tvd"]) == F(1, 6)
    # the same rule with draft model 1 equal to draft model 0 (i.i.d. children): lossless again
    same = {**K_MODELS_TABLE, "drafts": [K_MODELS_TABLE["drafts"][0]] * 2}
    code, out = invoke("certify", "--verifier", "tv-rrs", "--model", "table", "--table", table(tmp_path, same),
                       *K_MODELS)
    assert code == 0 and "tv-rrs: LOSSLESS" in out


def test_certify_with_a_rho_list_and_with_draft_models(tmp_path):
    code, out = invoke("certify", "--verifier", "tv-det", "--rho", "0.3,0.8", *K_MODELS, "--json", tmp_path / "c.json")
    config = json.loads((tmp_path / "c.json").read_text())["config"]
    assert code == 0 and "tv-det: LOSSLESS" in out and "model synthetic (2 draft models, rho 0.3 and 0.8)" in out
    assert config["rho"] == [0.3, 0.8] and set(config) == ONE_DRAFT_KEYS["synthetic"] | SHAPE_KEYS
    code, out = invoke("certify", "--verifier", "tv-sps", "--model", "random-rational", "--draft-models", "2",
                       "--seeds", "4", *K_MODELS, "--json", tmp_path / "c.json")
    config = json.loads((tmp_path / "c.json").read_text())["config"]
    assert code == 0 and "model random-rational (2 draft models)" in out and config["draft_models"] == 2
    code, out = invoke("certify", "--verifier", "tv-rrs", "--model", "random-rational", "--draft-models", "2",
                       *K_MODELS)
    assert code == 1 and "tv-rrs: LOSSY" in out
    # under iid drafting a rule reads draft model 0, and the target and draft model 0 of --rho 0.3,0.8 are --rho
    # 0.3's: the same certificate, and Monte Carlo's batched path the same numbers
    runs = {}
    for rho in ("0.3,0.8", "0.3"):
        code, _ = invoke("certify", "--verifier", "tv-rrs", "--rho", rho, "--json", tmp_path / "c.json")
        code_mc, _ = invoke("mc", "--verifier", "tv-rrs", "--rho", rho, "--seeds", "1", "--trials", "300",
                            "--json", tmp_path / "m.json")
        mc = json.loads((tmp_path / "m.json").read_text())
        runs[rho] = (code, code_mc, json.loads((tmp_path / "c.json").read_text())["expected_accepted"],
                     mc["accept_len_mean"], mc["tvd"])
    assert runs["0.3,0.8"] == runs["0.3"] and runs["0.3"][:2] == (0, 0)


def test_optimum_mc_and_generate_on_two_draft_models(tmp_path):
    code, out = invoke("optimum", "--model", "table", "--table", table(tmp_path), *K_MODELS,
                       "--json", tmp_path / "o.json")
    result = json.loads((tmp_path / "o.json").read_text())
    assert code == 0 and "E[τ]* = 5/6" in out and result["config"]["draft_models"] == 2
    code, out = invoke("mc", "--verifier", "tv-sps", "--rho", "0.3,0.8", *K_MODELS, "--seeds", "1",
                       "--trials", "500", "--json", tmp_path / "m.json")
    assert code == 0 and "2 draft models, rho 0.3 and 0.8" in out
    assert json.loads((tmp_path / "m.json").read_text())["rho"] == [0.3, 0.8]
    code, _ = invoke("mc", "--verifier", "tv-sps", "--seeds", "1", "--trials", "500", "--json", tmp_path / "m.json")
    assert code == 0 and not {"rho", "draft_models"} & set(json.loads((tmp_path / "m.json").read_text()))
    code, out = invoke("generate", "--verifier", "tv-sps", "--model", "random-rational", "--draft-models", "2",
                       *K_MODELS, "--tokens", "3", "--exact")
    assert code == 0 and "LOSSLESS" in out and "random-rational (2 draft models)" in out


MODEL_1_ROW = "tests.test_draft_models_cli:model_one_row"


def model_one_row(tree, p, q, rng):
    """A plugin that returns the root with a token of draft model 1's root row: its law shows the row arrived."""
    return 0, rng.categorical(p[0].models[1])


def test_law_reads_a_cases_drafts(tmp_path):
    case = {"vocab": 2, "parents": [-1, 0, 0], "tokens": [None, 0, 1], "verifier": MODEL_1_ROW,
            "drafts": [{"0": ["2/3", "1/3"]}, {"0": ["1/4", "3/4"]}],
            "q": {"0": ["1/3", "2/3"], "1": ["1/2", "1/2"], "2": ["1/2", "1/2"]}}
    (tmp_path / "case.json").write_text(json.dumps(case))
    code, out = invoke("law", "--case", tmp_path / "case.json")
    result = json.loads(out)
    assert code == 0 and result["draft_models"] == 2
    assert {e["y"]: F(e["prob"]) for e in result["law"]} == {0: F(1, 4), 1: F(3, 4)}
    # token 0 of node 2 is drawn by neither draft model: refused, naming it
    case["tokens"], case["drafts"][1]["0"] = [None, 0, 0], ["0", "1"]
    case["drafts"][0]["0"] = ["0", "1"]
    (tmp_path / "case.json").write_text(json.dumps(case))
    code, out = invoke("law", "--case", tmp_path / "case.json")
    assert code == 2 and "tokens[1]" in out
    # one draft model: the JSON as it was, without draft_models
    del case["drafts"]
    case.update(p={"0": ["2/3", "1/3"]}, tokens=[None, 0, 1], verifier="tv-sps")
    (tmp_path / "case.json").write_text(json.dumps(case))
    code, out = invoke("law", "--case", tmp_path / "case.json")
    assert code == 0 and set(json.loads(out)) == {"law", "expected_accepted"}


def sps_k_models(tree, p, q, rng):
    """``tv-sps`` claiming ``k-models``: its first child is draft model 0's, so it stays lossless."""
    return VERIFIERS["tv-sps"].fn(tree, p, q, rng)


def rrs_k_models(tree, p, q, rng):
    """``tv-rrs`` claiming ``k-models``: it tests child 2 against draft model 0's row, the control."""
    return VERIFIERS["tv-rrs"].fn(tree, p, q, rng)


sps_k_models.schemes = rrs_k_models.schemes = ("k-models",)


def test_prove_gives_every_draft_model_symbols_under_k_models(tmp_path):
    code, out = invoke("prove", "--verifier", "tests.test_draft_models_cli:sps_k_models", "--drafting", "k-models",
                       "--vocab", "2", "--json", tmp_path / "proof.json")
    proof = json.loads((tmp_path / "proof.json").read_text())
    assert code == 0 and "PROVED: tests.test_draft_models_cli:sps_k_models" in out
    assert "V = 2, 2 symbolic draft models, k-models" in out
    assert proof["config"]["draft_models"] == 2 and "drafts[1](root)" in proof["rows"]
    assert len(proof["symbols"]) == 5  # V − 1 = 1 each: draft models 0 and 1 at the root, q at 3 contexts
    code, out = invoke("prove", "--verifier", "tests.test_draft_models_cli:rrs_k_models", "--drafting", "k-models",
                       "--vocab", "3", "--case-out", tmp_path / "witness.json")
    assert code == 1 and "REFUTED: tests.test_draft_models_cli:rrs_k_models" in out
    assert len(json.loads((tmp_path / "witness.json").read_text())["drafts"]) == 2
    code, out = invoke("certify", "--case", tmp_path / "witness.json")
    assert code == 1 and "LOSSY" in out


@pytest.mark.slow
def test_hunt_carries_the_draft_models_to_its_reproducer(tmp_path):
    case_out = tmp_path / "case.json"
    code, out = invoke("hunt", "--verifier", "tv-rrs", "--drafting", "k-models", "--time-limit", "30",
                       "--case-out", case_out)
    assert code == 1 and "tv-rrs: LOSSY" in out and "draft models)" in out
    reproducer = json.loads(case_out.read_text())
    assert "p" not in reproducer and len(reproducer["drafts"]) >= 2 and reproducer["drafting"] == "k-models"
    code, out = invoke("certify", "--case", case_out)
    assert code == 1 and "tv-rrs: LOSSY" in out and "table model (" in out
    # draft models held fixed: a tree wider than them is refused
    code, out = invoke("hunt", "--verifier", "tv-rrs", "--drafting", "k-models", "--rho", "0.3,0.8", "--depth", "1",
                       "--branching", "3", "--time-limit", "5")
    assert code == 2 and out.startswith("error: drafting: ")


def test_the_battery_takes_a_rho_list_and_draft_models():
    b = battery({"models": ["synthetic", "random-rational"], "rho": [0.3, 0.8], "topologies": ["complete"],
                 "depth": 1, "drafting": ["k-models"], "seeds": [0], "vocab": [3]})
    keys = [baseline_key(inst, b) for inst in instances(b, subject("tv-rrs"))]
    assert keys == ["synthetic seed=0 V=3 complete k-models depth=1 branching=2 rho=[0.3, 0.8] tau_p=1.0 tau_q=1.0 "
                    "fraction", "random-rational seed=0 V=3 complete k-models depth=1 branching=2 zero_prob=0.25 "
                    "draft_models=2 fraction"]
    one = battery({})  # one draft model: the keys as they always were
    assert baseline_key(instances(one, subject("tv-sps"))[0], one) == (
        "random-rational seed=0 V=2 chain iid depth=2 branching=2 zero_prob=0.25 fraction")


@pytest.mark.parametrize("given,field", [
    ({"rho": [0.3]}, "rho"),
    ({"rho": [0.3, "x"]}, "rho[1]"),
    ({"rho": [0.3, 1.5]}, "rho[1]"),
    ({"draft_models": 0}, "draft_models"),
    ({"draft_models": True}, "draft_models"),
    ({"draft_models": 2, "models": ["synthetic"]}, "rho"),
    ({"draft_models": 3, "rho": [0.3, 0.8]}, "draft_models"),
])
def test_bad_battery_draft_models_name_the_key(given, field):
    with pytest.raises(InvalidParameterError) as err:
        battery(given, "config.battery")
    assert err.value.field == f"config.battery.{field}"


GATE_CONFIG = """[gate]
baselines = "baselines.json"
state = "state"
hunt_seconds = 1
pythonpath = ["."]

[battery]
models = ["synthetic", "random-rational"]
rho = [0.3, 0.8]
seeds = [0, 1]
vocab = [3]
topologies = ["complete"]
depth = 1

[[check]]
name = "tv-rrs under k-models"
verifier = "tv-rrs"
expect = "lossy"
battery = { drafting = ["k-models"] }

[[check]]
verifier = "det_k_models:verify"
expect = "lossless"

[[check]]
verifier = "tv-sps"
expect = "lossless"
battery = { drafting = ["iid"] }
"""

#: a plugin claiming k-models: the deterministic rule, which never reads a draft row at a drafted token
DET_K_MODELS = '''from simulator.verifiers import VERIFIERS


def verify(tree, p, q, rng):
    return VERIFIERS["tv-det"].fn(tree, p, q, rng)


verify.schemes = ("k-models",)
'''


@pytest.mark.slow
def test_the_gate_on_two_draft_models(tmp_path):
    (tmp_path / "specproof.toml").write_text(GATE_CONFIG)
    (tmp_path / "det_k_models.py").write_text(DET_K_MODELS)
    code, out = invoke("gate", "--config", tmp_path / "specproof.toml", "--update-baselines")
    assert code == 0, out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert "| 4 | 0 |" in rows["det_k_models:verify"] and "holds" in rows["det_k_models:verify"]
    assert "holds" in rows["tv-rrs under k-models"] and "| 4 | 0 |" not in rows["tv-rrs under k-models"]
    assert "| 4 | 0 |" in rows["tv-sps"]
    baselines = json.loads((tmp_path / "baselines.json").read_text())
    assert any("draft_models=2" in key for key in baselines["tv-sps"])


def test_a_default_battery_drafts_k_models_with_one_draft_model_a_child():
    """tv-det claims k-models (it never reads a draft row): the default battery (one draft model, one ρ) builds
    its k-models instances with a draft model per child, and their baseline keys say so; tv-rrs, which reads draft
    model 0's row for every child, is lossy on some of them (the negative control)."""
    from specproof.gate.battery import build
    from exact.certificate import certify

    b = battery()
    found = [inst for inst in instances(b, subject("tv-det")) if inst["drafting"] == "k-models"]
    assert {inst["topology"] for inst in found} == {"chain", "complete"}
    for inst in found[:4]:
        model, drafter = build(inst, b)
        assert model.draft_models == 2  # chain: two at least; complete b = 2: one a child
        assert certify(model, drafter, "tv-det").lossless
        assert ("draft_models=2" in baseline_key(inst, b)) == (inst["model"] == "random-rational")
    rrs = [inst for inst in instances({**b, "drafting": ["k-models"]}, subject("tv-rrs"))
           if inst["topology"] == "complete"]
    assert any(not certify(*build(inst, b), "tv-rrs").lossless for inst in rrs)  # reads p for child 1 too
