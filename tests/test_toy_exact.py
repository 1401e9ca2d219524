"""The toy study's exact columns (specproof.reports.toy_exact): certified seed by seed, checked by enumeration."""

from __future__ import annotations

import numpy as np
import pytest

from exact import certify
from simulator.drafting import FixedShape
from simulator.trees import make_topology
from specproof.reports import toy_exact
from specproof.reports.toy_study import CellRow
from specproof.study import Cell, Store, run_cells, summarise_cell


def _row(cell: Cell, store: Store) -> CellRow:
    return CellRow(4, f"$H = {cell.depth}$", cell.verifier, cell, {}, summarise_cell(cell, store.records(cell)).to_json())


def _enumerated(cell: Cell, seed: int):
    """The same seed certified by the other method: every draft tree and choice enumerated, in fractions."""
    return certify(cell.model(seed), FixedShape(make_topology(cell.topology, cell.depth, cell.branching)),
                   cell.verifier, "fraction")


@pytest.mark.slow
def test_exact_columns_equal_enumeration_and_reject_the_control(tmp_path):
    cells = [Cell(name, "complete", 3, 2, 2, 0.5, 1.0, 1.0, 2, 300) for name in ("tv-rrs", "trv", "bug-residual-q")]
    store = Store(tmp_path)
    run_cells(cells, store)
    rows = [_row(c, store) for c in cells]
    toy_exact.add_exact_laws(rows, store)
    for row in rows:
        enumerated = [_enumerated(row.cell, s) for s in range(2)]
        assert row.law["seeds"] == 2 and row.law["lossless"] == sum(c.lossless for c in enumerated)
        assert row.law["max_tvd"] == pytest.approx(max(float(c.tvd) for c in enumerated), abs=1e-12)
        laws = [r["exact_law"]["accept_len"] for r in store.records(row.cell)]
        assert laws == pytest.approx([float(c.expected_accepted) for c in enumerated], abs=1e-12)
    tv_rrs, trv, control = rows
    assert tv_rrs.law["lossless"] == trv.law["lossless"] == 2
    assert control.law["lossless"] == 0 and control.law["max_tvd"] > 0.01  # the same check rejects the control
    assert tv_rrs.law["max_dp_gap"] < 1e-12  # the dynamic programme's E[τ] (a third method) agrees
    assert trv.exact == pytest.approx(np.mean([_enumerated(trv.cell, s).expected_accepted for s in range(2)]))
    columns = toy_exact.exact_columns(rows, store)
    md, data = toy_exact.exact_markdown(columns), columns.to_json()
    assert data["certified_seed_cells"] == 6 and data["lossless"] == 4 and "| trv | – | – | (2, 2) |" in md


def test_a_cell_past_the_limit_stays_monte_carlo_and_blocks_larger_cells_once(tmp_path, monkeypatch):
    small, large, larger = (Cell("trv", "complete", 3, depth, branching, 0.5, 1.0, 1.0, 1, 200)
                            for depth, branching in ((1, 2), (2, 2), (2, 3)))
    store = Store(tmp_path)
    run_cells([small, large, larger], store)
    monkeypatch.setattr(toy_exact, "LAW_EXECUTIONS", 200)  # complete(2, 1) at V = 3 takes fewer; (2, 2) more
    rows = [_row(c, store) for c in (larger, large, small)]
    toy_exact.add_exact_laws(rows, store)
    assert rows[2].law["lossless"] == 1
    assert rows[1].law is None and "passes 200 executions" in rows[1].law_note
    assert rows[0].law is None and rows[0].law_note.startswith("larger than H = 2, b = 2")
    assert "exact_law" not in store.load(larger, 0)  # never attempted
    monkeypatch.setattr(toy_exact, "exact_law_summary", lambda *a: pytest.fail("recomputed"))
    again = [_row(c, store) for c in (large, small)]
    toy_exact.add_exact_laws(again, store)  # the failure and the result are read back from the store
    assert again[0].law_note == rows[1].law_note and again[1].law == rows[2].law


def test_seed_z_of_a_constant_sample_is_zero_or_infinite_never_a_division_by_zero():
    assert toy_exact.seed_z(2.5, 2.0, 0.25, 100) == 2.0  # (2.5 − 2)/0.25, hand-computed
    assert toy_exact.seed_z(1.0, 1.0 + 1e-6, 0.0, 100) == 0.0  # 1e-6·100 < 0.01: consistent
    assert toy_exact.seed_z(1.0, 1.5, 0.0, 100) == -np.inf  # the control: a constant sample the law contradicts
    assert toy_exact.finite(np.inf) is None and toy_exact.finite(1.5) == 1.5


def test_a_seed_with_a_constant_sample_gets_exact_columns(tmp_path):
    # a chain of depth 1 with two trials: some seeds accept the same number of tokens both times (SE 0)
    cells = [Cell("tv-sps", "chain", 3, 1, 1, 0.5, 1.0, 1.0, 6, 2)]
    store = Store(tmp_path)
    run_cells(cells, store)
    assert any(rec["accept_len_se"] == 0 for rec in store.records(cells[0]))
    row = _row(cells[0], store)
    toy_exact.add_exact_laws([row], store)
    assert row.law["lossless"] == 6 and row.exact_z is not None
