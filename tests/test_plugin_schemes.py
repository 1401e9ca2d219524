"""Plugins declare the drafting schemes they claim, one way for every command (docs/plugins.md, "Declaring the
drafting schemes"): ``--schemes`` or a gate check's ``schemes`` over the function's ``schemes`` attribute over
``iid``, resolved in exact/subject.py. ``prove`` and the gate take exactly the claimed schemes; ``certify`` and
``hunt`` default to them and label a run under another a control run.

The subject is tests/plugins/rrs_wor.py: RRS without replacement as a plugin (lossless under without-replacement
drafting, undefined under i.i.d.), declaring ``schemes = ("without-replacement",)``, and its twin that keeps a
rejected token in the draft row (lossy under without-replacement drafting from two children on, RRS with
replacement under i.i.d.).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from exact.subject import check_schemes, subject
from simulator.errors import InvalidParameterError
from specproof.cli import app as cli
from tests.plugins import rrs_wor

GOOD, TWIN = "tests.plugins.rrs_wor:rrs_wor", "tests.plugins.rrs_wor:rrs_wor_kept"
WOR = ("without-replacement",)
ONE_LEVEL = ["--topology", "complete", "--depth", "1", "--vocab", "3"]


def invoke(args: list[str]):
    return CliRunner().invoke(cli.main, args, catch_exceptions=False)


def test_the_claim_is_resolved_once_by_precedence():
    assert subject(GOOD).schemes == WOR  # the attribute
    assert subject(GOOD, schemes=["iid", "top-k"]).schemes == ("iid", "top-k")  # the command line or config over it
    assert subject({"verifier": GOOD, "schemes": ["iid"]}).schemes == ("iid",)
    assert subject("examples.plugin_verifier:my_tv").schemes == ("iid",)  # no attribute: iid
    assert subject("tv-rrsw").schemes == ("without-replacement", "dyspec", "dyspec-threshold")  # the registry's
    assert subject(GOOD).control_run("iid") and not subject(GOOD).control_run("without-replacement")
    assert not subject("bug-residual-q").control_run("top-k")  # a control claims nothing
    for bad, field in (("nosuch", "schemes"), ("iid", "schemes"), ([], "schemes")):
        with pytest.raises(InvalidParameterError) as err:
            check_schemes(bad if bad != "nosuch" else [bad], field)
        assert err.value.field == field


def test_a_bad_declaration_is_refused_naming_it(monkeypatch):
    monkeypatch.setattr(rrs_wor.rrs_wor, "schemes", ("without-replacment",))  # misspelt
    with pytest.raises(InvalidParameterError) as err:
        subject(GOOD)
    assert err.value.field == f"{GOOD}.schemes" and "without-replacment" in err.value.message
    result = invoke(["certify", "--verifier", "tv-sps", "--schemes", "iid,nosuch"])
    assert result.exit_code == 2 and "error: schemes: unknown drafting scheme 'nosuch'" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("branching, declared", [(2, ["--schemes", "without-replacement"]), (3, [])])
def test_prove_proves_the_plugin_under_its_claimed_scheme(branching, declared):
    """About 12 s each on 2 cores: the whole round's cells (the plugin is no lift)."""
    result = invoke(["prove", "--verifier", GOOD, "--branching", str(branching), *ONE_LEVEL, *declared,
                     "--drafting", "without-replacement"])
    assert result.exit_code == 0, result.output
    assert f"PROVED: {GOOD} on the complete tree" in result.output and "without-replacement drafting" in result.output


@pytest.mark.parametrize("branching", [2, 3])
def test_prove_refutes_the_twin_with_a_witness(branching, tmp_path):
    case = tmp_path / "case.json"
    result = invoke(["prove", "--verifier", TWIN, "--branching", str(branching), *ONE_LEVEL,
                     "--case-out", str(case)])  # the scheme from the declaration
    assert result.exit_code == 1 and f"REFUTED: {TWIN}" in result.output, result.output
    assert "without-replacement drafting" in result.output
    again = invoke(["certify", "--case", str(case)])
    assert again.exit_code == 1 and "LOSSY" in again.output  # the witness, certified independently
    assert invoke(["certify", "--case", str(case), "--verifier", GOOD]).exit_code == 0  # the fix, same case


def test_prove_takes_exactly_the_claimed_schemes():
    result = invoke(["prove", "--verifier", GOOD, "--branching", "2", *ONE_LEVEL, "--drafting", "iid"])
    assert result.exit_code == 2 and "error: drafting: " in result.output and "claims losslessness under " \
        "['without-replacement'], not 'iid'" in result.output, result.output
    # the control: declared on the command line, iid is taken (and the twin, RRS with replacement there, proved)
    assert invoke(["prove", "--verifier", TWIN, "--topology", "chain", "--depth", "1", "--vocab", "2",
                   "--schemes", "iid", "--drafting", "iid"]).exit_code == 0


