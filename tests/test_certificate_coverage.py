"""What a certificate says its rule reached (exact/reach.py, docs/certificates.md#what-the-verdict-could-see):
P(τ ≥ 1), P(the output node is inner), P(it is a leaf), derived by hand here; the warnings a probability of 0
brings, and only then; a plugin's line coverage, with the lines an instance never reaches."""

from __future__ import annotations

import json
import sys
from fractions import Fraction as F
from pathlib import Path

import pytest
from click.testing import CliRunner

from exact import certify
from exact.reach import LineTracer, plugin_codes
from simulator.drafting import FixedShape
from simulator.models import SyntheticModel, TableModel
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from specproof.cli import app as cli

PLUGIN = "tests.plugins.sps_branches:sps_branches"
PLUGIN_FILE = Path(__file__).parent / "plugins" / "sps_branches.py"
BLOCK_FILE = Path(__file__).resolve().parents[1] / "examples" / "block_example.json"
ACCEPTED_NONE = "no draft token was accepted: acceptance bugs, and a residual replaced by q, could not show"


def table(p, q) -> TableModel:
    return TableModel(len(p), {None: [F(x) for x in p]}, {None: [F(x) for x in q]})


BLOCK = table(["2/3", "1/3"], ["1/3", "2/3"])  # examples/block_example.json
DISJOINT = table([1, 0], [0, 1])  # the draft's token is one the target never emits: nothing is ever accepted
EQUAL = table(["1/2", "1/2"], ["1/2", "1/2"])  # p = q: every draft token is accepted


def chain(depth: int) -> FixedShape:
    return FixedShape(make_topology("chain", depth, 1))


def source_lines(marker: str) -> set[int]:
    """The lines of the fixture plugin whose text holds ``marker``."""
    return {i for i, text in enumerate(PLUGIN_FILE.read_text().splitlines(), start=1) if marker in text}


@pytest.mark.parametrize("depth, accept, inner, leaf", [
    # SpS accepts a draft token x ~ p with probability min(1, q(x)/p(x)): a = 2/3·1/2 + 1/3·1 = 2/3 at each step.
    # Depth 1: τ ≥ 1 and the round ends at the leaf with probability a; a rejection ends it at the root.
    (1, F(2, 3), F(1, 3), F(2, 3)),
    # Depth 2: the leaf needs two acceptances, a² = 4/9; the rest ends at the root or at the middle node.
    (2, F(2, 3), F(5, 9), F(4, 9)),
])
def test_tv_sps_on_the_block_example_reaches_what_is_derived_by_hand(depth, accept, inner, leaf):
    reach = certify(BLOCK, chain(depth), "tv-sps").reach
    assert (reach.p_accept, reach.p_inner, reach.p_leaf) == (accept, inner, leaf)
    assert reach.p_inner + reach.p_leaf == 1
    assert reach.unseen() == [] and reach.lines is None  # a built-in rule has no plugin lines


def test_a_planted_bug_in_the_leaf_count_is_caught(monkeypatch):
    """Negative control: an outcome recorded as ending at a leaf whatever its node breaks the hand-derived
    numbers above (P(leaf) = 1, P(inner) = 0)."""
    import simulator.speculation as speculation
    original = speculation.RoundOutcome

    def always_leaf(path, y, completion=speculation.TARGET, inner=None):
        return original(path, y, completion, inner=False)
    monkeypatch.setattr(speculation, "RoundOutcome", always_leaf)
    reach = certify(BLOCK, chain(1), "tv-sps").reach
    assert (reach.p_inner, reach.p_leaf) == (0, 1) != (F(1, 3), F(2, 3))


def test_inner_and_leaf_sum_to_one_for_every_rule_on_a_branching_tree():
    model, drafter = SyntheticModel(3, seed=1), FixedShape(make_topology("complete", 2, 2))
    for name in ("tv-sps", "tv-rrs", "trv", "bug-residual-q"):
        arithmetic = "float" if VERIFIERS[name].float_only else "fraction"
        reach = certify(model, drafter, name, arithmetic).reach
        assert reach.p_inner + reach.p_leaf == pytest.approx(1, abs=1e-12), name
        assert 0 < reach.p_inner < 1 and 0 < reach.p_accept <= 1, name


def test_the_recursion_says_it_did_not_compute_inner_and_leaf():
    cert = certify(BLOCK, chain(2), "tv-sps", "float", method="recursion")
    assert cert.reach.p_accept == pytest.approx(2 / 3, abs=1e-15)
    assert cert.reach.p_inner is None and cert.reach.p_leaf is None
    assert "not computed by the recursion" in cert.reach.lines_text()[1]
    assert cert.to_json()["reach"]["p_inner"] is None


@pytest.mark.parametrize("model, warned", [
    (DISJOINT, {"no draft token was accepted", "the bonus draw never ran"}),
    (EQUAL, {"the correction draw never ran"}),
    (BLOCK, set()),  # negative control: every kind has positive probability, no warning
])
def test_a_warning_exactly_where_a_decision_kind_has_probability_0(model, warned):
    reach = certify(model, chain(1), "tv-sps").reach
    kinds = {"no draft token was accepted": reach.p_accept, "the correction draw never ran": reach.p_inner,
             "the bonus draw never ran": reach.p_leaf}
    assert {k for k, p in kinds.items() if p == 0} == warned
    assert {k for k in kinds if any(line.startswith(k) for line in reach.unseen())} == warned


