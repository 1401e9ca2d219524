"""The ablation suite's seed times at two commits, measured in step: cell by cell, the two alternating.

Usage: ``python3 benchmarks/ablation_side_by_side.py --before DIR [--after .] [--lanes 2] [--verifiers lv-gr]
[--rows LOG] [--out reports/ablation_side_by_side.md]`` with ``DIR`` a checkout of the other commit
(``git worktree add DIR COMMIT``).

The machine's speed drifts by 20% between runs, so each lane keeps a worker per checkout and runs every cell
(seed 0, as a sweep computes it) at both, alternating which goes first. Rows go to stderr as JSON lines
(``--rows`` renders them later). Reported: each checkout's projected suite time (:mod:`benchmarks.ablation_time`),
their ratio, and whether the accepted-length means agree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path

from side_by_side import checkouts, read_rows, two_commit_parser  # benchmarks/, the script's own folder
from specproof.reports.portable import portable_command
from specproof.study import PAPER_SEEDS, ablation_cells, model_key

#: Workers the projection assumes: the 2-core machine's, as :mod:`benchmarks.ablation_time` by default.
JOBS = 2
#: The keys every row holds, measured or read back with ``--rows``.
ROW_KEYS = ("key", "verifier", "topology", "model", "first", "before_s", "after_s", "before_setup_s",
            "after_setup_s", "before_mean", "after_mean")
#: The suite's time at 20b6630 on a reference 2-core machine, in hours.
ISSUE_BASELINE_H = 3.2

# Serves cells in a checkout under test, one JSON line in and one out per cell; its own modules, either layout.
WORKER = r"""
import json, os, sys, time
for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(name, "1")
try:
    from specproof import study
except ImportError:  # an older checkout: the study in the core package
    try:
        from simulator.montecarlo import study
    except ImportError:  # older still: the study module at the package's top
        from simulator import study
import scipy.optimize, scipy.special, scipy.stats  # loaded once, as in a sweep's worker
built = None
for line in sys.stdin:
    cell = study.Cell(**json.loads(line))
    key, setup = study.model_key(cell, 0), None
    if key != built:
        study._rows.cache_clear()
        start = time.perf_counter()
        study._rows(*key)
        setup, built = time.perf_counter() - start, key
    record = study.compute_seed(cell, 0)
    print(json.dumps({"seconds": record["seconds"], "setup_s": setup,
                      "accept_len_mean": record["accept_len_mean"]}), flush=True)
