"""The layer_verification.txt toy study as a grid of Monte Carlo cells, run through a resumable store.

A :class:`Cell` is one configuration (verifier, tree, synthetic model parameters, model seeds, trials per seed).
The paper's tables (Table 1 and the ablations of Tables 4–15, transcribed with their source lines in
``data/layer_verification_toy.json``) map to cells by :func:`paper_cells`; equal configurations in different
tables share their cell. :class:`Store` keeps one JSON record per (cell, model seed), written atomically when
that seed finishes, so an interrupted sweep resumes where it stopped and a finished seed is never recomputed;
records depend only on the cell and the seed (their wall time ``seconds`` aside), so a resumed sweep gives the
same numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from importlib import resources
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from .batched import ContextRows
from .drafting import FixedShape
from .errors import StoreError
from .models import SyntheticModel
from .montecarlo import MCSummary, SeedResult, run_seed, summarise
from .statistics import ChiSquare
from .trees import make_topology
from .verifiers import VERIFIERS

#: The paper's base configuration (docs/models.md) and its structures.
BASE = {"vocab": 15, "depth": 4, "branching": 2, "rho": 0.5, "tau_p": 1.0, "tau_q": 1.0}
STRUCTURES = {"Multi-Chain": "multi-chain", "Tapered-Tree": "tapered", "Complete-Tree": "complete"}
#: Ablation tables: the structure and the factor each varies (layer_verification.txt App. G).
ABLATIONS = {
    4: ("complete", "depth"), 5: ("tapered", "depth"), 6: ("multi-chain", "depth"),
    7: ("complete", "branching"), 8: ("tapered", "branching"), 9: ("multi-chain", "branching"),
    10: ("complete", "rho"), 11: ("tapered", "rho"), 12: ("multi-chain", "rho"),
    13: ("complete", "temperature"), 14: ("tapered", "temperature"), 15: ("multi-chain", "temperature"),
}
#: Trials per seed: Table 1 at 10^6; the ablations at 10^5 (what their baseline TVDs imply; see the report).
PAPER_TRIALS = {1: 10**6, **{t: 10**5 for t in ABLATIONS}}
PAPER_SEEDS = 20


@dataclass(frozen=True)
class Cell:
    verifier: str
    topology: str
    vocab: int
    depth: int
    branching: int
    rho: float
    tau_p: float
    tau_q: float
    seeds: int
    trials: int

    def key(self) -> str:
        """A file-name-safe identifier of everything but the number of seeds (records are per seed)."""
        return (f"{self.verifier}_{self.topology}_V{self.vocab}_H{self.depth}_b{self.branching}_rho{self.rho:g}"
                f"_tp{self.tau_p:g}_tq{self.tau_q:g}_N{self.trials}")

    def model(self, seed: int) -> SyntheticModel:
        return SyntheticModel(self.vocab, self.rho, self.tau_p, self.tau_q, seed)


def paper_tables() -> dict:
    """The transcribed tables: ``{"Table n": {"title", "source_line", "columns", "rows": {method: [...]}}}``."""
    text = resources.files("simulator").joinpath("data/layer_verification_toy.json").read_text()
    return json.loads(text)


def _column_config(table: int, column: str) -> dict:
    """The configuration of one column of a paper table (its header, e.g. ``$H = 3$``)."""
    if table == 1:
        return {**BASE, "topology": STRUCTURES[column]}
    structure, factor = ABLATIONS[table]
    numbers = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", column)]
    config = {**BASE, "topology": structure}
    if factor == "temperature":
        config["tau_p"], config["tau_q"] = numbers
    elif factor == "rho":
        config["rho"] = numbers[0]
    else:
        config[factor] = int(numbers[0])
    return config


def paper_cells(table: int, seeds: int = PAPER_SEEDS, trials: int | None = None) -> Iterator[tuple[str, int, Cell]]:
    """``(method, column index, cell)`` for every method row (not the baseline) of a paper table."""
    spec = paper_tables()[f"Table {table}"]
    for method, values in spec["rows"].items():
        if method == "baseline":
            continue
        for index, column in enumerate(spec["columns"]):
            if values[index]["accept_len"] is None:
                continue
            config = _column_config(table, column)
            yield method, index, Cell(method, config["topology"], config["vocab"], config["depth"],
                                      config["branching"], config["rho"], config["tau_p"], config["tau_q"],
                                      seeds, trials or PAPER_TRIALS[table])


def model_key(cell: Cell, seed: int) -> tuple:
    """What a cell's model rows depend on: cells with equal keys share :class:`ContextRows`."""
    return cell.vocab, cell.rho, cell.tau_p, cell.tau_q, cell.depth, seed


@lru_cache(maxsize=2)
def _rows(vocab: int, rho: float, tau_p: float, tau_q: float, depth: int, seed: int) -> ContextRows:
    return ContextRows(SyntheticModel(vocab, rho, tau_p, tau_q, seed), depth)


def exact_accept_len(cell: Cell, seed: int) -> float | None:
    """The exact ``E[τ]`` of a token-verification cell for one model seed (:mod:`exact.dp`), else ``None``."""
    from exact.dp import DP_RULES, tv_expected_accepted

    if cell.verifier not in DP_RULES:
        return None
    shape = make_topology(cell.topology, cell.depth, cell.branching)
    return tv_expected_accepted(cell.model(seed), shape, cell.verifier, _rows(*model_key(cell, seed)))