def test_the_issues_example_bug_residual_q_lossless_where_nothing_is_accepted_says_so(tmp_path):
    """The issue's causal-lm case on a table: the draft's and the target's supports are disjoint at the root, so
    ``bug-residual-q``'s residual is q and the verdict is LOSSLESS; the output says what could not show."""
    path = tmp_path / "disjoint.json"
    path.write_text(json.dumps({"vocab": 2, "p": {"*": ["1", "0"]}, "q": {"*": ["0", "1"]}}))
    out = tmp_path / "cert.json"
    args = ["--model", "table", "--verifier", "bug-residual-q", "--topology", "chain", "--depth", "1"]
    result = CliRunner().invoke(cli.main, ["certify", *args, "--table", str(path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "LOSSLESS" in result.output and f"warning: {ACCEPTED_NONE}" in result.output
    reach = json.loads(out.read_text())["reach"]
    assert (reach["p_accept"], reach["p_inner"], reach["p_leaf"]) == ("0/1", "1/1", "0/1")
    assert ACCEPTED_NONE in reach["unseen"]
    # the same rule where drafts are accepted: LOSSY, no warning
    block = CliRunner().invoke(cli.main, ["certify", *args, "--table", str(BLOCK_FILE)])
    assert block.exit_code == 1 and "warning:" not in block.output, block.output


def test_plugin_lines_an_instance_never_reaches_are_named():
    cert = certify(DISJOINT, chain(1), PLUGIN)
    lines = cert.reach.lines
    never = set(lines.never()[str(PLUGIN_FILE.resolve())])
    assert never == source_lines("# ACCEPT") | source_lines("continue") | source_lines("# BONUS")
    # the rule's body and its helper: 9 lines and 1; the accept, continue and bonus lines did not run
    assert (len(lines.lines), len(lines.executed)) == (10, 7) and lines.share == pytest.approx(7 / 10)
    shown = cert.reach.lines_text()
    assert any("7 of 10 (70%)" in line and "sps_branches.py lines" in line for line in shown), shown


def test_plugin_lines_all_run_where_every_branch_is_reached():
    lines = certify(BLOCK, chain(1), PLUGIN).reach.lines  # accepted, rejected and the leaf each have mass
    assert lines.executed == lines.lines and lines.share == 1 and lines.never() == {}
    assert len(lines.lines) == 10


def test_a_zero_probability_execution_adds_no_lines():
    """Lines run by an execution of probability 0 are dropped; those of a positive one kept."""
    codes = plugin_codes(__import__("tests.plugins.sps_branches", fromlist=["x"]).sps_branches)
    tracer = LineTracer(codes)
    file = next(iter(codes)).co_filename
    tracer._pending.add((file, 20))
    list(tracer.weighed([("o", 0)]))
    assert tracer.coverage().executed == frozenset()
    tracer._pending.add((file, 20))
    list(tracer.weighed([("o", F(1, 2))]))
    assert tracer.coverage().executed == {(file, 20)}


def test_the_line_tracer_keeps_a_trace_function_and_a_profile_hook_installed_before():
    """A debugger's trace function still hears the plugin's frames and is back afterwards; a profile hook (the
    plugin guard's kind) is untouched."""
    heard, profiled = [], []

    def previous(frame, event, arg):
        if frame.f_code.co_filename == str(PLUGIN_FILE.resolve()):
            heard.append(event)
        return None

    def profile(frame, event, arg):
        profiled.append(event)
    old_trace, old_profile = sys.gettrace(), sys.getprofile()
    sys.settrace(previous)
    sys.setprofile(profile)
    try:
        lines = certify(BLOCK, chain(1), PLUGIN).reach.lines
        assert sys.gettrace() is previous and sys.getprofile() is profile
    finally:
        sys.setprofile(old_profile)
        sys.settrace(old_trace)
    assert lines.share == 1 and "call" in heard and profiled


def test_a_plugin_gets_the_same_wrapper_in_every_certificate():
    """What is kept per plugin object (its scan for random sources) is kept once, not once per certificate."""
    fn = __import__("tests.plugins.sps_branches", fromlist=["x"]).sps_branches
    first, second = LineTracer(plugin_codes(fn)), LineTracer(plugin_codes(fn))
    assert first.wrap(fn) is second.wrap(fn) and first.wrap(fn).__wrapped__ is fn


def test_a_real_pair_verdict_covers_its_prompt_pair_and_processing_only():
    """``certify --model causal-lm``'s ``covers:`` line (exact.pairs.real_coverage), without torch."""
    from types import SimpleNamespace

    from exact.pairs import real_coverage

    processing = SimpleNamespace(temperature=1.0, top_k=2)
    assert real_coverage(34, "self:skip=12,14,16,18", "smollm2", processing) == (
        "this prompt (34 tokens), this pair (draft self:skip=12,14,16,18, target smollm2, float64) and this "
        "processing (temperature 1, top-k 2) only: another prompt, pair, processing or dtype is another check")
