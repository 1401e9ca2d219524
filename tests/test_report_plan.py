"""The main job's default plan is small: ``specproof report`` alone sweeps Table 1's 22 cells × 3 model seeds ×
1,000 trials (66,000 trials in all) and attempts only token verification's exact-law recursions, the other rules'
noted as left to ``--full``; ``--full`` (the negative control) plans the paper's scale, every recursion and the
gap table (reports/optimality.md). The
plan is read off the command itself, its sweep and report writer replaced by recorders: nothing is computed.
Counts by hand: Table 1 has 7 methods on 3 structures, plus GBV on multi-chains only = 22 cells."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from specproof.cli import app as cli
from specproof.cli import sample_commands
from specproof.study import PAPER_TRIALS

TOKEN_VERIFICATION = {"tv-sps", "tv-rrs", "tv-kseq", "tv-gr"}


@pytest.fixture
def planned(monkeypatch, tmp_path):
    """The plan ``report ARGS`` hands its sweep and its report writer."""
    seen: dict = {}

    def sweep(cells, store, jobs, progress, scheduler, device):
        seen.update(cells=cells, jobs=jobs)

    def write(out, tables, store, seeds, trials, command, law_rules, tick):
        seen.update(tables=tables, seeds=seeds, trials=trials, law_rules=law_rules)

    monkeypatch.setattr(sample_commands, "run_cells", sweep)
    monkeypatch.setattr(sample_commands, "write_study_report", write)
    monkeypatch.setattr(sample_commands, "_certification_report", lambda *args: True)
    monkeypatch.setattr(sample_commands, "write_optimality_report",
                        lambda out, store, jobs, command, tick: seen.update(optimality=jobs) or True)

    def plan(*args: str) -> dict:
        seen.clear()
        out = CliRunner().invoke(cli.main, ["report", "--out", str(tmp_path / "out"), *args])
        assert out.exit_code == 0, out.output
        return dict(seen)

    return plan


def test_the_default_report_plans_table_1_at_66000_trials_and_token_verifications_laws(planned):
    plan = planned()
    cells = plan["cells"]
    assert len(cells) == 22 and plan["tables"] == (1,) and plan["jobs"] == 2  # both cores
    assert {c.seeds for c in cells} == {3} and {c.trials for c in cells} == {1000}
    assert sum(c.seeds * c.trials for c in cells) == 66_000
    assert {c.verifier for c in cells} == TOKEN_VERIFICATION - {"tv-sps"} | {"trv", "gbv", "lv-kseq", "lv-rrs", "lv-gr"}
    assert set(plan["law_rules"]) == TOKEN_VERIFICATION
    assert "optimality" not in plan  # the gap table is --full's alone


def test_full_plans_the_paper_scale_and_every_recursion(planned):
    plan = planned("--full")
    assert plan["law_rules"] is None and plan["tables"] == tuple(PAPER_TRIALS)
    assert len(plan["cells"]) > 22 and {c.seeds for c in plan["cells"]} == {20}
    assert sum(c.seeds * c.trials for c in plan["cells"]) > 100 * 66_000
    assert plan["optimality"] == 2  # the gap table, on the study's --jobs


def test_the_exact_laws_bar_ends_at_its_total_and_a_rule_left_out_is_noted(tmp_path):
    from specproof.reports.toy_exact import NOT_ATTEMPTED, add_exact_laws
    from specproof.reports.toy_study import CellRow
    from specproof.study import Cell, Store, run_cells, summarise_cell

    cells = [Cell("tv-sps", "chain", 3, 1, 1, 0.5, 1.0, 1.0, 2, 100), Cell("trv", "chain", 3, 1, 1, 0.5, 1.0, 1.0, 2, 100)]
    store = Store(tmp_path)
    run_cells(cells, store)

    def rows():
        return [CellRow(1, "chain", c.verifier, c, {}, summarise_cell(c, store.records(c)).to_json()) for c in cells]

    ticks: list[tuple[str, int]] = []
    quick = rows()
    add_exact_laws(quick, store, {"tv-sps"}, lambda stage, total: ticks.append((stage, total)))
    assert ticks == [("exact laws", 2)] * 2  # tv-sps's two seeds, of a total of two
    assert quick[0].law["seeds"] == 2 and quick[1].law is None and quick[1].law_note == NOT_ATTEMPTED
    ticks.clear()
    every = rows()
    add_exact_laws(every, store, None, lambda stage, total: ticks.append((stage, total)))
    assert ticks == [("exact laws", 2)] * 2  # now trv's two seeds; tv-sps's are kept in the store
    assert every[1].law["seeds"] == 2 and every[1].law_note is None
