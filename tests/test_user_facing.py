"""What a new user meets first: exit codes a CI can trust, readable output, refused input, verdicts that say
what they cover, and documentation inside the repository."""

from __future__ import annotations

import json
import re
import textwrap
from fractions import Fraction as F
from pathlib import Path

import pytest
from click.testing import CliRunner

from specproof.reports.certification import TableRow
from specproof.cli import app as cli
from simulator.errors import InvalidParameterError, InvalidTreeError, RandomnessError, StoreError
from simulator.case import parse_case
from specproof.reports.dynamic import Tally
from simulator.models import RandomRationalModel
from simulator.numeric import human_number
from simulator.randomness import check_bernoulli
from specproof.study import Cell, Store
from simulator.verifiers import VERIFIERS

from test_cli import run, write_case

REPO = Path(__file__).resolve().parents[1]

RAISING = '''
def broken(tree, p, q, rng):
    v = tree.children(0)[0]
    return v, {}[tree.tokens[v]]
'''


# ---- start-up ------------------------------------------------------------------------------------------------
HEAVY = ("scipy.stats", "scipy.optimize", "scipy.special", "sympy", "networkx", "torch", "matplotlib", "dask")


def test_the_command_line_starts_without_the_heavy_libraries():
    # Every command pays for what the CLI imports at start (scipy.stats, scipy.optimize and sympy took 3 of its
    # 4.7 s before they moved into the functions that use them); `specproof certify` needs none of them.
    import subprocess
    import sys
    code = ("import sys; import specproof.cli.app; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert loaded.stdout.strip() == ""


# ---- exit codes --------------------------------------------------------------------------------------------
def test_a_verifier_that_raises_exits_2_with_type_message_and_source_line(tmp_path):
    (tmp_path / "plug.py").write_text(RAISING)
    result = run(["certify", "--verifier", "plug:broken", "--topology", "chain", "--depth", "1"], cwd=tmp_path)
    assert result.returncode == 2  # never 1, the code of LOSSY
    assert "KeyError" in result.stderr and "plug:broken" in result.stderr
    assert "plug.py:4" in result.stderr and "return v, {}[tree.tokens[v]]" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_internal_error_exits_3_not_1(monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("a bug of our own")

    from specproof.cli import certify_commands
    monkeypatch.setattr(certify_commands, "certify_pairs", explode)
    result = CliRunner().invoke(cli.main, ["certify", "--verifier", "tv-sps", "--depth", "1"])
    assert result.exit_code == 3 and "internal error" in result.output and "a bug of our own" in result.output


@pytest.mark.slow
def test_mc_exits_1_when_its_test_rejects_and_2_when_it_has_no_power(tmp_path):
    base = ["mc", "--topology", "chain", "--depth", "1", "--seeds", "2", "--trials", "4000"]
    assert run([*base, "--verifier", "tv-sps"]).returncode == 0
    rejects = run([*base, "--verifier", "bug-accept-all"])
    assert rejects.returncode == 1 and "REJECTS" in rejects.stdout
    powerless = run(["mc", "--verifier", "tv-rrs", "--trials", "10"])
    assert powerless.returncode == 2 and "error: trials:" in powerless.stderr and "no power" in powerless.stderr
    assert "inf" not in powerless.stdout


def _row(lossless: bool, expected: bool) -> TableRow:
    cert = type("Cert", (), {"lossless": lossless})()
    return TableRow("x", "tree", "iid", expected, cert)  # type: ignore[arg-type]


def test_a_lossless_instance_of_a_control_is_not_a_contradiction():
    assert _row(lossless=True, expected=False).as_expected  # not shown here
    assert "not shown" in _row(lossless=True, expected=False).verdict
    assert not _row(lossless=False, expected=True).as_expected  # a lossless rule found lossy
    assert _row(lossless=False, expected=False).as_expected and _row(lossless=True, expected=True).as_expected


def test_dynamic_does_not_fail_a_control_it_did_not_show_on_its_instances():
    # `specproof dynamic --instances 1` used to exit 1 because tv-rrs happened to be lossless on its one instance.
    unshown = Tally("dyspec (Alg. 1)", "tv-rrs", expected_lossless=False, instances=1, lossless=1)
    assert unshown.as_expected and unshown.verdict == "not shown on these instances"
    shown = Tally("dyspec (Alg. 1)", "tv-rrs", expected_lossless=False, instances=3, lossless=2)
    assert shown.as_expected and shown.verdict == "as expected"
    contradiction = Tally("dyspec (Alg. 1)", "trv", expected_lossless=True, instances=3, lossless=2)
    assert not contradiction.as_expected and "UNEXPECTED" in contradiction.verdict


# ---- readable output ---------------------------------------------------------------------------------------
LONG_NUMBER = re.compile(r"\d{25,}")


@pytest.mark.parametrize("args", [
    ["certify", "--verifier", "tv-rrs", "--drafting", "without-replacement"],
    ["generate", "--verifier", "bug-accept-all", "--tokens", "4", "--exact"],
])
def test_printed_numbers_are_decimals_and_the_json_stays_exact(tmp_path, args):
    out = tmp_path / "out.json"
    result = run([*args, "--json", str(out)])
    assert result.returncode == 1, result.stderr
    assert not LONG_NUMBER.search(result.stdout), result.stdout
    assert "exactly a fraction of" in result.stdout
    tvd = F(json.loads(out.read_text())["tvd"])
    assert len(str(tvd.denominator)) > 25  # the exact value, kept in the JSON


def test_human_numbers_show_short_fractions_and_the_size_of_long_ones():
    assert human_number(F(11, 9)) == "11/9 (1.22222)"
    assert human_number(F(1, 10**400)) == "1e-400, exactly a fraction of 1/401 digits"
    assert human_number(F(3**200, 7**230)).startswith("1.12642e-99, exactly a fraction of 96/195 digits")


def test_a_tiny_row_entry_gets_a_short_message_naming_the_field(tmp_path):
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"vocab": 2, "p": {"*": ["1e-400", "1"]}, "q": {"*": ["1/3", "2/3"]}}))
    result = run(["certify", "--verifier", "bv", "--topology", "chain", "--depth", "1", "--model", "table",
                  "--table", str(table)])
    assert result.returncode == 2
    assert 'table.p["*"]' in result.stderr and "1 + 1e-400" in result.stderr and len(result.stderr) < 200


