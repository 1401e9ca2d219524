"""The exact ceiling E[τ]* (exact/prove/optimum.py, issue 55): equal to Block Verification on chains (its Theorem 2)
and to the optimal-transport rule at depth 1, above every built-in rule elsewhere, 6/5 on the issue's instance;
every answer rests on an exact primal point and an exact dual certificate, and a wrong certificate fails."""

from __future__ import annotations

import importlib.util
import json
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from exact.certificate import certify, round_law
from exact.prove.optimum import (check_dual, check_primal, check_size, column_estimate, optimum, rule_margins,
                                  solve_sparse)
from simulator.drafting.drafter_registry import make_drafter
from simulator.completion import TARGET
from simulator.errors import InvalidParameterError
from simulator.models import make_model
from simulator.numeric import rational
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.registry import ALL_SHAPES
from specproof.cli import app as cli


def instance(topology: str, depth: int, branching: int, vocab: int, seed: int, scheme: str = "iid"):
    model = make_model("random-rational", None, vocab, seed)
    return model, make_drafter(scheme, make_topology(topology, depth, branching), model)


def proved(model, drafter):
    result = optimum(model, drafter)
    assert result.primal_checked and result.dual_checked and result.closed, result
    assert abs(float(result.optimum) - result.float_optimum) < 1e-9
    return result


@pytest.mark.parametrize("seed", range(5))
def test_on_chains_the_optimum_is_block_verification(seed):
    """BV's Theorem 2: on a chain no lossless verifier accepts more than Block Verification."""
    model, drafter = instance("chain", 3, 1, 3, seed)
    assert proved(model, drafter).optimum == certify(model, drafter, "bv").expected_accepted


@pytest.mark.parametrize("seed", range(3))
def test_at_depth_one_the_optimum_is_the_optimal_transport_rule(seed):
    model, drafter = instance("complete", 1, 2, 3, seed)
    assert proved(model, drafter).optimum == certify(model, drafter, "tv-opt").expected_accepted


@pytest.mark.parametrize("shape", [("chain", 2, 1, 3, 2), ("complete", 1, 2, 3, 4), ("multi-chain", 2, 2, 2, 0)])
def test_no_lossless_rule_is_above_the_optimum(shape):
    model, drafter = instance(*shape)
    best = proved(model, drafter).optimum
    checked = 0
    for spec in VERIFIERS.values():
        if "iid" not in spec.lossless_under or (spec.shapes != ALL_SHAPES and shape[0] not in spec.shapes):
            continue
        law = round_law(model, drafter, spec.name)
        if any(outcome.completion is not TARGET for outcome in law.outcomes):
            continue  # greedy BV: lossless over rounds through a modified target, outside the per-round LP
        assert law.distance().tvd == 0 and law.expected_accepted() <= best, (spec.name, law.expected_accepted(), best)
        checked += 1
    assert checked >= 5


def test_the_issues_instance_is_six_fifths_above_layer_rrs():
    """Complete b = 2, H = 2, V = 3, random-rational seed 1, iid: E[τ]* = 6/5, above lv-rrs's 215/189."""
    model, drafter = instance("complete", 2, 2, 3, 1)
    result = proved(model, drafter)
    assert result.optimum == F(6, 5)
    assert result.optimum > F(215, 189) == certify(model, drafter, "lv-rrs").expected_accepted
    # blocks of trees with the same root paths, classes of sequences with the same output prefixes
    assert (result.trees, result.rows, result.columns) == (50, 70, 804)
    whole = optimum(model, drafter, merge=False)  # one block per drafted tree, one row per sequence: the same optimum
    assert whole.proved and whole.optimum == F(6, 5) and (whole.trees, whole.rows, whole.columns) == (324, 351, 5220)


def test_a_wrong_certificate_fails_the_exact_checks():
    """Negative controls: the settled dual, nudged on one row, is no longer dual feasible or no longer proves the
    value; the primal point, moved off one column, breaks an equality."""
    model, drafter = instance("complete", 2, 2, 3, 1)
    result = proved(model, drafter)
    lp = result.lp
    assert check_dual(lp, result.dual) and check_primal(lp, result.primal)
    tight_row = max(range(lp.rows), key=lambda i: abs(result.dual[i]))
    for delta in (F(-1, 10**6), F(1, 10**6)):
        nudged = list(result.dual)
        nudged[tight_row] += delta
        value = sum((b * y for b, y in zip(lp.b, nudged)), rational(0))
        assert not check_dual(lp, nudged) or value != result.optimum
    below = [y - F(1, 10**9) for y in result.dual]  # every multiplier lowered: some column's constraint breaks
    assert not check_dual(lp, below)
    moved = dict(result.primal)
    j = next(iter(moved))
    moved[j] = moved[j] + F(1, 7)
    assert not check_primal(lp, moved)
    moved[j] = -moved[j]
    assert not check_primal(lp, moved)


