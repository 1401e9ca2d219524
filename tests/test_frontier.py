"""``specproof frontier``: a knob grid certified exactly beside the lossless references, checked against hand
derivations on a depth-1 chain; resumed after an interrupt, and on a Dask cluster, with the same numbers; given
points on several shapes (the headline table), a chain-only rule skipped on a tree."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

from specproof.cli.specs import ModelSpec
from specproof.frontier_cells import Instance
from simulator.drafting import top_tokens
from simulator.errors import InvalidParameterError
from simulator.models import RandomRationalModel, SyntheticModel
from specproof import frontier as frontier_module
from specproof.cli.app import main
from specproof.frontier import Frontier, Point, Shape, Sweep, run_frontier, summarise
from specproof.study import Store

#: a random rational pair whose draft's top token at the root has target mass 1/5 (p = (0, 3/7, 4/7),
#: q = (2/5, 2/5, 1/5)): the hand derivations below read it off the model, not off this comment
SEED = 1


def plan(sweeps: tuple[str, ...], depth: int = 1, seeds: int = 1, fixed: tuple = ()) -> Frontier:
    pair = ModelSpec("random-rational", None, 3, SEED, 0.5, 1.0, 1.0, 0.25)
    base = Instance(pair, "chain", depth, 1, "top-k", "fraction")
    return Frontier(("sglang-threshold",), tuple(Sweep.parse(s) for s in sweeps), fixed, base, seeds, True,
                    float("inf"), 0, None, 0)


def numbers(summary: dict) -> list:
    """What must repeat exactly: each point's means and each pair's record, and the references."""
    return [(p["swept"], p.get("expected_accepted"), p.get("tvd"), p.get("kl"), p["pairs"])
            for p in summary["points"]] + [(r["best"], r["best_expected_accepted"], r.get("ceiling"))
                                           for r in summary["references"]]


def test_sglang_threshold_on_a_depth_one_chain_equals_its_hand_derivation():
    # Top-k drafts x0, the draft's most likely token. At (1, 1) the kernel accepts it when u ≤ q(x0) and otherwise
    # samples the target without x0: the target's law, E[τ] = q(x0). At threshold_acc = 1/2 it accepts when
    # u ≤ 2 q(x0) (here 2/5 < 1): E[τ] = 2 q(x0); the first token is x0 with probability 2 q(x0), each other x
    # with (1 − 2 q(x0)) q(x) / (1 − q(x0)); the rest follows the target, so the TVD over Σ² is the first token's,
    # q(x0). No lossless rule can accept x0 more often than q(x0): the best lossless rule and the ceiling are q(x0).
    model = RandomRationalModel(3, SEED)
    p, q = model.p(()), model.q(())
    x0 = top_tokens(p, 1)[0]
    q0 = q[x0]
    assert 0 < 2 * q0 < 1
    summary = summarise(*_run(plan(("threshold_acc=1/2,1",))))
    half, one = summary["points"]
    assert one["swept"] == (("threshold_acc", 1),) and one["expected_accepted"] == q0 and one["tvd"] == 0
    assert one["kl"] == 0
    assert half["expected_accepted"] == 2 * q0 and half["tvd"] == q0  # the negative control
    first = {x: (2 * q0 if x == x0 else (1 - 2 * q0) * q[x] / (1 - q0)) for x in range(3)}
    kl = sum(float(f) * math.log(f / q[x]) for x, f in first.items() if f > 0)
    assert half["kl"] == pytest.approx(kl, rel=1e-12)
    (reference,) = summary["references"]
    assert reference["best_expected_accepted"] == q0 and reference["ceiling"] == q0
    assert reference["ceiling_proved"] and reference["best"] == ["tv-det"]


def _run(frontier: Frontier, store: Store | None = None, **options) -> tuple[Frontier, dict]:
    frontier.check()
    return frontier, run_frontier(frontier, store, **options)[0]


def test_a_two_knob_grid_writes_its_tables_json_and_plot(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["frontier", "--verifier", "sglang-threshold", "--model", "random-rational",
                                       "--seed", str(SEED), "--topology", "chain", "--depth", "2", "--drafting",
                                       "top-k", "--arithmetic", "fraction", "--sweep", "threshold_single=0.5:1:3",
                                       "--sweep", "threshold_acc=0.5,1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "frontier.json").read_text())
    grid = [(p["knobs"]["threshold_single"], p["knobs"]["threshold_acc"]) for p in data["points"]]
    assert grid == [(s, a) for s in ("0.5", "0.75", "1") for a in ("0.5", "1")]
    lossless = [p for p in data["points"] if p["knobs"] == {"threshold_single": "1", "threshold_acc": "1"}]
    assert lossless[0]["tvd"] == "0/1" and all(Fraction(p["tvd"]) > 0 for p in data["points"][:1])
    assert data["references"][0]["ceiling"] == data["references"][0]["best_expected_accepted"]
    text = (out / "frontier.md").read_text()
    assert "## sglang-threshold" in text and text.count("\n| 0.75 |") == 2 and "ceiling E[τ]*" in text
    assert (out / "frontier.png").read_bytes()[:4] == b"\x89PNG"
    assert len(list((out / "store" / "cache").glob("frontier-*.json"))) == 6 + 2  # the points and references


def test_an_interrupted_sweep_resumes_with_the_same_numbers(tmp_path, monkeypatch):
    grid = plan(("threshold_single=0.5,1", "threshold_acc=0.5,1"), depth=2, seeds=2)
    whole = summarise(*_run(grid, Store(tmp_path / "whole")))
    calls, stop = [], [5]
    original = frontier_module.compute_cell

    def interrupted(cell, workers=1):
        if len(calls) == stop[0]:  # Ctrl-C as the sixth cell starts
            raise KeyboardInterrupt
        calls.append(cell)
        return original(cell)

    monkeypatch.setattr(frontier_module, "compute_cell", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run(grid, Store(tmp_path / "part"))
    assert len(list((tmp_path / "part" / "cache").glob("*.json"))) == 5
    calls.clear()
    stop[0] = None
    resumed = summarise(*_run(grid, Store(tmp_path / "part")))
    assert len(calls) == len(grid.cells()) - 5  # what was stored is read back, not recomputed
    assert numbers(resumed) == numbers(whole)


def test_a_dask_cluster_gives_the_same_numbers(tmp_path):
    distributed = pytest.importorskip("distributed")
    grid = plan(("threshold_single=0.5,1",), depth=2)
    local = summarise(*_run(grid))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        remote = summarise(*_run(grid, Store(tmp_path), scheduler=cluster.scheduler_address))
    assert numbers(remote) == numbers(local)


@pytest.mark.parametrize("sweep, field", [("threshold_acc=0:1:3", "sweep.threshold_acc"),
                                          ("threshold_single=1.5", "sweep.threshold_single"),
                                          ("posterior_alpha=0.1,0.2", "sweep.posterior_alpha"),
                                          ("rho=0,1", "sweep.rho"), ("threshold_acc=1:0:1", "sweep")])
def test_a_sweep_a_rule_cannot_take_is_refused_naming_the_option(sweep, field):
    with pytest.raises(InvalidParameterError) as err:
        plan((sweep,)).check()
    assert err.value.field == field


def test_the_command_refuses_a_value_out_of_range_before_any_work(tmp_path):
    result = CliRunner().invoke(main, ["frontier", "--verifier", "sglang-threshold", "--sweep",
                                       "threshold_acc=0:1:3", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "sweep.threshold_acc" in result.output
    assert not (tmp_path / "out").exists()


def test_a_model_option_sweep_has_references_per_setting():
    # On a depth-1 chain under top-k drafting, at (1, 1) and for the best lossless rule, E[τ] = q(x0) (as above),
    # here read off the synthetic pair of each ρ.
    pair = ModelSpec("synthetic", None, 3, 0, 0.5, 1.0, 1.0, 0.25)
    base = Instance(pair, "chain", 1, 1, "top-k", "float")
    frontier = Frontier(("sglang-threshold",), (Sweep.parse("rho=0.2,0.8"),), (), base, 1, False, 0, 0, None, 0)
    summary = summarise(*_run(frontier))
    for rho, point, reference in zip((0.2, 0.8), summary["points"], summary["references"]):
        model = SyntheticModel(3, rho, 1.0, 1.0, 0)
        q0 = model.q(())[top_tokens(model.p(()), 1)[0]]
        assert point["expected_accepted"] == pytest.approx(q0, abs=1e-12) and point["tvd"] <= 1e-12
        assert reference["best_expected_accepted"] == pytest.approx(q0, abs=1e-12)
        assert reference["ceiling_missing"] == "skipped (--no-ceiling)"
    with pytest.raises(InvalidParameterError) as err:
        replace(frontier, sweeps=(Sweep.parse("rho=0.5,1.5"),)).check()
    assert err.value.field == "sweep.rho"


def test_a_value_a_rule_refuses_only_as_it_runs_is_named_after_the_sweep():
    # relaxed refuses relaxed_topk past the vocabulary when it sees a row (torch.topk's own refusal), not in its
    # knob's check: the error reaches the user as the sweep's.
    frontier = replace(plan(("relaxed_topk=2,4",), depth=1), rules=("relaxed",), ceiling=False)
    with pytest.raises(InvalidParameterError) as err:
        _run(frontier)
    assert err.value.field == "sweep.relaxed_topk" and "vocabulary 3" in err.value.message


def test_a_point_parses_its_rule_knobs_and_label():
    point = Point.parse("typical:posterior_threshold=0.09,posterior-alpha=0.3@Medusa's defaults")
    assert point.rule == "typical" and point.label == "Medusa's defaults"
    assert point.knobs == (("posterior_threshold", Fraction(9, 100)), ("posterior_alpha", Fraction(3, 10)))
    assert Point.parse("forced-rate:synthetic_acceptance_rates=[0.8,0.5]").knobs == \
        (("synthetic_acceptance_rates", (0.8, 0.5)),)
    assert Point.parse("fly") == Point("fly", (), (), ())
    assert Shape.parse("chain:3") == Shape("chain", 3, 1) and Shape.parse("complete:2:2").label() == \
        "complete, b = 2, H = 2"


@pytest.mark.parametrize("option, text, field", [
    ("point", ":threshold_acc=1", "point"), ("point", "typical:posterior_threshold", "point"),
    ("point", "typical:posterior_threshold=0.1,posterior_threshold=0.2", "point"),
    ("point", "no-such-rule", "point"), ("point", "sglang-threshold:threshold_acc=0", "point.threshold_acc"),
    ("point", "sglang-threshold:posterior_alpha=1", "point.posterior_alpha"), ("shape", "chain", "shape"),
    ("shape", "chain:x", "shape"), ("shape", "tree:2", "shape"), ("shape", "explicit:2", "shape"),
    ("shape", "complete:2:0", "shape"), ("shape", "complete:40:2", "shape")])
def test_a_point_or_shape_it_cannot_take_is_refused_naming_the_option(option, text, field):
    with pytest.raises(InvalidParameterError) as err:
        if option == "shape":
            Shape.parse(text)
        else:
            point = Point.parse(text)
            replace(plan(()), rules=(point.rule,), given=(point,)).check()
    assert err.value.field == field


@pytest.mark.parametrize("extra, field", [(["--sweep", "threshold_acc=0.5,1"], "point"),
                                          (["--verifier", "typical"], "point"),
                                          (["--depth", "2"], "shape"), (["--name", "a/b"], "name")])
def test_the_command_refuses_points_or_shapes_mixed_with_what_they_replace(extra, field):
    result = CliRunner().invoke(main, ["frontier", "--point", "sglang-threshold", "--shape", "chain:1", *extra])
    assert result.exit_code == 2 and f"{field}:" in result.output


def test_a_headline_over_two_shapes_skips_a_chain_only_rule_on_the_tree(tmp_path):
    # Top-k drafting on random rational pair SEED (V = 3): the chain of depth 1 drafts x0, the draft's most likely
    # token; the complete tree (b = 2, H = 1) drafts x0 and x1, its two most likely. sglang-threshold at (1, 1)
    # walks the siblings by inverse-CDF sampling of the target, accepting x0 when u ≤ q(x0) and else x1 when
    # u ≤ q(x0) + q(x1): lossless, E[τ] = q(x0) on the chain and q(x0) + q(x1) on the tree, which no lossless
    # rule can beat (it accepts x at most q(x) of the time). forced-rate at rate 4/5 accepts the one draft with
    # probability 4/5 whatever p and q: E[τ] = 4/5 on the chain; it is defined on chains only.
    model = RandomRationalModel(3, SEED)
    x0, x1 = top_tokens(model.p(()), 2)
    q = model.q(())
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["frontier", "--model", "random-rational", "--vocab", "3", "--seed",
                                       str(SEED), "--drafting", "top-k", "--arithmetic", "fraction",
                                       "--max-columns", "inf", "--shape", "chain:1", "--shape", "complete:1:2",
                                       "--point", "sglang-threshold:threshold_single=1,threshold_acc=1@defaults",
                                       "--point", "forced-rate:synthetic_acceptance_rates=0.8", "--out", str(out),
                                       "--name", "headline"])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "headline.json").read_text())
    chain, tree = ({"topology": "chain", "depth": 1, "branching": 1},
                   {"topology": "complete", "depth": 1, "branching": 2})
    rows = {(p["rule"], p["shape"]["topology"]): p for p in data["points"]}
    assert rows["sglang-threshold", "chain"]["tvd"] == "0/1" == rows["sglang-threshold", "complete"]["tvd"]
    assert Fraction(rows["sglang-threshold", "chain"]["expected_accepted"]) == q[x0]
    assert Fraction(rows["sglang-threshold", "complete"]["expected_accepted"]) == q[x0] + q[x1]
    assert Fraction(rows["forced-rate", "chain"]["expected_accepted"]) == Fraction(4, 5)
    assert Fraction(rows["forced-rate", "chain"]["tvd"]) > 0  # the negative control
    assert "undefined" in rows["forced-rate", "complete"] and "pairs" not in rows["forced-rate", "complete"]
    references = {r["shape"]["topology"]: r for r in data["references"]}
    assert [r["shape"] for r in data["references"]] == [chain, tree]
    assert Fraction(references["complete"]["ceiling"]) == q[x0] + q[x1] == \
        Fraction(references["complete"]["best_expected_accepted"])
    text = (out / "headline.md").read_text()
    forced = next(line for line in text.splitlines() if line.startswith("| `forced-rate`"))
    assert forced.count("not defined on this shape") == 1 and "| 0.8 | " in forced
    assert "chain, H = 1: E[τ]" in text and "complete, b = 2, H = 1: E[τ]" in text
    assert (out / "headline.png").read_bytes()[:4] == b"\x89PNG"
    again = CliRunner().invoke(main, shlex.split(data["command"])[1:])  # the header's command, as recorded
    assert again.exit_code == 0, again.output
    assert (out / "headline.md").read_text() == text


def test_the_real_pairs_section_is_appended_from_lossy_reals_json(tmp_path):
    """``--real-pair`` appends the section ``specproof lossy-real`` wrote (here the committed one); a file that is not
    its JSON is refused before any cell runs, naming the option."""
    base = ["frontier", "--point", "sglang-threshold", "--shape", "chain:1", "--model", "random-rational", "--seed",
            str(SEED), "--drafting", "top-k", "--no-ceiling"]
    committed = Path(__file__).resolve().parent.parent / "reports" / "lossy_frontier_real.json"
    result = CliRunner().invoke(main, [*base, "--real-pair", str(committed)])
    assert result.exit_code == 0 and "## On the real pair" in result.output, result.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rows": "none"}))
    refused = CliRunner().invoke(main, [*base, "--real-pair", str(bad)])
    assert refused.exit_code == 2 and "real-pair" in refused.output, refused.output