def test_certify_defaults_to_the_claim_and_labels_a_control_run(tmp_path):
    out = tmp_path / "c.json"
    claimed = invoke(["certify", "--verifier", TWIN, "--branching", "2", *ONE_LEVEL, "--seeds", "10",
                      "--json", str(out)])
    assert claimed.exit_code == 1 and "drafting without-replacement" in claimed.output, claimed.output
    assert "control run" not in claimed.output
    data = json.loads(out.read_text())
    assert (data["claimed_schemes"], data["control_run"]) == (list(WOR), False)
    control = invoke(["certify", "--verifier", TWIN, "--branching", "2", *ONE_LEVEL, "--seeds", "10",
                      "--drafting", "iid", "--json", str(out)])
    assert control.exit_code == 0 and "control run: " in control.output and "not iid" in control.output
    assert json.loads(out.read_text())["control_run"] is True
    declared = invoke(["certify", "--verifier", TWIN, "--branching", "2", *ONE_LEVEL, "--schemes", "iid",
                       "--json", str(out)])  # the negative control: claimed on the command line, no control run
    assert declared.exit_code == 0 and "control run" not in declared.output and "drafting iid" in declared.output
    assert json.loads(out.read_text())["control_run"] is False


@pytest.mark.slow
def test_hunt_searches_the_claim_and_labels_a_control_run(tmp_path):
    out, case = tmp_path / "h.json", tmp_path / "case.json"
    found = invoke(["hunt", "--verifier", TWIN, "--time-limit", "20", "--shrink-time", "1", "--json", str(out),
                    "--case-out", str(case)])
    assert found.exit_code == 1 and "LOSSY" in found.output, found.output
    data = json.loads(out.read_text())
    assert set(data["covered"]["drafting"]) == set(WOR) and data["control_run"] is False
    control = invoke(["hunt", "--verifier", TWIN, "--drafting", "iid", "--vocab", "2", "--time-limit", "1",
                      "--json", str(out), "--case-out", str(case)])
    assert control.exit_code == 0 and "control run: " in control.output, control.output
    assert json.loads(out.read_text())["control_run"] is True


def _gate(tmp_path, verifier: str, drafting: str) -> tuple[int, str]:
    config = tmp_path / "specproof.toml"
    config.write_text(f'[gate]\nstate = "state"\nhunt_seconds = 0\n\n[battery]\nmodels = ["synthetic"]\n'
                      f'seeds = [0, 1, 2, 3]\nvocab = [3]\ntopologies = ["complete"]\ndepth = 1\n'
                      f'drafting = {drafting}\n\n[[check]]\nverifier = "{verifier}"\nexpect = "lossless"\n')
    result = invoke(["gate", "--config", str(config), "--fresh"])
    return result.exit_code, result.output


def test_the_gate_reads_the_declaration_and_holds_a_claim_to_it(tmp_path):
    assert _gate(tmp_path, GOOD, "[]")[0] == 0  # its battery under without-replacement drafting, as declared
    code, output = _gate(tmp_path, TWIN, "[]")
    assert code == 1 and "without-replacement" in output, output  # the twin's loss shows there
    code, output = _gate(tmp_path, GOOD, '["iid"]')
    assert code == 2 and "battery.drafting" in output and "not 'iid'" in output, output


def test_mc_and_a_case_read_the_same_declaration(tmp_path):
    out, case = tmp_path / "m.json", tmp_path / "case.json"
    control = invoke(["mc", "--verifier", TWIN, *ONE_LEVEL, "--seeds", "1", "--trials", "200", "--drafting", "iid",
                      "--json", str(out)])
    assert "control run: " in control.output and json.loads(out.read_text())["control_run"] is True
    claimed = invoke(["mc", "--verifier", GOOD, *ONE_LEVEL, "--seeds", "1", "--trials", "200", "--json", str(out)])
    assert "drafting without-replacement" in claimed.output and "control run" not in claimed.output
    assert invoke(["prove", "--verifier", TWIN, "--branching", "2", *ONE_LEVEL, "--case-out", str(case)]).exit_code == 1
    assert "control run" not in invoke(["certify", "--case", str(case), "--verifier", GOOD]).output
    relabelled = invoke(["certify", "--case", str(case), "--verifier", GOOD, "--schemes", "iid"])
    assert "control run: " in relabelled.output and "not without-replacement" in relabelled.output
