"""Layer Verification's toy study (Cha et al., AdaptFM at ICML 2026) as a grid of Monte Carlo cells
(:func:`paper_cells`), run through a resumable store (:class:`Store`, :func:`run_cells`)."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from importlib import resources
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from simulator.montecarlo.context_rows import ContextRows
from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError, StoreError
from simulator.models import SyntheticModel
from simulator.montecarlo.engine import MCSummary, SeedResult, run_seed, summarise
from simulator.montecarlo.statistics import ChiSquare
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from simulator.workers import pool_options, stop_pool

try:
    import fcntl
except ImportError:  # not POSIX: stores are not locked
    fcntl = None  # type: ignore[assignment]

#: The paper's base configuration (docs/models.md) and its structures.
BASE = {"vocab": 15, "depth": 4, "branching": 2, "rho": 0.5, "tau_p": 1.0, "tau_q": 1.0}
STRUCTURES = {"Multi-Chain": "multi-chain", "Tapered-Tree": "tapered", "Complete-Tree": "complete"}
#: Ablation tables: the structure and the factor each varies (Cha et al. 2026, App. G).
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
    """``(method, column index, cell)`` for every method row (not the baseline) of a paper table.

    The paper's Tables 1 and 4–15 are transcribed with their source lines in
    ``simulator/data/layer_verification_toy.json``. Records depend only on the cell and seed, so a resumed sweep,
    local or on Dask (:func:`run_cells`), gives the same numbers; one sweep at a time holds a store's lock
    (:meth:`Store.lock`).
    """
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


def ablation_cells(seeds: int = PAPER_SEEDS) -> list[Cell]:
    """The ablation suite's distinct cells (Tables 4–15; a configuration in several tables once), by model
    configuration (:func:`model_key`), so that cells sharing a model's rows come together."""
    cells = list(dict.fromkeys(c for t in ABLATIONS for _, _, c in paper_cells(t, seeds)))
    return sorted(cells, key=lambda c: model_key(c, 0))


def model_key(cell: Cell, seed: int) -> tuple:
    """What a cell's model rows depend on: cells with equal keys share :class:`ContextRows`."""
    return cell.vocab, cell.rho, cell.tau_p, cell.tau_q, cell.depth, seed


@lru_cache(maxsize=2)
def _rows(vocab: int, rho: float, tau_p: float, tau_q: float, depth: int, seed: int) -> ContextRows:
    return ContextRows(SyntheticModel(vocab, rho, tau_p, tau_q, seed), depth)


def exact_accept_len(cell: Cell, seed: int) -> float | None:
    """The exact ``E[τ]`` of a token-verification cell for one model seed (:mod:`exact.recursions.token_dp`), else
    ``None``."""
    from exact.recursions.token_dp import DP_RULES, tv_expected_accepted

    if cell.verifier not in DP_RULES:
        return None
    shape = make_topology(cell.topology, cell.depth, cell.branching)
    return tv_expected_accepted(cell.model(seed), shape, cell.verifier, _rows(*model_key(cell, seed)))


def exact_law_summary(cell: Cell, seed: int) -> dict:
    """One model seed of a cell certified by the rule's exact recursion over ``Σ^(H+1)`` (``certify --method
    recursion``, float64: ``VerifierSpec.exact_law``): verdict, TVD to ``q^(H+1)``, its tolerance, ``E[τ]`` and the
    recursion's sub-problems. Under the ambient execution limit (:func:`simulator.limits.limits`); past it,
    :class:`simulator.errors.ExecutionLimitError`."""
    from exact.certificate import certify

    shape = FixedShape(make_topology(cell.topology, cell.depth, cell.branching))
    cert = certify(cell.model(seed), shape, cell.verifier, "float", method="recursion")
    return {"lossless": cert.lossless, "tvd": float(cert.tvd), "tolerance": float(cert.tolerance),
            "accept_len": float(cert.expected_accepted), "subproblems": cert.executions}


