"""The real-pair report's pieces (specproof/reports/real_pair.py): rank acceptance rates and the Sequoia-style tree
by hand, clustered standard errors against the closed form, paired differences, the store's resumption, and one
run of its configurations on a tiny random-weight pair."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from specproof.reports.real_pair import (BUDGETS, Config, Estimate, Provenance, Runner, Store, Summary, aded_configs,
                                         complete_within, dyspec_configs, not_lossless, rank_rates, real_pair_json,
                                         real_pair_markdown, real_pair_results, sequoia_config, sequoia_tree,
                                         verifier_configs, write_real_pair_report)


def test_rank_rates_count_each_rank_tried_up_to_the_accepted_one():
    tree = [-1, 0, 0, 1]  # root -> 1, 2; 1 -> 3
    rounds = [{"parents": tree, "node": 3}, {"parents": tree, "node": 2}, {"parents": tree, "node": 0}]
    # rank 1: tried at the root three times (won once) and at node 1 once (won); rank 2: tried twice, won once
    assert rank_rates(rounds) == [2 / 4, 1 / 2]


def test_the_sequoia_tree_by_hand():
    assert sequoia_tree([0.7], 4) == (-1, 0, 1, 2, 3)  # one rank: a chain
    # rates 1/2, 1/2: the root's first child (1/2), then its second (1/4, ties to the shallower parent), then the
    # first child's child (1/4)
    assert sequoia_tree([0.5, 0.5], 3) == (-1, 0, 0, 1)


def test_complete_trees_within_a_budget():
    assert [complete_within(b) for b in (8, 16, 32)] == [(2, 2), (3, 2), (4, 2)]  # 6, 14 and 30 draft tokens


def test_clustered_error_with_equal_clusters_is_the_error_of_the_cluster_means():
    rng = np.random.default_rng(0)
    values = rng.random((5, 4)).tolist()
    means = np.mean(values, axis=1)
    got = Estimate.of(values)
    assert got.mean == pytest.approx(means.mean())
    assert got.se == pytest.approx(means.std(ddof=1) / math.sqrt(5))


def _record(rounds):
    return {"tokens": 10, "emitted": 10, "steps": len(rounds), "seconds": 1.0, "draft_passes": 2 * len(rounds),
            "exact_seconds": 0.1, "rounds": rounds}


def test_paired_differences_and_the_check_are_taken_round_by_round():
    config = Config("x", "verifiers", "chain (3, 1)", "iid", (-1, 0, 1, 2), None, "tv-sps", ("tv-sps", "bv"),
                    "tv-sps", shape="chain")
    rounds = [[{"sampled": 1, "exact": {"tv-sps": 0.5, "bv": 0.75}, "parents": [-1, 0], "node": 1}],
              [{"sampled": 0, "exact": {"tv-sps": 0.25, "bv": 0.25}, "parents": [-1, 0], "node": 0},
               {"sampled": 2, "exact": {"tv-sps": 1.0, "bv": 1.5}, "parents": [-1, 0], "node": 1}]]
    s = Summary(config, [_record(r) for r in rounds])
    assert s.paired("bv").mean == pytest.approx((0.25 + 0 + 0.5) / 3)
    assert s.check().mean == pytest.approx((0.5 - 0.25 + 1.0) / 3)
    assert s.exact("bv").mean == pytest.approx((0.75 + 0.25 + 1.5) / 3)
    # a deciding rule without an exact expectation is reported by its sampled acceptance, and has no check
    sampled = Summary(Config("y", "verifiers", "c", "iid", (-1, 0), None, "lv-rrs", ("tv-sps",), "tv-sps",
                             shape="chain"), [_record(r) for r in rounds])
    assert sampled.rules == ("tv-sps", "lv-rrs") and sampled.check() is None
    assert sampled.paired("lv-rrs").mean == pytest.approx((0.5 - 0.25 + 1.0) / 3)


def _fake(config: Config, rng: np.random.Generator) -> list[dict]:
    records = []
    for _ in range(3):
        rounds = []
        for _ in range(4):
            tree = [-1, 0, 0, 1]
            rounds.append({"sampled": int(rng.integers(0, 3)), "node": int(rng.integers(0, 4)), "parents": tree,
                           "support": 100, "exact": {rule: float(rng.random() * 2) for rule in config.exact}})
        records.append(_record(rounds if config.verifier else []))
    return records


def test_the_report_writes_every_study_from_records(tmp_path):
    rng = np.random.default_rng(1)
    configs = verifier_configs() + [c for b in BUDGETS for c in dyspec_configs(b) + [sequoia_config(b, [0.6, 0.3])]]
    done = [(c, _fake(c, rng)) for c in configs + aded_configs()]
    write_real_pair_report(tmp_path, done, [81, 82, 83], 32, "specproof real-report", "cpu", (0.1, 0.2), 5.0, 60.0)
    text = (tmp_path / "real_pair.md").read_text()
    for heading in ("TRV, BV, LV and GBV against token verification", "DySpec's dynamic tree against fixed trees",
                    "ADED's tri-gram drafts", "Sampled against exact"):
        assert heading in text
    chain = Summary(done[0][0], done[0][1])
    assert f"| `bv` | {chain.exact('bv').text()} (exact) | {chain.paired('bv').text()} |" in text
    data = __import__("json").loads((tmp_path / "real_pair.json").read_text())
    assert {r["verifier"] for r in data["rows"] if r["shape"] == "complete"} >= {"lv-rrs", "tv-rrsw", "trv"}
    assert (tmp_path / "real_pair.png").stat().st_size > 0


def test_every_configuration_pairs_its_rules_with_a_drafting_they_are_lossless_under(tmp_path):
    """The report's rows read as lossless rules' speed and acceptance: no configuration runs or evaluates a rule
    under a drafting it is not lossless under (control: one planted is named in the report, its JSON rows and the
    lines the command prints)."""
    configs = verifier_configs() + verifier_configs("trained") + aded_configs() + \
        [c for b in BUDGETS for c in dyspec_configs(b) + [sequoia_config(b, [0.6, 0.3])]]
    assert not_lossless(configs) == []
    planted = replace(verifier_configs()[0], drafting="without-replacement")  # tv-rrs, tv-kseq, ... are iid's
    lines = not_lossless([planted])
    assert "chain-iid: NOT LOSSLESS: tv-rrs claims losslessness under iid, not without-replacement" in lines[0]
    rng = np.random.default_rng(1)
    done = [(c, _fake(c, rng)) for c in [planted, *configs[1:4]] + aded_configs() +
            [c for b in BUDGETS for c in dyspec_configs(b) + [sequoia_config(b, [0.6, 0.3])]]]
    write_real_pair_report(tmp_path, done, [81, 82, 83], 32, "specproof real-report", "cpu", (0.1, 0.2), 5.0, 60.0)
    assert "**Not lossless runs.** chain-iid: NOT LOSSLESS: tv-rrs" in (tmp_path / "real_pair.md").read_text()
    rows = json.loads((tmp_path / "real_pair.json").read_text())["rows"]
    flagged = {r["verifier"] for r in rows if r["shape"] == "chain" and not r["lossless_claimed"]}
    assert flagged == {"tv-rrs", "tv-kseq", "lv-rrs", "gbv"}
    assert all(r["lossless_claimed"] for r in rows if r["shape"] != "chain")


def test_the_rendering_reads_only_the_computed_results():
    """Rendering a fixed record: the header from its :class:`Provenance` (no clock, no torch), the checks in the
    report's order, and the JSON's rows from the same summaries."""
    rng = np.random.default_rng(2)
    configs = verifier_configs() + [c for b in BUDGETS for c in dyspec_configs(b) + [sequoia_config(b, [0.6, 0.3])]]
    done = [(c, _fake(c, rng)) for c in configs + aded_configs()]
    results = real_pair_results(done, [81, 82, 83], 32, instructions=40)
    assert [key for key, _ in results.checks] == (
        ["chain-iid", "complete-wor", "multi-chain-iid"]  # complete-iid is decided by lv-rrs: sampled only
        + [f"{kind}-{b}" for b in BUDGETS for kind in ("dyspec", "chain", "complete", "sequoia")] + ["aded"])
    run = Provenance("specproof real-report", "a machine", 2, (0.5, 0.75), 3.0, 120.0, "2026-01-02")
    text = real_pair_markdown(results, run)
    assert text.splitlines()[2] == (
        "Generated by `specproof real-report` on 2026-01-02 (a machine; 1-minute load average 0.5 before the run and "
        "0.8 after it, on 2 cores). This command took 3 s; measuring every stored question took 2.0 min (serving and "
        "exact expectations; the store is `reports/store/real_pair`, and a rerun reads it).")
    assert "to the 40 instructions of simulator/data/instructions.txt" in text
    assert "## Speed: the two drafts side by side" not in text  # no trained draft in these records
    assert real_pair_markdown(results, run) == text  # rendering computes nothing new
    data = real_pair_json(results, "specproof real-report", run.load)
    assert data["baseline_tokens_per_s"] == results.baseline == results.summaries["target"].tokens_per_s
    assert len(data["configs"]) == len(done) and data["load_average"] == [0.5, 0.75]


@pytest.fixture(scope="module")
def tiny_pair_dirs(tmp_path_factory):
    pytest.importorskip("transformers")
    from test_real import _save_pair_with_tokenizer

    return _save_pair_with_tokenizer(tmp_path_factory.mktemp("pair"))


def test_a_run_on_a_tiny_pair_records_every_rule_and_resumes_from_its_store(tiny_pair_dirs, tmp_path, monkeypatch):
    draft, target = tiny_pair_dirs
    questions = [{"question_id": i, "turns": [text]} for i, text in enumerate(["abc def", "hij"])]
    chain, dyspec = verifier_configs()[0], dyspec_configs(8)[0]
    runner = Runner(target, questions, 12, 0, "cpu", Store(tmp_path), draft_spec=draft)
    first = {c.key: runner.run(c) for c in (chain, dyspec, aded_configs()[1])}
    for config in (chain, dyspec):
        for record in first[config.key]:
            assert record["rounds"] and record["tokens"] == 12
            for r in record["rounds"]:
                assert set(r["exact"]) == set(config.exact)
                assert all(-1e-12 <= e <= len(r["parents"]) - 1 + 1e-12 for e in r["exact"].values())
    # on a chain, SpS and RRS are one rule (one candidate a node), and LV lifting RRS is BV
    for r in (r for record in first["chain-iid"] for r in record["rounds"]):
        assert r["exact"]["tv-rrs"] == pytest.approx(r["exact"]["tv-sps"], abs=1e-12)
        assert r["exact"]["lv-rrs"] == pytest.approx(r["exact"]["bv"], abs=1e-12)
    again = Runner(target, questions, 12, 0, "cpu", Store(tmp_path), draft_spec=draft)
    monkeypatch.setattr(Runner, "models", lambda self: pytest.fail("a stored run loaded a model"))
    assert {c.key: again.run(c) for c in (chain, dyspec, aded_configs()[1])} == first
