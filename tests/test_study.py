"""The toy study's plumbing: the paper's tables as cells, the resumable store, the baseline-TVD analysis."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specproof import study
from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError
from specproof.study import Cell, Store, paper_cells, paper_tables, run_cells, summarise_cell
from simulator.montecarlo.statistics import expected_sample_tvd, tvd_upper_bound


def test_paper_tables_map_to_the_configurations_they_name():
    table1 = list(paper_cells(1))
    assert len(table1) == 7 * 3 + 1  # seven methods on three structures, GBV on multi-chain only
    assert {c.topology for _, _, c in table1} == {"multi-chain", "tapered", "complete"}
    assert all((c.vocab, c.depth, c.branching, c.rho, c.trials, c.seeds) == (15, 4, 2, 0.5, 10**6, 20)
               for _, _, c in table1)
    depth = {c.depth for _, _, c in paper_cells(5)}
    assert depth == {2, 3, 4, 5} and {c.topology for _, _, c in paper_cells(5)} == {"tapered"}
    temps = {(c.tau_p, c.tau_q) for _, _, c in paper_cells(15)}
    assert temps == {(0.5, 0.5), (0.75, 0.75), (1.0, 1.0), (1.5, 1.5)}
    assert {c.rho for _, _, c in paper_cells(10)} == {0.0, 0.25, 0.5}
    assert all(c.trials == 10**5 for t in range(4, 16) for _, _, c in paper_cells(t))
    # Spot values transcribed from Layer Verification (Cha et al. 2026), Table 1 and Table 4.
    tables = paper_tables()
    assert tables["Table 1"]["rows"]["lv-gr"][2] == {"accept_len": 3.28, "se": 0.05, "tvd": 0.2567}
    assert tables["Table 4"]["rows"]["baseline"][2]["tvd"] == 0.6217


def _cells():
    return [Cell(name, "complete", 4, 2, 2, 0.5, 1.0, 1.0, 3, 400) for name in ("tv-rrs", "trv")]


def numbers(records: list[dict]) -> list[dict]:
    """A record without its wall time: what must repeat exactly."""
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def test_interrupted_sweep_resumes_without_recomputing_and_gives_the_same_numbers(tmp_path, monkeypatch):
    cells = _cells()
    whole = Store(tmp_path / "whole")
    run_cells(cells, whole)
    # An interrupted sweep: the first cell's records appended, then an append cut off mid-line by the kill.
    part = Store(tmp_path / "part")
    run_cells(cells[:1], part)
    finished = part.file(cells[0]).read_bytes()
    with open(part.file(cells[1]), "w") as f:
        f.write('{"cell": {"verifier": "trv", "topo')
    computed = []
    original = study.compute_seed
    monkeypatch.setattr(study, "compute_seed",
                        lambda cell, s, device=None: computed.append((cell.verifier, s)) or original(cell, s, device))
    part = Store(tmp_path / "part")  # a new run reads the store afresh
    run_cells(cells, part)
    assert computed == [("trv", 0), ("trv", 1), ("trv", 2)]  # finished seeds are never recomputed
    assert part.file(cells[0]).read_bytes() == finished  # append-only: what was written stays as it was
    assert part.file(cells[1]).read_text().count("\n") == 3  # the cut-off line is gone, three whole records
    for cell in cells:
        assert numbers(Store(tmp_path / "part").records(cell)) == numbers(whole.records(cell))
        assert summarise_cell(cell, part.records(cell)) == summarise_cell(cell, whole.records(cell))
    assert part.load(cells[0], 1)["seed"] == 1


def test_a_store_in_the_file_per_record_layout_is_converted_keeping_every_record(tmp_path):
    cells = _cells()
    new = Store(tmp_path / "new")
    run_cells(cells, new)
    old = tmp_path / "old"
    for cell in cells:  # the earlier layout: root/<cell key>/seed-<s>.json, one indented JSON file per record
        for record in new.records(cell):
            path = old / cell.key() / f"seed-{record['seed']}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record, indent=1) + "\n")
    converted = Store(old)
    assert all(converted.records(c) == new.records(c) for c in cells)
    assert sorted(p.name for p in old.iterdir()) == ["trv.jsonl", "tv-rrs.jsonl"]


@pytest.mark.slow
def test_parallel_workers_give_the_same_records(tmp_path):
    cells = _cells()
    serial, parallel = Store(tmp_path / "s"), Store(tmp_path / "p")
    run_cells(cells, serial, jobs=1)
    run_cells(cells, parallel, jobs=2)
    assert all(numbers(serial.records(c)) == numbers(parallel.records(c)) for c in cells)


@pytest.mark.slow
def test_a_dask_local_cluster_sweep_equals_the_local_process_sweep_record_for_record(tmp_path):
    pytest.importorskip("distributed")
    cells = _cells()
    local, dask = Store(tmp_path / "local"), Store(tmp_path / "dask")
    run_cells(cells, local, jobs=2)
    run_cells(cells, dask, jobs=2, scheduler="local")
    for cell in cells:
        assert numbers(dask.records(cell)) == numbers(local.records(cell)) and len(local.records(cell)) == 3
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), \
            pytest.raises(InvalidParameterError, match="scheduler"):
        run_cells(cells, Store(tmp_path / "none"), scheduler="tcp://127.0.0.1:9")


def test_expected_sample_tvd_against_simulation_and_the_bound():
    rng = np.random.default_rng(1)
    table = rng.dirichlet(np.ones(200))
    n = 500
    simulated = np.mean([0.5 * np.abs(rng.multinomial(n, table) / n - table).sum() for _ in range(4000)])
    exact = expected_sample_tvd(table, n)
    assert exact == pytest.approx(simulated, rel=0.01)
    assert exact <= tvd_upper_bound(200, n)
    # The issue's arithmetic: at V = 15, H = 4 no baseline of 10^6 samples can reach the ablations' 0.6217.
    bound = tvd_upper_bound(15**5, 10**6)
    assert bound == pytest.approx(0.4357, abs=1e-4) and bound < 0.6217


def test_first_chain_law_is_the_target_for_the_correct_rule_and_hand_checked_for_accept_all():
    from simulator.montecarlo.context_rows import ContextRows
    from simulator.models import RandomRationalModel
    from simulator.montecarlo.engine import target_table
    from specproof.reports.toy_study import first_chain_law

    model = RandomRationalModel(3, seed=2, zero_prob=0.0)
    rows = ContextRows(model, 2)
    target = target_table(model, 2, rows)
    assert np.abs(first_chain_law(rows, "none") - target).max() < 1e-15  # SpS along a chain is lossless
    # Accept-all: z1 ~ p, z2 ~ p(.|z1), z3 ~ q(.|z1 z2).
    law = first_chain_law(rows, "accept-all")
    p0, p1, q2 = model.p(()), model.p((1,)), model.q((1, 2))
    assert law[1 * 9 + 2 * 3 + 0] == pytest.approx(float(p0[1] * p1[2] * q2[0]), abs=1e-15)
    # The residual-q bug is lossy here, and the exact engine agrees on its TVD (TV-SpS with q residual =
    # bug-residual-q on a chain).
    from exact import certify
    from simulator.trees import make_topology
    cert = certify(model, FixedShape(make_topology("chain", 2)), "bug-residual-q", "float")
    ours = 0.5 * np.abs(first_chain_law(rows, "residual-q") - target).sum()
    assert ours == pytest.approx(float(cert.tvd), abs=1e-12) and ours > 0.01


def test_exact_columns_are_computed_once_and_kept_in_the_store(tmp_path, monkeypatch):
    from exact.recursions.token_dp import tv_expected_accepted
    from specproof.reports import toy_study as study_report
    from specproof.reports.toy_study import CellRow
    from simulator.trees import make_topology

    cell = _cells()[0]  # tv-rrs: a token rule the DP covers
    store = Store(tmp_path)
    run_cells([cell], store)
    expected = [tv_expected_accepted(cell.model(s), make_topology("complete", 2, 2), "tv-rrs") for s in range(3)]
    assert [r["exact_accept_len"] for r in store.records(cell)] == pytest.approx(expected, abs=1e-12)
    # A record written before the column existed is filled in once, then read back.
    old = store.load(cell, 1)
    del old["exact_accept_len"]
    store.save(old, cell, 1)
    summary = summarise_cell(cell, store.records(cell)).to_json()
    row = CellRow(4, "$H = 2$", "tv-rrs", cell, {}, summary)
    study_report._add_exact([row], store)
    assert store.load(cell, 1)["exact_accept_len"] == pytest.approx(expected[1], abs=1e-12)
    assert row.exact == pytest.approx(np.mean(expected), abs=1e-12)
    monkeypatch.setattr(study_report, "exact_accept_len", lambda *a: pytest.fail("recomputed"))
    again = CellRow(4, "$H = 2$", "tv-rrs", cell, {}, summary)
    study_report._add_exact([again], store)
    assert (again.exact, again.exact_z) == (row.exact, row.exact_z)


def test_the_code_fingerprint_reads_every_package(tmp_path, monkeypatch):
    """Cached report sections are keyed by it: a fingerprint of no files would never invalidate them."""
    import hashlib

    assert study.code_fingerprint() != hashlib.sha256().hexdigest()[:16]
    read = []
    original = study.Path.read_bytes
    monkeypatch.setattr(study.Path, "read_bytes", lambda self: read.append(self) or original(self))
    study.code_fingerprint.__wrapped__()  # past its cache
    assert {p.relative_to(study.Path(study.__file__).parents[1]).parts[0] for p in read} == {
        "simulator", "exact", "specproof"}


def test_the_study_sections_render_their_json_records():
    """The toy study's sections render from the JSON records the store caches (specproof.reports.toy_study), so a
    cached section and a fresh one read alike: an infinite z, the mixture's ε, a control the chi-square misses."""
    from specproof.reports import toy_study as study_report

    crosscheck = {"trials": 200, "rows": [
        {"method": "tv-rrs", "structure": "complete", "seed": 0, "exact": 1.25, "mc": 1.2, "se": 0.025, "z": -2.0},
        {"method": "trv", "structure": "complete", "seed": 0, "exact": 1.5, "mc": 1.0, "se": 0.0, "z": None}]}
    text = study_report.crosscheck_markdown(crosscheck)
    assert "200 trials per seed" in text and "Largest |z| over 2 comparisons: inf" in text
    assert "| tv-rrs | complete | 0 | 1.25000 | 1.20000 ± 0.02500 | -2.00 |" in text
    assert text.endswith("| trv | complete | 0 | 1.50000 | 1.00000 ± 0.00000 | ∞ |\n")
    small = {"vocab": 3, "depth": 2, "n": 1000, "rows": [
        {"control": "bug-x", "tree": "chain(H=2)", "cells": 27, "exact_tvd": 0.01, "paper_statistic": 0.05,
         "baseline": 0.04, "baseline_sd": 0.002, "paper_method_notices": True, "chi_square_detectable_tvd": 0.02}]}
    text = study_report.detection_markdown(small)
    assert "(V=3, depth 2;" in text and "N = 1,000 completed samples" in text
    assert "| `bug-x` | chain(H=2) | 0.0100 | 0.0500 | 0.0400 ± 0.0020 | yes | no (detects ≥ 0.0200) |" in text
    large = {"seeds": 1, "n": 1000, "epsilon": 0.125, "prefix": 2, "rows": [
        {"seed": 0, "control": "bug-residual-q", "exact_tvd": 0.3, "prefix_tvd": 0.2, "paper_statistic": 0.5,
         "baseline": 0.4, "baseline_sd": 0.001, "paper_method_notices": True, "chi_square_detectable_tvd": 0.1,
         "chi_square_detects": True, "prefix": 2},
        {"mixture_threshold": {"paper_method_min_tvd": 0.0375, "chi_square_min_tvd": 0.15}}]}
    text = study_report.paper_scale_detection_markdown(large)
    assert "model seeds 0..0; N = 1,000)" in text and "| 0.2000 (m=2) | yes (detects ≥ 0.1000) |" in text
    assert "exact TVD of **0.0375** (ε = 0.1250); our chi-square on the first 2 tokens" in text
