"""The gate's fault battery: every way a config, a baselines file, an output path, a missing torch or a
failing plugin can go wrong ends in the documented exit code (docs/cli/README.md#exit-codes) with the culprit
named and no traceback — and, where the verdict was already computed, the verdict kept.

Each case runs the gate in this process (and in worker processes where ``--jobs 2`` is the point) on a
one-instance battery (SpS at depth 1, vocabulary 2), so the whole file takes a few seconds. The facts asserted are derived apart from the gate: the one instance's ``E[τ]`` from
the closed form ``Σ_x min(p(x), q(x))``, test counts from the battery by hand, "nothing ran" from the state
folder the gate makes before its first certificate. Every fault has a negative control: the same config without
the fault passes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from specproof.cli import app as cli
from simulator.models import RandomRationalModel

TINY = '[battery]\nseeds = [0]\nvocab = [2]\ntopologies = ["chain"]\ndepth = 1\ndrafting = ["iid"]\n\n'
SPS = '[[check]]\nverifier = "tv-sps"\nexpect = "lossless"\n'
CONTROL = '[[check]]\nverifier = "bug-residual-q"\nexpect = "lossy"\n'
LOSSLESS_PLUGIN = ("from simulator.verifiers.registry import load_verifier\n\n_, _sps = load_verifier('tv-sps')\n\n\n"
                   "def rule(tree, p, q, rng):\n    return _sps(tree, p, q, rng)\n")
RAISING_PLUGIN = "def rule(tree, p, q, rng):\n    raise RuntimeError('boom on purpose')\n"


def write(folder: Path, gate: str = "", checks: str = SPS, battery: str = TINY) -> Path:
    """A config in ``folder`` (its state in ``folder/state``, no hunt unless ``gate`` sets one)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "specproof.toml"
    hunt = "" if "hunt_seconds" in gate else "hunt_seconds = 0\n"
    path.write_text(f'[gate]\nstate = "state"\n{hunt}{gate}\n{battery}{checks}')
    return path


def gate(*args, env: dict | None = None):
    return CliRunner().invoke(cli.main, ["gate", *map(str, args)], env=env)


def refused(out, field: str, *named: str) -> None:
    """Exit 2 with ``error: FIELD`` and every string of ``named`` on standard error, and no traceback."""
    assert out.exit_code == 2, (out.exit_code, out.output)
    assert f"error: {field}" in out.stderr, out.stderr
    assert all(n in out.stderr for n in named), (named, out.stderr)
    assert "Traceback" not in out.output and "internal error" not in out.stderr


def nothing_ran(config: Path) -> bool:
    return not (config.parent / "state").exists()


def module(folder: Path, text: str) -> str:
    """A module written into ``folder`` under a name no other test imported; its name."""
    name = f"gate_fault_{uuid.uuid4().hex[:12]}"
    (folder / f"{name}.py").write_text(text)
    return name


def sps_acceptance() -> str:
    """E[τ] of SpS at depth 1 on the battery's one pair: a draft is accepted with probability Σ min(p, q)."""
    model = RandomRationalModel(2, 0)
    value = sum(min(a, b) for a, b in zip(model.p(()), model.q(())))
    return f"{value.numerator}/{value.denominator}"


def test_an_unreadable_or_invalid_config_is_refused_naming_the_field(tmp_path):
    good = write(tmp_path / "good")
    assert gate("--config", good).exit_code == 0  # the negative control
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    refused(gate("--config", binary), "config", str(binary), "not UTF-8")
    nested = tmp_path / "nested.toml"
    nested.write_text("a = " + "[" * 50_000 + "]" * 50_000 + "\n")
    refused(gate("--config", nested), "config", "too deeply")
    folder = gate("--config", tmp_path)
    assert folder.exit_code == 2 and "is a directory" in folder.stderr and "Traceback" not in folder.output
    cases = {
        ("tolerance = nan", "config.gate.tolerance"), ("tolerance = inf", "config.gate.tolerance"),
        ("hunt_seconds = inf", "config.gate.hunt_seconds"), ("shrink_seconds = -nan", "config.gate.shrink_seconds"),
        ("baselines = 3", "config.gate.baselines"), ('pythonpath = "src"', "config.gate.pythonpath"),
        ('pythonpath = ["no-such-folder"]', "config.gate.pythonpath[0]"),
    }
    for i, (line, field) in enumerate(sorted(cases)):
        config = write(tmp_path / str(i), gate=line)
        refused(gate("--config", config), field)
        assert nothing_ran(config)
    config = write(tmp_path / "rho", battery=TINY.replace("[battery]\n", "[battery]\nrho = nan\n"))
    refused(gate("--config", config), "config.battery.rho")