def compute_seed(cell: Cell, seed: int, device: str | None = None, workers: int = 1) -> dict:
    """One model seed of a cell, as a store record (a top-level function so worker processes can run it); the
    record keeps the wall time of its Monte Carlo (``seconds``, set-up shared with earlier cells of the same model
    aside) and, for token verification, the exact ``E[τ]`` (``exact_accept_len``). ``device``: the batched rounds
    on that torch device (the same numbers), with its share of the cores among ``workers`` processes on this
    machine."""
    import scipy.optimize, scipy.special  # noqa: E401,F401  loaded on first use: not in the timed record
    start = time.perf_counter()
    shape = make_topology(cell.topology, cell.depth, cell.branching)
    rows = _rows(*model_key(cell, seed))
    result = run_seed(cell.model(seed), FixedShape(shape), cell.verifier, VERIFIERS[cell.verifier].fn, seed,
                      cell.trials, rows=rows, device=device, workers=workers)
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
    """A hash of specproof's own source and data files (its three packages): cached results are valid for this code
    only."""
    digest = hashlib.sha256()
    base = Path(__file__).resolve().parents[1]
    for package in ("simulator", "exact", "specproof"):
        for path in sorted((base / package).rglob("*")):
            if path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(base)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def strict_json(text: str | bytes) -> object:
    """``json.loads`` refusing what no record of ours holds: NaN, infinities and numbers past float's range
    (``1e999``), which Python's JSON reader accepts (records are written with ``allow_nan=False``).
    :class:`ValueError` (``UnicodeDecodeError`` included) for anything that is not such JSON."""
    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"the number {text} is not finite")
        return value

    def refuse(name: str) -> float:
        raise ValueError(f"{name} is not a number a record can hold")

    return json.loads(text, parse_float=finite, parse_constant=refuse)


def _warn(message: str) -> None:
    print(f"warning: store: {message}", file=sys.stderr)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)  # atomic: a killed run never leaves half a cache entry


