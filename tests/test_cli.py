"""The command line: law, certify (exit codes 0/1/2, JSON certificate), list, report, user verifiers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from fractions import Fraction as F
from pathlib import Path

import pytest
from click.testing import CliRunner

from specproof.cli import app as cli
from specproof.reports import toy_study as study_report
from simulator.verifiers import VERIFIERS


def run(args, cwd=None, timeout=300):
    exe = shutil.which("specproof")
    cmd = [exe] if exe else [sys.executable, "-m", "specproof.cli"]
    return subprocess.run(cmd + args, capture_output=True, text=True, cwd=cwd, timeout=timeout)


def write_case(tmp_path: Path, **overrides) -> Path:
    case = {"vocab": 2, "parents": [-1, 0], "tokens": [None, 0], "verifier": "tv-sps",
            "p": {"0": ["2/3", "1/3"]}, "q": {"0": ["1/3", "2/3"], "1": ["1/4", "3/4"]}}
    case.update(overrides)
    path = tmp_path / "case.json"
    path.write_text(json.dumps(case))
    return path


def test_law_prints_the_exact_law(tmp_path):
    result = run(["law", "--case", str(write_case(tmp_path))])
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    # SpS accepts token 0 w.p. (1/3)/(2/3) = 1/2, then y ~ q_1 = (1/4, 3/4); else y ~ norm((q−p)_+) = δ_1.
    law = {(tuple(e["path"]), e["y"]): F(e["prob"]) for e in out["law"]}
    assert law == {((0,), 0): F(1, 8), ((0,), 1): F(3, 8), ((), 1): F(1, 2)}
    assert F(out["expected_accepted"]) == F(1, 2)
    floats = json.loads(run(["law", "--case", str(write_case(tmp_path)), "--arithmetic", "float"]).stdout)
    assert floats["expected_accepted"] == pytest.approx(0.5, abs=1e-15)


@pytest.mark.parametrize("overrides,field", [
    ({"p": {"0": ["2/3", "-1/3"]}}, 'p["0"][1]'),
    ({"p": {}}, 'p["0"]'),
    ({"q": {"0": ["1/3", "2/3"]}}, 'q["1"]'),
    ({"parents": [-1, 1]}, "parents[1]"),
    ({"tokens": [None, 7]}, "tokens[1]"),
    ({"verifier": "no-such-rule"}, "verifier"),
    ({"q": {"0": ["1/3", "2/3"], "1": [0.5, 0.6]}}, 'q["1"]'),
])
def test_law_rejects_bad_cases_with_exit_2_naming_the_field(tmp_path, overrides, field):
    result = run(["law", "--case", str(write_case(tmp_path, **overrides))])
    assert result.returncode == 2
    assert field in result.stderr


@pytest.mark.slow
def test_certify_exit_codes_and_json(tmp_path):
    out = tmp_path / "cert.json"
    ok = run(["certify", "--verifier", "bv", "--topology", "chain", "--depth", "2", "--json", str(out)])
    assert ok.returncode == 0, ok.stderr
    cert = json.loads(out.read_text())
    assert cert["lossless"] is True and cert["tvd"] == "0/1" and cert["counterexample"] is None
    bad = run(["certify", "--verifier", "bug-accept-all", "--json", str(out)])
    assert bad.returncode == 1
    cert = json.loads(out.read_text())
    ce = cert["counterexample"]
    assert cert["lossless"] is False and F(cert["tvd"]) > 0
    assert F(ce["verifier_prob"]) != F(ce["target_prob"]) and len(ce["sequence"]) == 3
    assert "counterexample" in bad.stdout
    for args, field in [(["--verifier", "bv", "--rho", "2"], "rho"),
                        (["--verifier", "bv"], "tree"),
                        (["--verifier", "tv-rrs", "--parents", "-1,0,2"], "parents[2]"),
                        (["--verifier", "tv-rrs", "--model", "table"], "table"),
                        (["--verifier", "tv-rrs", "--depth", "-1"], "depth")]:
        result = run(["certify", *args])
        assert result.returncode == 2 and field in result.stderr, (args, result.stderr)


def test_certify_table_model_and_float(tmp_path):
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"vocab": 2, "p": {"*": ["2/3", "1/3"]}, "q": {"*": ["1/3", "2/3"]}}))
    out = tmp_path / "c.json"
    result = run(["certify", "--model", "table", "--table", str(table), "--topology", "chain", "--depth", "2",
                  "--verifier", "bv", "--json", str(out)])
    assert result.returncode == 0 and F(json.loads(out.read_text())["expected_accepted"]) == F(11, 9)
    result = run(["certify", "--model", "random-rational", "--vocab", "3", "--verifier", "tv-rrsw",
                  "--drafting", "without-replacement", "--arithmetic", "float", "--json", str(out)])
    assert result.returncode == 0 and json.loads(out.read_text())["tvd"] < 1e-12


def test_list_names_everything():
    out = run(["list"]).stdout
    for name in [*VERIFIERS, "synthetic", "table", "random-rational", "chain", "multi-chain", "complete",
                 "tapered", "binary", "explicit", "iid", "without-replacement", "almost-greedy", "top-k"]:
        assert f" {name} " in out


@pytest.mark.slow
def test_report_writes_the_certification_table_plots_records_its_command_and_recomputes_nothing(
        tmp_path, monkeypatch):
    out = tmp_path / "r"
    args = ["report", "--out", str(out), "--seeds", "2", "--trials", "30", "--jobs", "1", "--verifiers", "tv-rrs"]
    first = CliRunner().invoke(cli.main, args)
    assert first.exit_code == 0, first.output
    rows = json.loads((out / "certification.json").read_text())
    assert {r["verifier"] for r in rows} == {n for n, spec in VERIFIERS.items() if not spec.lossy_by_design}
    assert all(r["lossless"] == r["expected_lossless"] for r in rows)
    text = (out / "toy_study.md").read_text()
    assert (out / "accept_len_table1.png").stat().st_size > 1000
    assert "![accept_len_table1](accept_len_table1.png)" in text
    assert "Not plotted in this run: accepted length against depth: needs Tables 4, 5, 6" in text
    assert f"`specproof report --out {out} --seeds 2 --trials 30 --verifiers tv-rrs --jobs 1 --cert-vocab 3" in text
    # --no-run now computes nothing it has computed before: every section comes from the store's cache.
    from specproof.cli import sample_commands
    monkeypatch.setattr(sample_commands, "certification_table", _forbidden)
    for name in ("exact_crosscheck", "detection", "paper_scale_detection", "baseline_sizes"):
        monkeypatch.setattr(study_report, name, _forbidden)
    again = CliRunner().invoke(cli.main, [*args, "--no-run"])
    assert again.exit_code == 0, again.output
    assert (out / "certification.md").read_text().startswith("# Certification table")


def _forbidden(*args, **kwargs):
    raise AssertionError("recomputed a report section that the store holds")


@pytest.mark.slow
def test_user_verifier_defined_outside_the_project(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    # a user's module, outside the project: the plugin example's text, which imports nothing of specproof
    (pkg / "mod.py").write_text((Path(__file__).resolve().parents[1] / "examples" / "plugin_verifier.py").read_text())
    good = run(["certify", "--verifier", "mypkg.mod:my_tv", "--topology", "chain", "--depth", "3",
                "--model", "random-rational", "--vocab", "3", "--seed", "4"], cwd=tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    broken = run(["certify", "--verifier", "mypkg.mod:my_tv_root_residual", "--topology", "chain", "--depth", "3",
                  "--model", "random-rational", "--vocab", "3", "--seed", "4"], cwd=tmp_path)
    assert broken.returncode == 1 and "counterexample" in broken.stdout
    case = write_case(tmp_path, verifier="mypkg.mod:my_tv")
    assert run(["law", "--case", str(case)], cwd=tmp_path).returncode == 0
    missing = run(["certify", "--verifier", "mypkg.mod:nothing"], cwd=tmp_path)
    assert missing.returncode == 2 and "verifier" in missing.stderr


@pytest.mark.parametrize("args,code", [
    (["--verifier", "trv", "--drafting", "without-replacement"], 0),
    (["--verifier", "lv-kseq", "--topology", "tapered"], 0),
    (["--verifier", "gbv", "--topology", "multi-chain"], 0),
    (["--verifier", "match", "--drafting", "top-k"], 0),
    (["--verifier", "tv-gr", "--arithmetic", "float"], 0),
    (["--verifier", "bug-gbv-clipped", "--topology", "multi-chain"], 1),
    (["--verifier", "bug-trv-insertion-order", "--parents", "-1,0,0,1", "--drafting", "without-replacement"], 1),
])
@pytest.mark.slow
def test_certify_accepts_the_tree_verifiers_by_name(args, code):
    result = run(["certify", *args])
    assert result.returncode == code, result.stdout + result.stderr


def test_dyspec_printed_needs_float_and_says_so():
    result = run(["certify", "--verifier", "bug-dyspec-printed", "--drafting", "without-replacement"])
    assert result.returncode == 2 and "arithmetic" in result.stderr
    result = run(["certify", "--verifier", "bug-dyspec-printed", "--drafting", "without-replacement",
                  "--parents", "-1,0,0,1,1,2,2", "--arithmetic", "float"])
    assert result.returncode == 1 and "counterexample" in result.stdout


def test_law_runs_traversal_on_the_papers_tree(tmp_path):
    # Traversal Verification (Weng et al., NeurIPS 2025) §3.2 (docs/rules.md): X1 = a is accepted together
    # with X3 = b w.p. 2/3.
    p, q = ["6/10", "3/10", "1/10"], ["3/10", "4/10", "3/10"]
    case = write_case(tmp_path, vocab=3, parents=[-1, 0, 0, 1, 1, 2], tokens=[None, 0, 2, 1, 2, 0],
                      verifier="trv", p={str(v): p for v in range(3)}, q={str(v): q for v in range(6)})
    out = json.loads(run(["law", "--case", str(case)]).stdout)
    assert sum(F(e["prob"]) for e in out["law"] if e["path"] == [0, 1]) == F(2, 3)


@pytest.mark.slow
def test_theorems_prints_and_writes_the_table(tmp_path):
    out = tmp_path / "t.md"
    result = run(["theorems", "--scale", "0.05", "--check", "single-step", "--check", "chains", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "| check | claim |" in text and "OPT = α* exactly" in text and "FAILS" not in text
    assert run(["theorems", "--scale", "0"]).returncode == 2


@pytest.mark.parametrize("args,field", [(["--seeds", "0"], "seeds"), (["--trials", "1"], "trials"),
                                        (["--jobs", "0"], "jobs"), (["--tables", "2"], "tables")])
def test_report_rejects_bad_study_options_naming_the_field(tmp_path, args, field):
    result = run(["report", "--out", str(tmp_path / "r"), *args])
    assert result.returncode == 2 and field in result.stderr, result.stderr
    assert not (tmp_path / "r").exists()  # rejected before any work


@pytest.mark.slow
def test_generate_exact_and_monte_carlo(tmp_path):
    # Sample-and-match on ADED's drafts over at least three rounds: lossless exactly; one draw per row: lossy.
    aded = ["--drafting", "aded", "--candidate-length", "2", "--candidates", "3", "--mcts-iterations", "10",
            "--model", "random-rational", "--vocab", "3", "--tokens", "7", "--exact"]
    good = run(["generate", "--verifier", "match", *aded, "--json", str(tmp_path / "g.json")])
    assert good.returncode == 0 and "LOSSLESS" in good.stdout, good.stderr
    assert F(json.loads((tmp_path / "g.json").read_text())["tvd"]) == 0
    bad = run(["generate", "--verifier", "bug-match-per-row", *aded])
    assert bad.returncode == 1 and "counterexample" in bad.stdout
    mc = run(["generate", "--drafting", "dyspec", "--budget", "3", "--verifier", "tv-rrsw", "--vocab", "4",
              "--tokens", "5", "--seeds", "2", "--trials", "30", "--json", str(tmp_path / "m.json")])
    assert mc.returncode == 0, mc.stderr
    summary = json.loads((tmp_path / "m.json").read_text())
    assert summary["budget"] == 3 and 1 <= summary["rounds_mean"] <= 5 and summary["accepted_per_round"] >= 0


@pytest.mark.parametrize("args,field", [
    (["--drafting", "dyspec", "--verifier", "lv-kseq"], "verifier"),
    (["--drafting", "dyspec", "--budget", "0", "--verifier", "tv-rrsw"], "budget"),
    (["--drafting", "dyspec-threshold", "--threshold", "0", "--verifier", "trv"], "threshold"),
    (["--drafting", "aded", "--candidates", "0", "--verifier", "match"], "candidates"),
    (["--drafting", "iid", "--verifier", "tv-rrs", "--tokens", "0"], "tokens"),
])
def test_generate_rejects_bad_drafter_settings_naming_the_field(args, field):
    result = run(["generate", *args])
    assert result.returncode == 2 and f"error: {field}:" in result.stderr


@pytest.mark.slow
def test_dynamic_writes_its_report(tmp_path):
    result = run(["dynamic", "--out", str(tmp_path), "--instances", "10", "--seeds", "2", "--trials", "5",
                  "--tokens", "3"])
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "dynamic.md").read_text()
    for needle in ("DySpec trees: exact certificates", "ADED drafts over three rounds", "App. D.1",
                   "Accepted tokens per round", "`bug-dyspec-printed`", "`bug-match-per-row`"):
        assert needle in text
    data = json.loads((tmp_path / "dynamic.json").read_text())
    assert data["greedy"]["holds"] and data["greedy"]["instances"] == 50
    # Every lossless pairing certified on every instance; every lossy one flagged with a counterexample.
    for tally in data["dyspec"] + data["aded"]:
        if tally["expected_lossless"]:
            assert tally["lossless"] == tally["instances"] and tally["worst_tvd"] == 0
        else:
            assert tally["lossless"] < tally["instances"] and "sequence" in tally["example"]