def test_sparse_elimination_solves_consistent_and_refuses_inconsistent_systems():
    one = rational(1)
    eqs = [({0: one, 1: one}, rational(3)), ({1: one, 2: -one}, rational(1)), ({0: one, 2: 2 * one}, rational(3))]
    x = solve_sparse(eqs, {})
    assert (x[0], x[1], x[2]) == (1, 2, 1)
    free = solve_sparse([({0: one, 1: one}, rational(1))], {1: rational(1, 4)})  # one free variable: its hint
    assert free[0] + free[1] == 1 and free[1] == rational(1, 4)
    assert solve_sparse([({0: one}, one), ({0: 2 * one}, one)], {}) is None
    # optional equations: added while they add a pivot, an inconsistent one dropped, none after the last pivot
    pinned = solve_sparse([({0: one, 1: one}, rational(1))], {1: rational(1, 4)},
                          [({0: one, 1: one}, rational(5)), ({0: one, 1: -one}, rational(0)), ({1: one}, rational(9))],
                          variables=2)
    assert (pinned[0], pinned[1]) == (rational(1, 2), rational(1, 2))


def test_a_shape_over_the_limit_is_refused_with_its_estimate():
    model, drafter = instance("complete", 3, 2, 3, 0)  # 15 nodes: 3^14 · 15 · 3 columns
    estimate = column_estimate(15, 3)
    with pytest.raises(InvalidParameterError, match=f"{estimate:,} columns") as err:
        check_size(drafter, 3)
    assert err.value.field == "depth"
    dyspec = make_drafter("dyspec", None, model)
    with pytest.raises(InvalidParameterError) as err:
        check_size(dyspec, 3)
    assert err.value.field == "drafting"