def test_one_seed_gives_no_standard_error_and_says_why(tmp_path):
    out = tmp_path / "g.json"
    result = run(["generate", "--verifier", "tv-rrs", "--seeds", "1", "--trials", "20", "--json", str(out)])
    assert result.returncode == 0, result.stderr
    assert "nan" not in result.stdout.lower() and "no SE" in result.stdout
    text = out.read_text()
    assert "NaN" not in text
    data = json.loads(text)
    assert data["accepted_per_round_se"] is None and "two" in data["se_note"]


# ---- input accepted that should not be ---------------------------------------------------------------------
def _case(**overrides) -> dict:
    case = {"vocab": 2, "parents": [-1, 0, 0], "tokens": [None, 0, 1], "verifier": "tv-rrs",
            "p": {"0": ["1", "0"]}, "q": {"0": ["1/2", "1/2"], "1": ["1/2", "1/2"], "2": ["1/2", "1/2"]}}
    case.update(overrides)
    return case


def test_a_case_drafting_a_zero_probability_token_is_refused_naming_node_and_token():
    with pytest.raises(InvalidTreeError) as err:
        parse_case(_case(), "fraction")
    assert err.value.field == "tokens[2]" and "token 1" in err.value.message and 'p["0"]' in err.value.message
    parse_case(_case(draft="deterministic", verifier="match"), "fraction")  # point masses: a documented meaning
    with pytest.raises(InvalidParameterError):
        parse_case(_case(draft="sometimes"), "fraction")


@pytest.mark.parametrize("verifier,parents", [("gbv", [-1, 0, 0]), ("tv-opt", [-1, 0, 0]), ("lv-gr", [-1, 0, 0])])
def test_flow_rules_and_gbv_refuse_a_zero_probability_token_with_a_typed_error(tmp_path, verifier, parents):
    case = write_case(tmp_path, **_case(verifier=verifier, parents=parents, draft="deterministic"))
    result = run(["law", "--case", str(case)])
    assert result.returncode == 2 and "error: tokens" in result.stderr and "zero draft probability" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_real_with_an_empty_model_directory_names_the_directory(tmp_path):
    pytest.importorskip("transformers")
    (tmp_path / "empty").mkdir()
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question_id": 1, "turns": ["Hello"]}\n')
    result = run(["real", "--draft", str(tmp_path / "empty"), "--target", str(tmp_path / "empty"), "--questions",
                  str(questions), "--answers", str(tmp_path / "a.jsonl"), "--verifier", "tv-rrs"])
    assert result.returncode == 2 and f"{tmp_path / 'empty'} holds no config.json" in result.stderr
    assert "Traceback" not in result.stderr