class Store:
    """The sweep's records: one append-only JSON Lines file per method, ``root/<verifier>.jsonl``, a line per
    (cell, model seed); report sections computed once per configuration and code version under ``root/cache/``.

    A record is appended in one ``write`` on a file opened for appending, when its seed finishes, by the process
    that runs the sweep (workers hand records back). A sweep killed mid-append leaves at most a partial last
    line: it is not a record, and the next append cuts it off. When a (cell, seed) has several lines the last one
    holds (a record rewritten with a new field). A store in the earlier layout (``root/<cell>/seed-<s>.json``,
    a file per record) is converted on first use, every record kept as it was.

    Whatever appends holds the store's lock (:meth:`lock`): a sweep for its whole run, any other append for that
    append. Two sweeps on one store would each compute every missing record and append it, doubling the store;
    the second refuses instead, naming the lock and the process holding it. Reading takes no lock (a line being
    appended is not yet a record), nor does :meth:`cached` (each entry is written whole, by a rename).

    Damage is named, never read as results. A damaged line (not JSON, not a record, a non-finite number) is a
    :class:`StoreError` naming the file and line. A damaged file (a ``.jsonl`` file that is not UTF-8 text, a
    cache entry that does not parse or whose content does not match its checksum) is reported through ``warn``,
    naming the file, and recomputed: its records count as missing, and the file is moved aside to
    ``<name>.damaged`` before the first record is appended to it.
    """

    def __init__(self, root: str | Path, warn: Callable[[str], None] = _warn) -> None:
        self.root = Path(root)
        self.warn = warn
        self._damaged: set[Path] = set()
        self._index: dict[tuple[str, int], tuple[dict, str]] | None = None
        self._lock_fd: int | None = None
        self._lock_depth = 0

    @property
    def lock_file(self) -> Path:
        return self.root / LOCK_FILE

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's exclusive lock in the block (re-entrant: nested blocks of this object share it).

        An ``flock`` on :data:`LOCK_FILE` in the store's root, which holds the holder's process id. It is not
        waited for: if another process holds it, :class:`StoreError` names the file and that process at once.
        The holder removes the file as it releases the lock; if the holder dies instead (``kill -9`` included),
        the kernel releases the lock and the file stays, naming a process that no longer holds it. Worker
        processes do not inherit it."""
        if self._lock_depth == 0:
            self._lock_fd = _acquire(self.lock_file)
        self._lock_depth += 1
        try:
            yield
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0 and self._lock_fd is not None:
                self.lock_file.unlink(missing_ok=True)  # still held: a process waiting on this file checks it
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = None

    def file(self, cell: Cell) -> Path:
        return self.root / f"{cell.verifier}.jsonl"

    def _records(self) -> dict[tuple[str, int], tuple[dict, str]]:
        """``(cell key, seed) -> (record, where)``, read once (``where``: ``file:line`` for messages)."""
        if self._index is None:
            self._convert_legacy()
            self._index = {}
            for path in sorted(self.root.glob("*.jsonl")):
                try:
                    lines = path.read_bytes().decode().split("\n")
                except UnicodeDecodeError as err:
                    self._damaged.add(path)
                    self.warn(f"{path} is not a store file (not UTF-8 text: {err.reason} at byte {err.start}); "
                              f"its records are recomputed, and it is moved aside to {_aside(path).name}")
                    continue
                for number, line in enumerate(lines[:-1], start=1):  # lines[-1]: "" or a cut-off append
                    where = f"{path}:{number}"
                    try:
                        record = strict_json(line)
                        key = (Cell(**{**record["cell"], "seeds": 0}).key(), int(record["seed"]))
                    except (ValueError, TypeError, KeyError) as err:
                        raise StoreError("store", f"{where} is unreadable ({err}); delete that line and re-run "
                                                  "the same command: the sweep recomputes that record") from None
                    self._index[key] = (record, where)
        return self._index

    def load(self, cell: Cell, seed: int) -> dict | None:
        """The record of (cell, seed), ``None`` if there is none; :class:`StoreError` naming the file and line when
        it is unreadable or incomplete."""
        found = self._records().get((cell.key(), seed))
        if found is None:
            return None
        record, where = found
        missing = [f for f in RECORD_FIELDS if f not in record]
        if not missing and not isinstance(record["test"], dict):
            missing = ["test"]
        elif not missing:
            missing = [f"test.{f}" for f in ChiSquare.__dataclass_fields__ if f not in record["test"]]
        if missing:
            raise StoreError("store", f"{where} is incomplete (no {', '.join(missing)}); delete that line and re-run "
                                      "the same command: the sweep recomputes that record")
        wrong = [f for f in NUMBER_FIELDS if not _is_number(record[f])] + \
            [f"test.{f}" for f in ChiSquare.__dataclass_fields__ if not _is_number(record["test"][f])]
        if wrong:
            raise StoreError("store", f"{where} is damaged ({', '.join(wrong)} not a number); delete that line and "
                                      "re-run the same command: the sweep recomputes that record")
        return record

    def save(self, record: dict, cell: Cell, seed: int) -> None:
        """Append ``record`` for (cell, seed) (it must carry its ``cell`` and ``seed``)."""
        path = self.file(cell)
        line = json.dumps(record, allow_nan=False) + "\n"
        self._records()  # read before appending: a cut-off last line is dropped, not glued to this one
        with self.lock():
            if path in self._damaged:
                os.replace(path, _aside(path))
                self._damaged.discard(path)
            _cut_partial_line(path)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        self._records()[(cell.key(), seed)] = (record, f"{path}:end")

    def cached(self, name: str, params: dict, compute: Callable[[], T]) -> T:
        """``compute()`` (JSON data) once per ``name``, ``params`` and code version; later calls read it back
        (:meth:`lookup`, :meth:`put`)."""
        found, value = self.lookup(name, params)
        if not found:
            value = compute()
            self.put(name, params, value)
        return value

    def _entry(self, name: str, params: dict) -> Path:
        key = hashlib.sha256(json.dumps([name, params, code_fingerprint()], sort_keys=True).encode()).hexdigest()[:16]
        return self.root / "cache" / f"{name}-{key}.json"

    def lookup(self, name: str, params: dict) -> tuple[bool, object]:
        """``(True, value)`` where an entry for ``name``, ``params`` and this code version is stored, else
        ``(False, None)``.

        An entry is ``{"sha256": …, "value": …}``, the hash of the value's canonical JSON: an entry that does not
        parse, or whose value does not match its hash (damage, a hand edit), is named through ``warn`` and counts as
        missing."""
        path = self._entry(name, params)
        if not path.exists():
            return False, None
        try:
            entry = strict_json(path.read_bytes())
            if isinstance(entry, dict) and entry.keys() == {"sha256", "value"} and \
                    entry["sha256"] == _checksum(entry["value"]):
                return True, entry["value"]
            why = "its content does not match its checksum"
        except ValueError as err:  # UnicodeDecodeError included
            why = f"it is not a cache entry ({err})"
        self.warn(f"{path} is damaged ({why}): recomputing it")
        return False, None

    def put(self, name: str, params: dict, value: object) -> None:
        """Store ``value`` (JSON data) for ``name``, ``params`` and this code version, written whole by a rename."""
        entry = {"sha256": _checksum(value), "value": value}
        _atomic_write(self._entry(name, params), json.dumps(entry, indent=1, allow_nan=False) + "\n")

    def records(self, cell: Cell) -> list[dict]:
        return [r for r in (self.load(cell, s) for s in range(cell.seeds)) if r is not None]

    def _convert_legacy(self) -> None:
        """Append the records of the earlier layout (a JSON file per record) in cell and seed order, then remove
        their files; a record file that does not parse is left where it is, for the user to see."""
        legacy = sorted(self.root.glob("*/seed-*.json"), key=lambda p: (p.parent.name, int(p.stem[5:])))
        if not legacy:
            return
        with self.lock():
            for path in legacy:
                try:
                    record = json.loads(path.read_text())
                    cell = Cell(**{**record["cell"], "seeds": 0})
                except (ValueError, TypeError, KeyError):
                    continue
                _cut_partial_line(self.file(cell))
                with open(self.file(cell), "a") as out:
                    out.write(json.dumps(record, allow_nan=False) + "\n")
                path.unlink()
            for folder in {p.parent for p in legacy}:
                if folder.exists() and not any(folder.iterdir()):
                    folder.rmdir()


def _checksum(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, allow_nan=False).encode()).hexdigest()


def _aside(path: Path) -> Path:
    """Where a damaged store file is moved before records are appended in its place."""
    return path.with_name(path.name + ".damaged")


#: The numeric fields of a record (:class:`SeedResult`'s, the chi-square test aside).
NUMBER_FIELDS = tuple(f for f in SeedResult.__dataclass_fields__ if f != "test")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: The lock file in a store's root while a process holds its lock (:meth:`Store.lock`): that process's id.
LOCK_FILE = ".sweep.lock"


def _acquire(path: Path) -> int | None:
    """An open descriptor of ``path`` holding its exclusive ``flock``, the holder's pid written in it; ``None``
    where there is no ``flock`` (not POSIX). :class:`StoreError` if another process holds it.

    A holder removes the file as it lets go, so the file locked may have been removed meanwhile: the lock
    counts only while ``path`` is still that file; otherwise it is taken again on the file now there."""
    if fcntl is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inheritable: spawned workers do not hold the lock
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StoreError("store", f"cannot lock {path}: {err}") from None
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise StoreError("store", f"{path} is held by {who}, which is writing this store (a sweep): wait for "
                                      "it to finish (or stop it), or give this run another --store") from None
        try:
            current = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _cut_partial_line(path: Path) -> None:
    """Drop a cut-off last line (a sweep killed mid-append) so that the next record starts on its own line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        data = f.seek(0) or f.read()
        f.truncate(data.rfind(b"\n") + 1)


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
              progress: Callable[[Cell, int, int], None] | None = None, scheduler: str | None = None,
              device: str | None = None) -> None:
    """Compute every missing (cell, seed) record; ``progress(cell, seed, trials)`` after each one; ``device``: a
    torch device for the batched rounds (:func:`compute_seed`).

    ``jobs`` local worker processes, or with ``scheduler`` a Dask cluster: ``"local"`` starts a
    ``dask.distributed`` LocalCluster of ``jobs`` single-threaded worker processes, anything else is the address
    of a running scheduler (``tcp://host:8786``). Records depend only on the cell and the seed, so every way of
    running gives the same numbers; this process writes them all to the store as they come back, holding the
    store's lock throughout (:meth:`Store.lock`: a second sweep on the store refuses at once). Local worker
    processes die with this one (:mod:`simulator.workers`), so a killed sweep leaves none running; an interrupt
    (or any error) stops them at once, the records saved so far kept, rather than letting them finish the queue.
    """
    with store.lock():
        _run_cells(cells, store, jobs, progress, scheduler, device)