"""


class Worker:
    """A worker process in the checkout at ``root`` (its own modules on ``PYTHONPATH``)."""

    def __init__(self, root: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(root))
        self.process = subprocess.Popen([sys.executable, "-c", WORKER], cwd=root, env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def run(self, fields: dict) -> dict:
        self.process.stdin.write(json.dumps(fields) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"a worker stopped at {fields} (exit status {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def measure(roots: dict[str, Path], wanted: set[str], lanes: int) -> list[dict]:
    """A row per ablation cell (of the verifiers ``wanted``, every one if empty), its model configuration's
    cells together in one lane, the two checkouts alternating cell by cell."""
    groups: dict[tuple, list] = {}
    for cell in ablation_cells(seeds=1):
        if not wanted or cell.verifier in wanted:
            groups.setdefault(model_key(cell, 0), []).append(cell)
    work: queue.Queue = queue.Queue()
    for key in sorted(groups, key=lambda k: -len(groups[k])):  # the largest groups first: the lanes end together
        work.put(groups[key])
    rows: list[dict] = []
    lock = threading.Lock()

    def lane() -> None:
        workers = {tag: Worker(root) for tag, root in roots.items()}
        try:
            turn = 0
            while True:
                try:
                    cells = work.get_nowait()
                except queue.Empty:
                    return
                for cell in cells:
                    order = list(workers) if turn % 2 == 0 else list(reversed(workers))
                    turn += 1
                    result = {tag: workers[tag].run(asdict(cell)) for tag in order}
                    row = {"key": cell.key(), "verifier": cell.verifier, "topology": cell.topology,
                           "model": list(model_key(cell, 0)), "first": order[0],
                           **{f"{tag}_s": r["seconds"] for tag, r in result.items()},
                           **{f"{tag}_setup_s": r["setup_s"] for tag, r in result.items()},
                           **{f"{tag}_mean": r["accept_len_mean"] for tag, r in result.items()}}
                    with lock:
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            for worker in workers.values():
                worker.close()

    threads = [threading.Thread(target=lane) for _ in range(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return rows


def render(rows: list[dict], command: str, commits: dict[str, str], lanes: int) -> tuple[str, dict]:
    """The report and its numbers: per method and for the whole suite, the projected time at each commit and
    the ratio, and every cell in the suite's order (measured or read back, rows come in the order lanes finish)."""
    order = {c.key(): i for i, c in enumerate(ablation_cells(seeds=1))}
    rows = sorted(rows, key=lambda r: order[r["key"]])
    tags = ("before", "after")
    setups = {tag: {} for tag in tags}  # per model configuration: the set-up its worker timed
    for r in rows:
        for tag in tags:
            if r[f"{tag}_setup_s"] is not None:
                setups[tag][tuple(r["model"])] = r[f"{tag}_setup_s"]
    methods = list(dict.fromkeys(r["verifier"] for r in rows))
    hours = {tag: {m: PAPER_SEEDS * sum(r[f"{tag}_s"] for r in rows if r["verifier"] == m) / JOBS / 3600
                   for m in methods} for tag in tags}
    for tag in tags:
        hours[tag]["set-up"] = PAPER_SEEDS * sum(setups[tag].values()) / JOBS / 3600
    total = {tag: sum(hours[tag].values()) for tag in tags}
    ratio = total["before"] / total["after"]
    same = sum(r["before_mean"] == r["after_mean"] for r in rows)
    lines = ["# The ablation suite side by side", "",
             f"Command: `{command}`; before = `{commits['before']}`, after = `{commits['after']}`. Machine: "
             f"{os.cpu_count()} cores, {platform.machine()}, {platform.platform()}, Python {platform.python_version()}. "
             f"{len(rows)} cells, seed 0, 10^5 trials each, as a sweep computes a store record; {lanes} lanes, in each a "
             "worker per checkout keeping its model's rows, the two alternating cell by cell "
             "(benchmarks/ablation_side_by_side.py says how). Projected on 2 cores, "
             f"{PAPER_SEEDS} × (Σ set-up + Σ seed time) / {JOBS}:", "",
             "| method | before | after | less |", "|---|---|---|---|"]
    for m in [*methods, "set-up"]:
        b, a = hours["before"][m], hours["after"][m]
        lines.append(f"| {m} | {b:.2f} h | {a:.2f} h | {b / a:.2f}× |")
    lines += [f"| **whole suite** | **{total['before']:.2f} h** | **{total['after']:.2f} h** | **{ratio:.2f}×** |", "",
              f"Accepted-length means equal at both commits in {same} of {len(rows)} cells."]
    numbers = {"commits": commits, "command": command, "hours": hours, "total_h": total, "ratio": ratio,
               "cells": rows}
    if commits["before"].startswith("20b6630"):
        estimate = ISSUE_BASELINE_H / ratio
        numbers["issue_machine_h"] = estimate
        lines += ["", f"On a reference 2-core machine the suite took {ISSUE_BASELINE_H} h at 20b6630: "
                      f"{ratio:.2f}× less is **{estimate:.2f} h** there."]
    lines += ["", "| cell | before (s) | after (s) | less | first |", "|---|---|---|---|---|"]
    lines += [f"| {r['key']} | {r['before_s']:.1f} | {r['after_s']:.1f} | {r['before_s'] / r['after_s']:.2f}× | "
              f"{r['first']} |" for r in rows]
    return "\n".join(lines) + "\n", numbers


def main() -> None:
    parser = two_commit_parser("reports/ablation_side_by_side.md")
    parser.add_argument("--lanes", type=int, default=2, help="model configurations measured at once")
    parser.add_argument("--verifiers", default="", help="only these methods' cells (comma-separated)")
    args = parser.parse_args()
    if args.lanes < 1:
        parser.error(f"--lanes must be at least 1, got {args.lanes}")
    wanted = set(filter(None, args.verifiers.split(",")))
    unknown = wanted - {cell.verifier for cell in ablation_cells(seeds=1)}
    if unknown:
        parser.error(f"--verifiers: {', '.join(sorted(unknown))} not among the ablation suite's methods")
    roots, commits = checkouts(args)
    if args.rows:
        rows = read_rows(parser, args.rows, ROW_KEYS)
    else:
        rows = measure(roots, wanted, args.lanes)
    command = portable_command(["python3", "benchmarks/ablation_side_by_side.py", *sys.argv[1:]])
    text, numbers = render(rows, command, commits, args.lanes)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(numbers, indent=1) + "\n")
    print(text)


if __name__ == "__main__":
    main()