def test_a_size_refusal_names_the_vocabulary_when_the_tree_fits_at_a_smaller_one():
    """A chain of 3 nodes fits at V = 43 (3·43^3 = 238,521 columns), not at V = 1000: the refusal names ``vocab``
    (it named ``depth``), and the largest V that fits."""
    _, drafter = instance("chain", 2, 1, 3, 0)
    assert check_size(drafter, 43) == column_estimate(3, 43)
    with pytest.raises(InvalidParameterError, match="fits up to V = 43") as err:
        check_size(drafter, 1000)
    assert err.value.field == "vocab"
    explicit = make_drafter("iid", make_topology("explicit", parents=[-1, *[i // 2 for i in range(16)]]))
    with pytest.raises(InvalidParameterError, match="at any vocabulary") as err:
        check_size(explicit, 3)
    assert err.value.field == "parents"


RAISING = """
def broken(tree, p, q, rng):
    raise ValueError("boom")
"""


def test_a_named_verifier_that_raises_is_exit_2_naming_its_line_not_a_row(tmp_path, monkeypatch):
    """``optimum --verifier module:fn`` whose function raises exited 0 with a row "not certified here"; certify
    exits 2 for it, and so does optimum now, with the user's line. A built-in rule the table cannot certify stays a
    row (control: bv, chain-only, on a tree)."""
    (tmp_path / "plug_optimum.py").write_text(RAISING)
    monkeypatch.chdir(tmp_path)
    base = ["optimum", "--model", "random-rational", "--vocab", "2", "--seed", "1", "--topology", "chain",
            "--depth", "1"]
    result = CliRunner().invoke(cli.main, [*base, "--verifier", "plug_optimum:broken"])
    assert result.exit_code == 2, result.output
    assert "error: verifier: plug_optimum:broken raised ValueError: boom" in result.stderr
    assert "plug_optimum.py:3" in result.stderr
    tree = CliRunner().invoke(cli.main, ["optimum", "--model", "random-rational", "--vocab", "2", "--seed", "1",
                                         "--topology", "complete", "--depth", "1", "--branching", "2"])
    assert tree.exit_code == 0 and "not certified here" in tree.output, tree.output


def test_schemes_is_checked_and_marks_the_named_verifiers_control_run(tmp_path):
    base = ["optimum", "--model", "random-rational", "--vocab", "2", "--seed", "1", "--topology", "chain",
            "--depth", "1", "--no-rules"]
    result = CliRunner().invoke(cli.main, [*base, "--verifier", "tv-sps", "--schemes", "magic"])
    assert result.exit_code == 2 and "error: schemes: unknown drafting scheme 'magic'" in result.stderr
    result = CliRunner().invoke(cli.main, [*base, "--schemes", "iid"])
    assert result.exit_code == 2 and "error: schemes: " in result.stderr and "--verifier" in result.stderr
    out = tmp_path / "optimum.json"
    result = CliRunner().invoke(cli.main, [*base, "--verifier", "tv-sps", "--schemes", "without-replacement",
                                           "--json", str(out)])
    assert result.exit_code == 0 and "control run: tv-sps claims losslessness under without-replacement, not iid" \
        in result.output, result.output
    row, = json.loads(out.read_text())["rules"]
    assert row["control_run"] and row["claimed_schemes"] == ["without-replacement"]


@pytest.mark.parametrize("name,words", [("optv-bad.name.txt", "must end in .py"), ("opt-v.py", "not a Python module"),
                                         ("json.py", "would import the module 'json'")])
def test_verifier_out_must_be_a_module_certify_can_import(tmp_path, name, words):
    result = CliRunner().invoke(cli.main, ["optimum", "--vocab", "2", "--topology", "chain", "--depth", "1",
                                           "--verifier-out", str(tmp_path / name)])
    assert result.exit_code == 2 and result.stderr.startswith("error: verifier_out: ") and words in result.stderr, \
        result.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_command_prints_the_optimum_and_each_rules_efficiency(tmp_path):
    out = tmp_path / "optimum.json"
    args = ["optimum", "--model", "random-rational", "--vocab", "3", "--seed", "1", "--topology", "chain",
            "--depth", "3", "--verifier", "tv-sps", "--json", str(out)]
    result = CliRunner().invoke(cli.main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "E[τ]* = 45901/35280" in result.output and "dual certificate checked exactly" in result.output
    assert "an oracle's bound" in result.output
    data = json.loads(out.read_text())
    assert data["optimum"] == "45901/35280" and data["dual_checked"] and data["primal_checked"]
    rows = {row["verifier"]: row for row in data["rules"]}
    assert F(rows["bv"]["efficiency"]) == 1 and F(rows["tv-sps"]["efficiency"]) < 1
    refused = CliRunner().invoke(cli.main, ["optimum", "--vocab", "3", "--depth", "3", "--max-columns", "1000"])
    assert refused.exit_code == 2 and "columns" in refused.output


def test_the_optimal_verifier_written_certifies_lossless_at_the_optimum(tmp_path):
    """The cross-check that the LP encodes losslessness as the exact engine does: the written π, certified by
    enumeration, is LOSSLESS with E[τ] = E[τ]*."""
    module = tmp_path / "optimal_c22.py"
    args = ["optimum", "--model", "random-rational", "--vocab", "3", "--seed", "1", "--topology", "complete",
            "--depth", "2", "--no-rules", "--verifier-out", str(module)]
    result = CliRunner().invoke(cli.main, args, catch_exceptions=False)
    assert result.exit_code == 0 and "optimal verifier written" in result.output, result.output
    spec = importlib.util.spec_from_file_location("optimal_c22", module)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    model, drafter = instance("complete", 2, 2, 3, 1)
    cert = certify(model, drafter, loaded.verify)
    assert cert.lossless and cert.expected_accepted == F(6, 5)
    assert loaded.verify.schemes == ("iid",)
    # the same check rejects a table with one answer changed: the first block's first entry answers y + 1
    key = next(iter(loaded.TABLE))
    (path, y, prob), *rest = loaded.TABLE[key]
    loaded.TABLE[key] = ((path, (y + 1) % 3, prob), *rest)
    assert not certify(model, drafter, loaded.verify).lossless


def test_the_docs_worked_example_holds():
    """docs/optimum.md's worked example: the numbers it prints are the ones computed."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "optimum.md").read_text()
    model, drafter = instance("chain", 3, 1, 3, 1)
    chain = proved(model, drafter).optimum
    sps = certify(model, drafter, "tv-sps").expected_accepted
    assert (chain, sps) == (F(45901, 35280), F(71591, 60480))
    assert f"`{chain}`" in text and f"`{sps}`" in text and f"about {float(sps / chain):.4f}" in text
    model, drafter = instance("complete", 2, 2, 3, 1)
    tree = proved(model, drafter)
    assert f"it is `{tree.optimum}`, and the\nLP has {tree.columns:,} columns, {tree.rows} rows and {tree.trees} " \
           f"blocks of drafted trees" in text


def _random_instances(count: int, seed: int, topology: str, depths=(1, 4), vocabs=(2, 4), branching: int = 1):
    from simulator.drafting import FixedShape
    from simulator.models import RandomRationalModel
    rng = np.random.default_rng(seed)
    for _ in range(count):
        model = RandomRationalModel(int(rng.integers(*vocabs)), int(rng.integers(2**31)), zero_prob=0.3)
        shape = make_topology(topology, int(rng.integers(*depths)), branching)
        yield model, FixedShape(shape), f"vocab={model.vocab} seed={model.seed} H={shape.height}"


def test_the_theorem_margins_hold_and_catch_a_rule_above_the_ceiling():
    """The checks `specproof theorems` can run (rule_margins): optimum = bv on random chains, = tv-opt at depth 1,
    every claiming rule ≤ optimum on trees; a lossy rule that accepts everything shows a negative margin."""
    chains = rule_margins(_random_instances(12, 1, "chain", (1, 4), (2, 4)), ["bv"], equal=True)
    assert chains.holds and chains.instances == 12 and chains.worst == 0
    one_step = rule_margins(_random_instances(8, 2, "complete", (1, 2), (2, 4), 2), ["tv-opt"], equal=True)
    assert one_step.holds and one_step.worst == 0
    below = rule_margins(_random_instances(4, 3, "complete", (2, 3), (2, 3), 2), ["tv-rrs", "lv-rrs", "trv"])
    assert below.holds and below.instances == 12
    broken = rule_margins(_random_instances(3, 4, "chain", (2, 3), (3, 4)), ["bug-accept-all"])
    assert not broken.holds and broken.worst < 0 and "bug-accept-all" in broken.where