CELL = {"verifier": "tv-sps", "topology": "chain", "vocab": 3, "depth": 1, "branching": 1, "rho": 0.5, "tau_p": 1.0,
        "tau_q": 1.0, "seeds": 0, "trials": 100}


@pytest.mark.parametrize("content,words", [("{not json", "unreadable"),
                                           (json.dumps({"cell": CELL, "seed": 0}), "incomplete")])
def test_a_damaged_store_record_names_the_file_and_how_to_recover(tmp_path, content, words):
    cell = Cell("tv-sps", "chain", 3, 1, 1, 0.5, 1.0, 1.0, 1, 100)
    store = Store(tmp_path)
    store.file(cell).write_text(content + "\n")
    with pytest.raises(StoreError) as err:
        store.load(cell, 0)
    assert f"{store.file(cell)}:1" in err.value.message and words in err.value.message
    assert "delete that line" in err.value.message


def test_a_float_only_rule_under_fractions_says_to_pass_arithmetic_float():
    result = run(["certify", "--verifier", "bug-dyspec-printed", "--drafting", "without-replacement"])
    assert result.returncode == 2 and "--arithmetic float" in result.stderr


@pytest.mark.slow
def test_mc_and_generate_honour_seed(tmp_path):
    outs = {}
    for command in ("mc", "generate"):
        for seed in (0, 3):
            out = tmp_path / f"{command}{seed}.json"
            result = run([command, "--verifier", "tv-rrs", "--seed", str(seed), "--seeds", "1", "--trials", "400",
                          "--json", str(out)])
            assert result.returncode in (0, 1), result.stderr
            outs[command, seed] = json.loads(out.read_text())
        assert outs[command, 3]["per_seed"][0]["seed"] == 3 and outs[command, 0]["per_seed"][0]["seed"] == 0
        assert outs[command, 3]["per_seed"][0] != {**outs[command, 0]["per_seed"][0], "seed": 3}


@pytest.mark.slow
def test_report_names_its_certification_seed_apart_from_the_study_seeds():
    assert run(["report", "--seed", "1"]).returncode == 2  # gone: it read like --seeds
    help_text = run(["report", "--help"]).stdout
    assert "--cert-seed" in help_text and "--seeds" in help_text


# ---- verdicts a user can rely on ---------------------------------------------------------------------------
RARE_BUG = '''
from simulator.verifiers import VERIFIERS


def rare(tree, p, q, rng):
    """TV-SpS, but drawing the correction from q (bug-residual-q) when the root's draft row is (1/2, 1/2)."""
    return VERIFIERS["bug-residual-q" if p[0][0] * 2 == 1 else "tv-sps"].fn(tree, p, q, rng)
'''


def test_certify_seeds_certifies_several_pairs_and_stops_at_the_first_lossy_one(tmp_path):
    (tmp_path / "rare.py").write_text(textwrap.dedent(RARE_BUG))
    base = ["certify", "--verifier", "rare:rare", "--topology", "chain", "--depth", "1", "--model", "random-rational",
            "--vocab", "2", "--zero-prob", "0"]
    # By hand: on a chain of depth 1 the bug changes the law exactly when the root's draft row is (1/2, 1/2) and
    # the target's differs from it (otherwise nothing is ever rejected).
    lossy = [s for s in range(60) if _root_half_and_differs(s)]
    assert lossy and lossy[0] > 0  # the bug hides from seed 0
    one = run([*base, "--seed", "0", "--json", str(tmp_path / "one.json")], cwd=tmp_path)
    assert one.returncode == 0 and "not on every pair" in one.stdout, one.stderr
    assert json.loads((tmp_path / "one.json").read_text())["coverage"]["model_seeds"] == [0]
    many = run([*base, "--seed", "0", "--seeds", str(lossy[0] + 5), "--json", str(tmp_path / "many.json")],
               cwd=tmp_path)
    assert many.returncode == 1, many.stdout + many.stderr
    coverage = json.loads((tmp_path / "many.json").read_text())["coverage"]
    assert coverage["first_lossy_seed"] == lossy[0] and coverage["model_seeds"] == list(range(lossy[0] + 1))
    assert coverage["lossless_pairs"] == lossy[0] and f"lossy on model seed {lossy[0]}" in many.stdout
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"vocab": 2, "p": {"*": ["1/2", "1/2"]}, "q": {"*": ["1/2", "1/2"]}}))
    refused = run(["certify", "--verifier", "tv-sps", "--model", "table", "--table", str(table), "--seeds", "2"])
    assert refused.returncode == 2 and "error: seeds:" in refused.stderr


