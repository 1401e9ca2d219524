"""Gate checks that name a whole generation loop, and the pytest helpers for loops (issue 65, item 6;
docs/gate.md#loop-checks).

Every battery here is the exact prefix table of ``examples/specproof-loops-table.json`` (float64 logits, a
fraction of a second per certificate) at 2 new tokens, except the shipped example config's run (3 tokens, marked
slow). Verdicts, TVDs and ``E[tokens per target pass]`` are compared with :func:`exact.generation_law.certify_loop`
called directly; JUnit counts are derived by hand from the battery.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from examples import loops as example  # noqa: E402
from exact.generation_law import certify_loop  # noqa: E402
from simulator.errors import InvalidParameterError, SpecproofError  # noqa: E402
from simulator.loops.builtin import plain_sampling  # noqa: E402
from simulator.loops.models import prefix_table_pair  # noqa: E402
from simulator.models import TableModel  # noqa: E402
from specproof.cli import app as cli  # noqa: E402
from specproof.gate.runner import load_config  # noqa: E402
from specproof.gate.testing import assert_loop_lossless, assert_loop_lossy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "examples" / "specproof-loops-table.json"
GOOD, TWIN = "examples.loops:speculative_sampling", "examples.loops:raw_draft_row"
#: the pytest helpers' battery: the example table, 2 new tokens (depth 1 sets only the default length here: the
#: example loop drafts 2 tokens a round whatever the battery's depth)
SMALL = {"models": ["prefix-table"], "tables": [str(TABLE)], "depth": 1, "max_new_tokens": 2}
LOOP_BATTERY = (f'[loop_battery]\nmodels = ["prefix-table"]\ntables = [{json.dumps(str(TABLE))}]\ndepth = 1\n'
                "max_new_tokens = 2\n\n")


def check(loop: str, expect: str, name: str | None = None, extra: str = "sampling = { top_k = 2 }\n") -> str:
    return "[[check]]\n" + (f"name = {json.dumps(name)}\n" if name else "") + \
        f'loop = "{loop}"\nexpect = "{expect}"\n{extra}\n'


def write(folder: Path, checks: str, battery: str = LOOP_BATTERY) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "specproof.toml"
    path.write_text(f'[gate]\nstate = "state"\n\n{battery}{checks}')
    return path


def direct(loop, sampling: dict, tokens: int = 2):
    """The certificate of ``loop`` on the example table, apart from the gate."""
    target, draft = prefix_table_pair(TableModel.from_file(TABLE), 1)
    return certify_loop(loop, plain_sampling, target, draft, (0,), tokens, sampling)


def junit_cases(path: Path) -> list[ET.Element]:
    suite = ET.parse(path).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases)
    return cases


def test_a_twin_expected_lossless_fails_the_gate_and_as_a_control_holds(tmp_path):
    """The negative control: the raw-row twin named lossless fails the gate (exit 1) with its TVD and the
    continuation that differs most; the same twin as a control is flagged. JUnit by hand: one instance per check
    and the control's "control flagged"; no hunt testcase (loops are not hunted)."""
    config = write(tmp_path, check(TWIN, "lossy", "twin as a control") + check(TWIN, "lossless", "twin claimed"))
    junit = tmp_path / "out.xml"
    out = CliRunner().invoke(cli.main, ["gate", "--config", str(config), "--junit", str(junit)])
    assert out.exit_code == 1, out.output
    cases = junit_cases(junit)
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("twin as a control", "prefix-table specproof-loops-table.json"), ("twin as a control", "control flagged"),
        ("twin claimed", "prefix-table specproof-loops-table.json")]
    failed = [c for c in cases if c.find("failure") is not None]
    assert [c.get("classname") for c in failed] == ["twin claimed"]
    bad = direct(example.raw_draft_row, {"top_k": 2})
    message = failed[0].find("failure").get("message")
    assert not bad.lossless and f"TVD {float(bad.tvd):.6g}" in message, message
    assert f"continuation {list(bad.counterexample.sequence)}" in message and "under plain sampling" in message
    assert "| twin claimed | lossless | 1 | 1 | no baseline | not hunted (a loop) | REGRESSION: LOSSY" in out.output
    assert "| twin as a control | lossy | 1 | 1 | no baseline | not hunted (a loop) | holds |" in out.output
    assert "E[tokens per target pass]" in out.output