def test_a_bad_baselines_file_is_refused_before_anything_runs(tmp_path):
    key = "random-rational seed=0 V=2 chain iid depth=1 branching=2 zero_prob=0.25 fraction"
    good = write(tmp_path / "good")
    (good.parent / "specproof-baselines.json").write_text(json.dumps({"tv-sps": {key: sps_acceptance()}}))
    out = gate("--config", good)
    assert out.exit_code == 0 and "1 equal, 0 moved" in out.stdout, out.output  # the negative control
    cases = [({"tv-sps": {key: "1/0"}}, "'1/0'"), ({"tv-sps": {key: [1, 2]}}, "[1, 2]"),
             ({"tv-sps": {key: True}}, "True"), ({"tv-sps": {key: "nan"}}, "'nan'"),
             ({"tv-sps": {key: None}}, "None"), ({"tv-sps": [key]}, "'tv-sps'"), ([1, 2], "list")]
    for i, (data, named) in enumerate(cases):
        config = write(tmp_path / str(i))
        path = config.parent / "specproof-baselines.json"
        path.write_text(json.dumps(data))
        refused(gate("--config", config), "config.gate.baselines", str(path), named)
        assert nothing_ran(config)
    for i, raw in enumerate([b"\x00\xff\xfe binary", b"[" * 50_000 + b"]" * 50_000]):
        config = write(tmp_path / f"raw{i}")
        (config.parent / "specproof-baselines.json").write_bytes(raw)
        refused(gate("--config", config), "config.gate.baselines", "specproof-baselines.json")


def test_a_state_path_that_is_a_file_is_refused_before_anything_runs(tmp_path):
    for i, state in enumerate(["taken", "taken/below"]):
        config = write(tmp_path / str(i))
        config.write_text(config.read_text().replace('state = "state"', f'state = "{state}"'))
        (config.parent / "taken").write_text("a file")
        refused(gate("--config", config), "config.gate.state", "taken")
        assert (config.parent / "taken").read_text() == "a file"


def test_an_output_that_cannot_be_written_is_refused_before_anything_runs(tmp_path):
    config = write(tmp_path / "cfg")
    missing = tmp_path / "no-such-folder" / "out.xml"
    refused(gate("--config", config, "--junit", missing), "junit", str(missing.parent))
    refused(gate("--config", config, "--summary", missing), "summary", str(missing.parent))
    refused(gate("--config", config, "--junit", config / "out.xml"), "junit", str(config))  # below a file
    refused(gate("--config", config, env={"GITHUB_STEP_SUMMARY": str(missing)}), "summary ($GITHUB_STEP_SUMMARY)")
    baselines = write(tmp_path / "b", gate='baselines = "no-such-folder/b.json"')
    refused(gate("--config", baselines, "--update-baselines"), "config.gate.baselines", "no-such-folder")
    assert nothing_ran(config) and nothing_ran(baselines)
    # the negative control: the same outputs in a folder that exists
    out = gate("--config", config, "--junit", tmp_path / "out.xml", "--summary", tmp_path / "sum.md")
    assert out.exit_code == 0 and (tmp_path / "out.xml").exists() and (tmp_path / "sum.md").exists()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="a read-only folder binds no one as root")
def test_a_read_only_output_folder_is_refused(tmp_path):
    config, folder = write(tmp_path / "cfg"), tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        refused(gate("--config", config, "--junit", folder / "out.xml"), "junit", "not writable")
    finally:
        folder.chmod(0o700)
    assert nothing_ran(config)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (every write: no space left)")
def test_a_write_that_fails_after_the_verdict_keeps_the_verdict(tmp_path):
    out = gate("--config", write(tmp_path / "holds"), "--junit", "/dev/full")
    assert out.exit_code == 0 and "| tv-sps | lossless | 1 | 0 |" in out.stdout and "holds" in out.stdout
    assert "error: junit: cannot write /dev/full: No space left on device" in out.stderr
    regressed = write(tmp_path / "regressed", checks=CONTROL.replace("lossy", "lossless"))
    out = gate("--config", regressed, "--summary", "/dev/full", "--junit", tmp_path / "out.xml")
    assert out.exit_code == 1 and "REGRESSION" in out.stdout
    assert "error: summary: cannot write /dev/full" in out.stderr and "Traceback" not in out.output
    assert ET.parse(tmp_path / "out.xml").getroot().find("testsuite").get("failures") == "1"  # the other output


def test_kernel_checks_without_torch_are_refused_together_before_anything_runs(tmp_path, monkeypatch):
    kernels = ('[[check]]\nname = "k1"\nkernel = "mypkg.kernels:one"\nadapter = "chain"\nexpect = "lossless"\n\n'
               '[[check]]\nkernel = "mypkg.kernels:two"\nadapter = "chain"\nexpect = "lossy"\n')
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, package=None: None if name == "torch" else find_spec(name, package))
    config = write(tmp_path / "kernels", checks=SPS + "\n" + kernels)
    refused(gate("--config", config), "config.check[1].kernel", "config.check[1] ('k1')",
            "config.check[2] ('mypkg.kernels:two')", "pip install -e '.[torch]'")
    assert nothing_ran(config) and "mypkg" not in sys.modules
    assert gate("--config", write(tmp_path / "rules")).exit_code == 0  # the negative control: no kernel, no torch