def _root_half_and_differs(seed: int) -> bool:
    model = RandomRationalModel(2, seed, zero_prob=0)
    return model.p(())[0] == F(1, 2) and model.q(()) != model.p(())


def test_list_names_where_each_control_is_lossy():
    lines = {line.split()[1]: line for line in run(["list"]).stdout.splitlines() if line.startswith("verifier")}
    for spec in VERIFIERS.values():
        if spec.is_control:
            assert "lossy on:" in lines[spec.name] and spec.lossy_on in lines[spec.name]
    assert "chains, multi-chains, complete and tapered" in lines["bug-trv-insertion-order"]


def test_a_float_bernoulli_within_1e_12_of_the_interval_is_its_end_point(tmp_path):
    assert check_bernoulli(1.0000000000000002) == 1.0 and check_bernoulli(-1e-13) == 0.0
    with pytest.raises(RandomnessError):
        check_bernoulli(1 + 1e-9)
    with pytest.raises(RandomnessError):
        check_bernoulli(F(1) + F(1, 10**20))  # exact parameters get no slack
    (tmp_path / "sums.py").write_text(textwrap.dedent('''
        def sps(tree, p, q, rng):
            x = tree.tokens[1]
            a = min(1.0, q[0][x] / p[0][x]) if p[0][x] > 0 else 1.0
            if rng.bernoulli(a * ((0.1 * 3) / 0.3)):  # a rescaling that rounds to 1.0000000000000002 when a == 1
                return 1, rng.categorical(q[1])
            return 0, rng.categorical([max(s - t, 0.0) for s, t in zip(q[0], p[0])])
    '''))
    result = run(["certify", "--verifier", "sums:sps", "--topology", "chain", "--depth", "1", "--arithmetic", "float",
                  "--model", "table", "--table", str(REPO / "examples" / "block_example.json")], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- documentation inside the repository -------------------------------------------------------------------
def test_the_docs_live_in_the_repository_and_every_link_resolves():
    readme = (REPO / "README.md").read_text()
    assert "../shared" not in readme and "SPEC.md" not in readme
    assert "../shared" not in run(["list"]).stdout
    for page in ("notation", "randomness", "models", "drafting", "rules", "corrections", "controls", "certificates",
                 "cli/README", "cli/certify", "cli/sample", "cli/gate", "cli/kernels", "cli/real", "limits", "engines",
                 "plugins", "torch-path", "layout", "moved"):
        assert (REPO / "docs" / f"{page}.md").exists()
    for source in [REPO / "README.md", *(REPO / "docs").rglob("*.md")]:
        for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", source.read_text()):
            if not link.startswith("http"):
                assert (source.parent / link).exists(), (source.name, link)


def test_the_sample_case_in_examples_gives_the_papers_number():
    # Traversal Verification (Weng et al., NeurIPS 2025) §3.2: X1 X3 (path [0, 1]) is accepted with probability 2/3.
    result = run(["law", "--case", str(REPO / "examples" / "case.json")])
    assert result.returncode == 0, result.stderr
    law = json.loads(result.stdout)["law"]
    assert sum(F(e["prob"]) for e in law if e["path"] == [0, 1]) == F(2, 3)
    assert "specproof law --case examples/case.json" in (REPO / "docs" / "cli" / "certify.md").read_text()


def test_the_covers_line_names_a_table_pair_not_a_seed_it_does_not_have():
    # a table model has no seed: its verdict covers that one pair; a seeded model's names the seeds tried
    base = ["certify", "--topology", "chain", "--depth", "2", "--verifier", "bv"]
    table = CliRunner().invoke(cli.main, [*base, "--model", "table", "--table",
                                          str(Path(__file__).resolve().parents[1] / "examples" / "block_example.json")])
    seeded = CliRunner().invoke(cli.main, [*base, "--model", "random-rational", "--vocab", "3"])
    assert "covers: lossless on this one model pair (table)" in table.output and "seed" not in table.output
    assert "covers: lossless on the 1 model pair(s) tried (model seed 0)" in seeded.output
