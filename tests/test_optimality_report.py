"""reports/optimality.md (specproof/reports/optimality.py): the summaries are the hand-computed ones, a written
worst instance reproduces its optimum from its model table alone, and a rule that is lossy or above the ceiling
makes the report fail."""

from __future__ import annotations

from fractions import Fraction as F

import pytest

import specproof.reports.optimality as optimality
from exact.prove.optimum import optimum
from simulator.drafting.drafter_registry import make_drafter
from simulator.models import RandomRationalModel, TableModel, table_json
from simulator.trees import make_topology


def _record(shape: str, model: str, efficiencies: dict) -> dict:
    return {"instance": {"model": model, "seed": 0, "shape": shape, "scheme": "iid", "rho": 0.5, "tau": 1.0},
            "optimum": "1", "proved": True, "columns": 1, "seconds": 0.0,
            "rules": {name: {"expected_accepted": str(e), "lossless": True, "efficiency": str(e)}
                      for name, e in efficiencies.items()}}


def test_summaries_are_the_hand_computed_ones():
    # efficiencies 1, 3/4, 1/2: minimum 1/2, median 3/4, one of three at the optimum; a GR flow within its
    # tolerance of the optimum counts as at it, an exact rule 1e-9 below it does not
    records = [_record("chain", "random-rational", {"tv-sps": e, "lv-gr": 1 - F(1, 10**9), "tv-rrs": 1 - F(1, 10**9)})
               for e in (F(1), F(3, 4), F(1, 2))]
    s = optimality.summarise(records, "tv-sps")
    assert (s.instances, s.minimum, s.median, s.at_optimum) == (3, 0.5, 0.75, 1 / 3)
    assert optimality.summarise(records, "lv-gr").at_optimum == 1
    assert optimality.summarise(records, "tv-rrs").at_optimum == 0
    assert optimality.summarise(records, "trv").instances == 0
    assert optimality._best(records[2]) == (1 - F(1, 10**9), "tv-rrs")


def test_a_model_table_reproduces_the_instance():
    model = RandomRationalModel(3, 4, zero_prob=0.25)
    table = TableModel.from_json(table_json(model, 2))
    topology = make_topology("complete", 2, 2)
    assert optimum(table, make_drafter("iid", topology, table)).optimum == \
        optimum(model, make_drafter("iid", topology, model)).optimum


@pytest.fixture
def small(monkeypatch):
    """Two random pairs and no synthetic one: 14 instances, seconds."""
    monkeypatch.setattr(optimality, "RANDOM_SEEDS", (0, 1))
    monkeypatch.setattr(optimality, "SYNTHETIC", ())


def test_the_report_on_a_few_instances(small, tmp_path):
    out = tmp_path / "rep"
    assert optimality.write_optimality_report(out, tmp_path / "store", 1, "specproof report --full")
    text = (out / "optimality.md").read_text()
    assert "Optimum proved on 14 of 14 instances; lossless rules above it: 0; claiming rules found lossy: 0" in text
    # Block Verification is the optimum on every chain (its Theorem 2)
    assert "| `bv` | 2 | 1.0000 | 1.0000 | 100% |" in text
    case = out / "optimality_cases" / "worst-complete-iid.json"
    records = optimality.measure_all(tmp_path / "store")  # read back from the cache
    worst = min((r for r in records if r["instance"]["shape"] == "complete" and r["instance"]["scheme"] == "iid"),
                key=lambda r: optimality._best(r)[0])
    table = TableModel.from_file(case)
    assert str(optimum(table, make_drafter("iid", make_topology("complete", 2, 2), table)).optimum) == \
        worst["optimum"]
    assert (out / "optimality.png").stat().st_size > 0


def test_a_lossy_claiming_rule_fails_the_report(small, monkeypatch, tmp_path):
    monkeypatch.setattr(optimality, "SHAPES", {"chain": ("chain", 2, 1)})
    monkeypatch.setattr(optimality, "rules_for", lambda instance: ["bv", "bug-accept-all"])
    assert not optimality.write_optimality_report(tmp_path / "rep", tmp_path / "store", 1, "test")
    assert "claiming rules found lossy: 2" in (tmp_path / "rep" / "optimality.md").read_text()