def test_a_loop_figure_is_kept_as_a_baseline_and_a_move_is_a_regression(tmp_path):
    """--update-baselines keeps each instance's E[tokens per target pass] (the direct certificate's), keyed with
    the depth, length, prompt and sampling; the rerun takes the kept result and holds; a baseline moved by more
    than the tolerance is a regression naming the figure."""
    config = write(tmp_path, check(GOOD, "lossless"))
    assert CliRunner().invoke(cli.main, ["gate", "--config", str(config), "--update-baselines"]).exit_code == 0
    baselines = json.loads((tmp_path / "specproof-baselines.json").read_text())
    key = "prefix-table specproof-loops-table.json depth=1 max_new_tokens=2 prompt_ids=[0] top_k=2"
    assert list(baselines[GOOD]) == [key]
    assert abs(baselines[GOOD][key] - float(direct(example.speculative_sampling, {"top_k": 2})
                                            .expected_tokens_per_pass)) < 1e-12
    again = CliRunner().invoke(cli.main, ["gate", "--config", str(config)])
    assert again.exit_code == 0 and "1 equal, 0 moved" in again.output, again.output
    baselines[GOOD][key] += 1e-6
    (tmp_path / "specproof-baselines.json").write_text(json.dumps(baselines))
    moved = CliRunner().invoke(cli.main, ["gate", "--config", str(config)])
    assert moved.exit_code == 1 and "E[tokens per target pass] moved on 1 instance(s)" in moved.output, moved.output


def test_a_loop_that_raises_is_its_checks_error_and_the_others_still_run(tmp_path):
    name = f"gate_loop_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{name}.py").write_text("def loop(target, draft, input_ids, *, max_new_tokens, sampling):\n"
                                         "    raise RuntimeError('boom on purpose')\n")
    config = write(tmp_path, check(GOOD, "lossless") + check(f"{name}:loop", "lossless"))
    config.write_text(config.read_text().replace("[gate]\n", '[gate]\npythonpath = ["."]\n'))
    out = CliRunner().invoke(cli.main, ["gate", "--config", str(config)])
    assert out.exit_code == 2, out.output
    assert f"| {GOOD} | lossless | 1 | 0 | no baseline | not hunted (a loop) | holds |" in out.stdout
    assert "boom on purpose" in out.stderr and "Traceback" not in out.output


BAD = [
    (check(GOOD, "lossless") + 'verifier = "tv-sps"\n', "config.check[0].verifier"),
    (check(GOOD, "lossless", extra='kernel = "a:b"\n'), "config.check[0].kernel"),
    (check(GOOD, "lossless", extra="sampling = { top_kk = 2 }\n"), "config.check[0].sampling.top_kk"),
    (check(GOOD, "lossless", extra="sampling = { top_p = 1.5 }\n"), "config.check[0].sampling.top_p"),
    (check(GOOD, "lossless", extra="sampling = 2\n"), "config.check[0].sampling"),
    (check(GOOD, "lossless", extra='battery = { models = ["tiny-llama"], vocab = [9] }\n'),
     "config.check[0].battery.vocab"),
    (check(GOOD, "lossless", extra='battery = { models = ["gpt-2"] }\n'), "config.check[0].battery.models"),
    (check(GOOD, "lossless", extra='battery = { topologies = ["chain"] }\n'), "config.check[0].battery.topologies"),
    (check(GOOD, "lossless", extra="battery = { depth = 0 }\n"), "config.check[0].battery.depth"),
    (check(GOOD, "lossless", extra="battery = { max_new_tokens = 1 }\n"), "config.check[0].battery.max_new_tokens"),
    (check(GOOD, "lossless", extra="battery = { prompt_ids = [3] }\n"), "config.check[0].battery.prompt_ids"),
    (check(GOOD, "lossless", extra='battery = { tables = ["missing.json"] }\n'), "config.check[0].battery.tables[0]"),
    (check("speculative", "lossless"), "config.check[0].loop"),
    (check("no_such_module_here:loop", "lossless"), "config.check[0].loop"),
    (check(GOOD, "maybe"), "config.check[0].expect"),
    (check(GOOD, "lossless") + check(GOOD, "lossless"), "config.check[1].name"),
    ('[[check]]\nverifier = "tv-sps"\nexpect = "lossless"\nsampling = { top_k = 2 }\n', "config.check[0].sampling"),
    ("[loop_battery]\nbogus = 1\n\n" + check(GOOD, "lossless"), "config.loop_battery.bogus"),
    ('[loop_battery]\nmodels = ["prefix-table"]\n\n' + check(GOOD, "lossless"), "config.loop_battery.tables"),
]