def compute_seed(cell: Cell, seed: int) -> dict:
    """One model seed of a cell, as a store record (a top-level function so worker processes can run it); the
    record keeps the wall time of its Monte Carlo (``seconds``, set-up shared with earlier cells of the same model
    aside) and, for token verification, the exact ``E[τ]`` (``exact_accept_len``)."""
    start = time.perf_counter()
    shape = make_topology(cell.topology, cell.depth, cell.branching)
    rows = _rows(*model_key(cell, seed))
    result = run_seed(cell.model(seed), FixedShape(shape), cell.verifier, VERIFIERS[cell.verifier].fn, seed,
                      cell.trials, rows=rows)
    seconds = time.perf_counter() - start
    record = {"cell": asdict(replace(cell, seeds=0)), "seed": seed, **_result_json(result), "seconds": seconds}
    exact = exact_accept_len(cell, seed)
    return record if exact is None else {**record, "exact_accept_len": exact}


def _result_json(result: SeedResult) -> dict:
    return asdict(result)  # the chi-square test nests as a dict


def summarise_cell(cell: Cell, records: list[dict]) -> MCSummary:
    """The cross-seed summary of a cell's stored records (as ``specproof mc`` prints)."""
    results = [SeedResult(**{**{k: r[k] for k in SeedResult.__dataclass_fields__ if k != "test"},
                             "test": ChiSquare(**r["test"])}) for r in records]
    return summarise(cell.verifier, results, cell.vocab, cell.depth)


#: The fields a seed record must hold for a summary (:func:`summarise_cell`); a record without one is incomplete.
RECORD_FIELDS = ("cell", *SeedResult.__dataclass_fields__)
T = TypeVar("T")


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of specproof's own source and data files: cached results are valid for this code only."""
    digest = hashlib.sha256()
    base = Path(__file__).resolve().parents[1]
    for package in ("simulator", "exact"):
        for path in sorted((base / package).rglob("*")):
            if path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(base)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)  # atomic: a killed sweep never leaves half a record


class Store:
    """One JSON file per (cell, seed) under ``root/<cell key>/seed-<s>.json``; report sections computed once per
    configuration and code version under ``root/cache/``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, cell: Cell, seed: int) -> Path:
        return self.root / cell.key() / f"seed-{seed}.json"

    def load(self, cell: Cell, seed: int) -> dict | None:
        """The record of (cell, seed), ``None`` if there is none; :class:`StoreError` naming the file when it is
        unreadable or incomplete."""
        path = self.path(cell, seed)
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise StoreError("store", f"{path} is unreadable ({err}); delete it and re-run the same command: the "
                                      "sweep recomputes that record") from None
        missing = [f for f in RECORD_FIELDS if not isinstance(record, dict) or f not in record]
        if not missing and not isinstance(record["test"], dict):
            missing = ["test"]
        elif not missing:
            missing = [f"test.{f}" for f in ChiSquare.__dataclass_fields__ if f not in record["test"]]
        if missing:
            raise StoreError("store", f"{path} is incomplete (no {', '.join(missing)}); delete it and re-run the same "
                                      "command: the sweep recomputes that record")
        return record

    def save(self, record: dict, cell: Cell, seed: int) -> None:
        _atomic_write(self.path(cell, seed), json.dumps(record, indent=1, allow_nan=False) + "\n")

    def cached(self, name: str, params: dict, compute: Callable[[], T]) -> T:
        """``compute()`` (JSON data) once per ``name``, ``params`` and code version; later calls read it back."""
        key = hashlib.sha256(json.dumps([name, params, code_fingerprint()], sort_keys=True).encode()).hexdigest()[:16]
        path = self.root / "cache" / f"{name}-{key}.json"
        if path.exists():
            try:
                return json.loads(path.read_text())
            except ValueError:
                pass  # a damaged cache entry is recomputed
        value = compute()
        _atomic_write(path, json.dumps(value, indent=1, allow_nan=False) + "\n")
        return value

    def records(self, cell: Cell) -> list[dict]:
        return [r for r in (self.load(cell, s) for s in range(cell.seeds)) if r is not None]


#: Environment variables that set the BLAS and OpenMP thread pools of a process as its numpy loads.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@contextmanager
def _one_thread_each() -> Iterator[None]:
    """Worker processes started inside get one BLAS thread each (unless the user set otherwise): the workers
    already keep every core busy, and a BLAS pool per worker would oversubscribe them (GR's solver multiplies
    matrices of a thousand instances at a time). The workers are spawned, so they read this as numpy loads."""
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_cells(cells: list[Cell], store: Store, jobs: int = 1,
              progress: Callable[[Cell, int, int], None] | None = None) -> None:
    """Compute every missing (cell, seed) record; ``progress(cell, seed, trials)`` after each one."""
    todo = [(cell, s) for cell in dict.fromkeys(cells) for s in range(cell.seeds) if store.load(cell, s) is None]
    # Seed by seed, so that a sweep stopped early leaves every cell with about as many seeds; within a seed the
    # same model next to each other, so a worker reuses the model's rows (see _rows).
    todo.sort(key=lambda item: (item[1], model_key(*item)))
    if jobs <= 1:
        for cell, s in todo:
            store.save(compute_seed(cell, s), cell, s)
            if progress is not None:
                progress(cell, s, cell.trials)
        return
    with _one_thread_each(), ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(compute_seed, cell, s): (cell, s) for cell, s in todo}
        for future in as_completed(futures):
            cell, s = futures[future]
            store.save(future.result(), cell, s)
            if progress is not None:
                progress(cell, s, cell.trials)