def _run_cells(cells: list[Cell], store: Store, jobs: int, progress: Callable[[Cell, int, int], None] | None,
               scheduler: str | None, device: str | None) -> None:
    todo = [(cell, s) for cell in dict.fromkeys(cells) for s in range(cell.seeds) if store.load(cell, s) is None]
    # Seed by seed, so that a sweep stopped early leaves every cell with about as many seeds; within a seed the
    # same model next to each other, so a worker reuses the model's rows (see _rows).
    todo.sort(key=lambda item: (item[1], model_key(*item)))

    def done(task: tuple[Cell, int, str | None], record: dict) -> None:
        cell, s, _ = task
        store.save(record, cell, s)
        if progress is not None:
            progress(cell, s, cell.trials)

    run_tasks([(cell, s, device) for cell, s in todo], compute_seed, done, jobs, scheduler)


def run_tasks(tasks: list[tuple], compute: Callable[..., T], done: Callable[[tuple, T], None], jobs: int = 1,
              scheduler: str | None = None) -> None:
    """``compute(*task)`` for every task, each result handed to ``done(task, result)`` in this process as it comes
    back (a sweep's records are written by the process that runs it, :func:`run_cells`).

    With ``jobs`` 1 and no ``scheduler`` the tasks run here, in order. Otherwise they run in ``jobs`` local worker
    processes (spawned, one BLAS thread each), or with ``scheduler`` on a Dask cluster: ``"local"`` starts a
    ``dask.distributed`` LocalCluster of ``jobs`` single-threaded worker processes, anything else is the address
    of a running scheduler (``tcp://host:8786``). In a worker, ``compute`` gets one more argument, the number of
    worker processes sharing that machine (1 on a remote scheduler's). Local worker processes die with this one
    (:mod:`simulator.workers`); an interrupt (or any error) stops them at once, the results handed back so far
    kept, rather than letting them finish the queue."""
    if scheduler is not None:
        return _run_on_dask(tasks, compute, done, scheduler, jobs)
    if jobs <= 1:
        for task in tasks:
            done(task, compute(*task))
        return
    with _one_thread_each(), ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"),
                                                 **pool_options()) as pool:
        try:
            futures = {pool.submit(compute, *task, jobs): task for task in tasks}
            for future in as_completed(futures):
                done(futures[future], future.result())
        except BaseException:  # an interrupt, a worker's error: stop now, the results handed back so far kept
            stop_pool(pool)
            raise


def _run_on_dask(tasks: list[tuple], compute: Callable[..., T], done: Callable[[tuple, T], None], scheduler: str,
                 jobs: int) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed as dask_completed
    except ImportError:
        raise InvalidParameterError("scheduler", "needs dask.distributed: pip install 'dask[distributed]'") from None
    with _one_thread_each(), ExitStack() as stack:
        if scheduler == "local":
            cluster = stack.enter_context(LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                                                       dashboard_address=None))
            client = stack.enter_context(Client(cluster))
        else:
            try:
                client = stack.enter_context(Client(scheduler))  # dask config: distributed.comm.timeouts.connect
            except (OSError, TimeoutError) as err:
                raise InvalidParameterError("scheduler", f"cannot reach a Dask scheduler at {scheduler!r}: {err}") \
                    from None
        # pure=False: a task is computed once per submission, never deduplicated against another sweep's key
        workers = jobs if scheduler == "local" else 1  # a remote worker's machine is its own
        futures = {client.submit(compute, *task, workers, pure=False): task for task in tasks}
        for future in dask_completed(futures):
            done(futures[future], future.result())