def test_a_hunt_that_certifies_no_pair_is_no_verdict(tmp_path):
    config = write(tmp_path / "none", gate="hunt_seconds = 1e-9", checks=SPS + "\n" + CONTROL)
    junit = tmp_path / "out.xml"
    out = gate("--config", config, "--junit", junit)
    refused(out, "check 'tv-sps': hunt: config.gate.hunt_seconds", "no model pair")
    assert "| tv-sps | lossless | 1 | 0 | no baseline | ERROR |" in out.stdout, out.stdout  # not "holds"
    hunt = [c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") == "hunt"]
    assert len(hunt) == 1 and hunt[0].find("error") is not None
    assert len(list((config.parent / "state").rglob("*.json"))) == 2  # the two instances kept, the empty hunt not
    out = gate("--config", write(tmp_path / "some", gate="hunt_seconds = 0.5"))  # the negative control
    assert out.exit_code == 0 and "| holds |" in out.stdout and "none in 0 pairs" not in out.stdout


def test_a_check_that_errs_is_reported_while_every_other_check_runs(tmp_path):
    folder = tmp_path / "cfg"
    folder.mkdir()
    raising = module(folder, RAISING_PLUGIN)
    faulty = f'[[check]]\nname = "faulty"\nverifier = "{raising}:rule"\nexpect = "lossless"\n'
    junit = tmp_path / "out.xml"
    config = write(folder, gate="hunt_seconds = 0.2", checks="\n".join([SPS, faulty, CONTROL]))
    for jobs in (1, 2):  # in worker processes too, which find the plugin beside the config
        out = gate("--config", config, "--junit", junit, "--jobs", jobs, "--fresh")
        assert out.exit_code == 2, out.output
        rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "expected" not in line]
        assert len(rows) == 3 and rows[0].endswith("| holds |") and rows[2].endswith("| holds |"), rows
        assert "ERROR:" in rows[1] and "RuntimeError: boom on purpose" in rows[1]
        assert "error: check 'faulty'" in out.stderr and f"{raising}.py:2" in out.stderr
        assert "Traceback" not in out.output
        suite = ET.parse(junit).getroot().find("testsuite")
        # by hand: tv-sps 1 instance + its hunt, faulty 1 instance (in error; no hunt), the control 1 + flagged
        assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "0", "1")
    # an error beside a regression: the regression's exit code, the error still listed
    regressed = CONTROL.replace('"lossy"', '"lossless"')
    out = gate("--config", write(folder, checks="\n".join([faulty, regressed])))
    assert out.exit_code == 1 and "REGRESSION" in out.stdout and "error: check 'faulty'" in out.stderr
    # the negative control: without the faulty check, the rest holds
    assert gate("--config", write(folder, checks="\n".join([SPS, CONTROL]))).exit_code == 0


def test_a_plugin_that_fails_to_import_is_refused_naming_its_check(tmp_path):
    folder = tmp_path / "cfg"
    folder.mkdir()
    for text, named in [("raise RuntimeError('import-time failure')\n", "import-time failure"),
                        ("import sys\nsys.exit(0)\n", "SystemExit(0)")]:
        name = module(folder, text)
        config = write(folder, checks=SPS + f'\n[[check]]\nverifier = "{name}:rule"\nexpect = "lossless"\n')
        refused(gate("--config", config), "config.check[1].verifier", name, named, f"{name}.py:")
        assert nothing_ran(config)


def test_module_names_resolve_in_the_configs_project_from_any_directory(tmp_path, monkeypatch):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "gates").mkdir(parents=True)
    (project / "src").mkdir()
    elsewhere.mkdir()
    (project / "pyproject.toml").write_text("")
    at_root, in_src = module(project, LOSSLESS_PLUGIN), module(project / "src", LOSSLESS_PLUGIN)
    monkeypatch.chdir(elsewhere)
    path = list(sys.path)
    checks = f'[[check]]\nverifier = "{at_root}:rule"\nexpect = "lossless"\n'
    out = gate("--config", write(project / "gates", checks=checks))
    assert out.exit_code == 0 and "| holds |" in out.stdout, out.output  # found at the project's root
    src = f'[[check]]\nverifier = "{in_src}:rule"\nexpect = "lossless"\n'
    refused(gate("--config", write(project / "gates", checks=src)), "config.check[0].verifier", in_src)
    out = gate("--config", write(project / "gates", gate='pythonpath = ["../src"]', checks=src))
    assert out.exit_code == 0 and "| holds |" in out.stdout, out.output  # found through pythonpath
    assert sys.path == path  # the search path is the config's while it loads and runs, then restored
