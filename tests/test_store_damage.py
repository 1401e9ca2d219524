"""A damaged study store is named, never read as results: damaged lines are errors naming the line, damaged files
(a record file of random bytes, a cache entry of the wrong type, random bytes or a NaN) warnings naming the file,
and recomputed. The negative control: an intact store is reused, nothing recomputed."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from simulator.errors import StoreError
from specproof import study
from specproof.study import Cell, Store, run_cells

CELL = Cell("tv-sps", "chain", 3, 1, 1, 0.5, 1.0, 1.0, 2, 100)
VALUE = {"markdown": "| a |", "rows": [1, 2]}


class Counting:
    """A compute function that counts its calls."""

    def __init__(self, value: object) -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> object:
        self.calls += 1
        return self.value


def _entry(store: Store) -> object:
    """The one cache file's path after a first :meth:`Store.cached` call."""
    (path,) = (store.root / "cache").iterdir()
    return path


def test_an_intact_cache_entry_is_reused_without_a_warning(tmp_path):
    warnings: list[str] = []
    store = Store(tmp_path, warn=warnings.append)
    compute = Counting(VALUE)
    assert store.cached("table", {"x": 1}, compute) == VALUE
    assert Store(tmp_path, warn=warnings.append).cached("table", {"x": 1}, compute) == VALUE
    assert compute.calls == 1 and warnings == []


@pytest.mark.parametrize("damage", [b"[1, 2, 3]", os.urandom(64) + b"\xff", b'{"sha256": "0", "value": NaN}',
                                    json.dumps({"sha256": "0", "value": {"markdown": "changed", "rows": []}}).encode()],
                         ids=["wrong-type", "random-bytes", "nan", "checksum"])
def test_a_damaged_cache_entry_is_named_and_recomputed(tmp_path, damage):
    store = Store(tmp_path, warn=lambda message: None)
    store.cached("table", {"x": 1}, Counting(VALUE))
    path = _entry(store)
    path.write_bytes(damage)
    warnings: list[str] = []
    compute = Counting(VALUE)
    assert Store(tmp_path, warn=warnings.append).cached("table", {"x": 1}, compute) == VALUE
    assert compute.calls == 1
    assert len(warnings) == 1 and str(path) in warnings[0] and "damaged" in warnings[0]
    again = Counting(VALUE)  # rewritten whole: the next run reads it back
    assert Store(tmp_path, warn=warnings.append).cached("table", {"x": 1}, again) == VALUE and again.calls == 0


def test_an_intact_store_is_reused_nothing_recomputed(tmp_path, monkeypatch):
    run_cells([CELL], Store(tmp_path))
    before = Store(tmp_path).file(CELL).read_bytes()
    calls = []
    monkeypatch.setattr(study, "compute_seed", lambda *args: calls.append(args))
    run_cells([CELL], Store(tmp_path, warn=lambda message: pytest.fail(message)))
    assert calls == [] and Store(tmp_path).file(CELL).read_bytes() == before


def test_a_record_file_of_random_bytes_is_named_set_aside_and_recomputed(tmp_path):
    store = Store(tmp_path)
    run_cells([CELL], store)
    good = [store.load(CELL, s) for s in range(CELL.seeds)]
    garbage = b"\x93\xff\x00" + os.urandom(200)
    store.file(CELL).write_bytes(garbage)
    warnings: list[str] = []
    damaged = Store(tmp_path, warn=warnings.append)
    assert damaged.load(CELL, 0) is None  # never read as a record
    assert len(warnings) == 1 and str(store.file(CELL)) in warnings[0] and "not UTF-8" in warnings[0]
    run_cells([CELL], damaged)
    assert (tmp_path / "tv-sps.jsonl.damaged").read_bytes() == garbage  # the user's file kept, out of the way
    fresh = Store(tmp_path, warn=lambda message: pytest.fail(message))
    assert [{k: r[k] for k in r if k != "seconds"} for r in (fresh.load(CELL, s) for s in range(CELL.seeds))] == \
        [{k: r[k] for k in r if k != "seconds"} for r in good]  # recomputed: the same numbers


@pytest.mark.parametrize("field,value,words", [("accept_len_mean", "NaN", "NaN is not a number"),
                                               ("tvd", "Infinity", "Infinity is not a number"),
                                               ("accept_len_se", "1e999", "not finite"),
                                               ("accept_len_mean", '"2.5"', "accept_len_mean not a number")])
def test_a_record_with_a_non_finite_or_non_number_is_damaged_and_named(tmp_path, field, value, words):
    store = Store(tmp_path)
    run_cells([replace(CELL, seeds=1)], store)
    line = store.file(CELL).read_text().rstrip("\n")
    record = json.loads(line)
    planted = json.dumps({**record, field: 123456.5}).replace("123456.5", value)
    store.file(CELL).write_text(planted + "\n")
    with pytest.raises(StoreError) as err:
        Store(tmp_path).load(CELL, 0)
    assert f"{store.file(CELL)}:1" in err.value.message and words in err.value.message
    assert "delete that line" in err.value.message
    store.file(CELL).write_text("")  # the recovery the message names: the sweep recomputes the record
    run_cells([replace(CELL, seeds=1)], Store(tmp_path))
    assert Store(tmp_path).load(CELL, 0)["accept_len_mean"] == record["accept_len_mean"]


def test_a_record_line_of_the_wrong_json_type_is_named(tmp_path):
    store = Store(tmp_path)
    store.file(CELL).write_text("[1, 2, 3]\n")
    with pytest.raises(StoreError) as err:
        store.load(CELL, 0)
    assert f"{store.file(CELL)}:1 is unreadable" in err.value.message