@pytest.mark.parametrize("checks, field", BAD, ids=[field + f"-{i}" for i, (_, field) in enumerate(BAD)])
def test_bad_loop_checks_are_refused_naming_the_field(tmp_path, checks, field):
    battery = "" if checks.startswith("[loop_battery]") else LOOP_BATTERY
    with pytest.raises(SpecproofError) as err:
        load_config(write(tmp_path, checks, battery))
    assert err.value.field == field, err.value


def test_loop_checks_without_torch_are_refused_before_anything_runs(tmp_path, monkeypatch):
    config = write(tmp_path, check(GOOD, "lossless") + check(TWIN, "lossy", "control"))
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    out = CliRunner().invoke(cli.main, ["gate", "--config", str(config)])
    assert out.exit_code == 2 and "error: config.check[0].loop" in out.stderr, out.output
    assert f"config.check[1] (loop 'control')" in out.stderr and "pip install -e '.[torch]'" in out.stderr
    assert not (tmp_path / "state").exists()


def test_assert_loop_lossless_and_lossy_on_the_example_and_its_twin():
    assert assert_loop_lossless(GOOD, {"top_k": 2}, **SMALL) == 1
    assert assert_loop_lossless(example.speculative_sampling, {"temperature": 0.7, "top_p": 0.8}, **SMALL) == 1
    bad = direct(example.raw_draft_row, {"top_k": 2})
    with pytest.raises(AssertionError) as err:
        assert_loop_lossless(TWIN, {"top_k": 2}, **SMALL)
    message = str(err.value)
    assert message.startswith(f"{TWIN} is LOSSY on prefix-table specproof-loops-table.json (top-k 2, 2 new tokens")
    assert f"TVD {float(bad.tvd):.6g}" in message and f"{list(bad.counterexample.sequence)}" in message, message
    assert assert_loop_lossy(TWIN, {"top_k": 2}, **SMALL).tvd == bad.tvd
    with pytest.raises(AssertionError, match="certified LOSSLESS on all 1 instances"):
        assert_loop_lossy(GOOD, {"top_k": 2}, **SMALL)
    # without a cut the raw and processed rows agree: the twin is lossless there, a control the battery can't flag
    with pytest.raises(AssertionError, match="expected a loss"):
        assert_loop_lossy(TWIN, **SMALL)


@pytest.mark.parametrize("overrides, sampling, field", [
    ({"vocab": [9]}, None, "battery.vocab"), ({"depth": 2, "max_new_tokens": 2}, None, "battery.max_new_tokens"),
    ({"tables": ["x.json"], "models": ["prefix-table"]}, None, "battery.tables[0]"),
    ({"seed": [0]}, None, "battery.seed"), ({}, {"top_kk": 2}, "sampling.top_kk")])
def test_the_loop_helpers_refuse_bad_batteries_naming_the_key(overrides, sampling, field):
    with pytest.raises(InvalidParameterError) as err:
        assert_loop_lossless(GOOD, sampling, **overrides)
    assert err.value.field == field


@pytest.mark.slow
def test_the_shipped_loop_config_passes_from_another_directory(tmp_path):
    """``specproof gate --config examples/specproof-loops.toml`` as committed, in a fresh copy of the examples
    run from another folder: exit 0, every instance equal to its committed baseline; by hand 3 checks of one
    instance each and the control's "control flagged"."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    shutil.copytree(ROOT / "examples", project / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    (project / "pyproject.toml").write_text("")
    elsewhere.mkdir()
    exe = shutil.which("specproof")
    cmd = [exe] if exe else [sys.executable, "-m", "specproof.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    junit = tmp_path / "out.xml"
    out = subprocess.run(cmd + ["gate", "--config", str(project / "examples" / "specproof-loops.toml"), "--junit",
                                str(junit), "--jobs", "2"], cwd=elsewhere, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    cases = junit_cases(junit)
    assert len(cases) == 4 and not [c for c in cases if c.find("failure") is not None or c.find("error") is not None]
    assert out.stdout.count("1 equal, 0 moved") == 3 and "no baseline" not in out.stdout, out.stdout
