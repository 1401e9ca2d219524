"""The time of the toy study's whole ablation suite (Tables 4–15) at full scale, measured cell by cell.

Usage: ``python3 benchmarks/ablation_time.py [--out reports/ablation_time.md] [--jobs 2] [--verifiers lv-gr]
[--store reports/store] [--seed 0]``.

Each cell (20 seeds × 10^5 trials) is timed on one model seed as a sweep runs it
(:func:`specproof.study.compute_seed`), each model's set-up once. ``--store`` takes a cell's time from the sweep's
record of that seed; ``--verifiers`` times only those methods, keeping the other rows of ``--out``. Projected:
``20 × (Σ_models set-up + Σ_cells seed time) / jobs`` (the paper: 30 hours on 128 cores). Run it on an idle
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

# One BLAS thread, as a sweep's workers have (specproof.study.run_cells); read as numpy loads.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

from specproof import study
from specproof.reports.portable import portable_command
from specproof.study import PAPER_SEEDS, Store, ablation_cells, compute_seed, model_key


def time_cell(cell: study.Cell, seed: int, store: Store | None) -> dict:
    """``seed`` of ``cell`` as the sweep runs it, or as the sweep measured it (its record in ``store``)."""
    out = {"verifier": cell.verifier, "topology": cell.topology, "key": cell.key(), "seed": seed}
    record = store.load(cell, seed) if store is not None else None
    if record is not None and "seconds" in record:  # records older than the field do not hold it
        out["source"], out["seed_s"] = "store record", record["seconds"]
    else:
        out["source"], out["seed_s"] = "timed", compute_seed(cell, seed)["seconds"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports/ablation_time.md")
    parser.add_argument("--jobs", type=int, default=2, help="cores the projection assumes")
    parser.add_argument("--verifiers", default=None, help="comma-separated: time only these methods' cells")
    parser.add_argument("--store", default=None, help="take the seed's time from the sweep's records here")
    parser.add_argument("--seed", type=int, default=0, help="the model seed timed (or read from --store)")
    args = parser.parse_args()
    wanted = set(args.verifiers.split(",")) if args.verifiers else None
    store = Store(args.store) if args.store else None
    command = portable_command(["python3", "benchmarks/ablation_time.py", *sys.argv[1:]])
    kept, setups = [], {}  # setups: seconds per model configuration
    if wanted is not None:
        previous = json.loads(Path(args.out).with_suffix(".json").read_text())
        kept = [r for r in previous["cells"] if r["verifier"] not in wanted]
        setups = {tuple(s["model"]): s["seconds"] for s in previous["setups"]}
    cells = ablation_cells()
    timed = {}
    for cell in cells:
        if wanted is not None and cell.verifier not in wanted:
            continue
        key, rows_key = model_key(cell, 0), model_key(cell, args.seed)  # set-ups per configuration, any seed
        if key not in setups:
            study._rows.cache_clear()
            start = time.perf_counter()
            study._rows(*rows_key)
            setups[key] = time.perf_counter() - start
        study._rows(*rows_key)  # built (untimed) where its set-up was measured before: the cell's time is its own
        timed[cell.key()] = time_cell(replace(cell, seeds=args.seed + 1), args.seed, store) | {"command": command}
        print(json.dumps(timed[cell.key()]), file=sys.stderr)
    rows = kept + list(timed.values())
    order = {c.key(): i for i, c in enumerate(cells)}
    rows.sort(key=lambda r: order[r["key"]])
    commands = list(dict.fromkeys(r["command"] for r in rows))  # each row names the command that timed it
    per_method: dict[str, float] = {}
    for r in rows:
        per_method[r["verifier"]] = per_method.get(r["verifier"], 0.0) + PAPER_SEEDS * r["seed_s"] / args.jobs
    setup_total = PAPER_SEEDS * sum(setups.values()) / args.jobs
    total = setup_total + sum(per_method.values())
    without = setup_total + sum(v for m, v in per_method.items() if m != "lv-gr")
    lines = ["# Benchmark: the ablation suite (Tables 4–15) at full scale", "",
             "Commands, in order: " + "; ".join(f"`{c}`" for c in commands) + f". Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}, "
             f"Python {platform.python_version()}, numpy {np.__version__}.", "",
             f"{len(cells)} ablation cells (each 20 model seeds × 10^5 trials), {len(setups)} model configurations. "
             "Each cell's seed (below) timed as the sweep runs it (or read from the sweep's record of it where the "
             "source says so); set-up (the model's rows of every context) once per "
             f"model configuration and seed. Projected on {args.jobs} cores:", "",
             "| method | cells | projected time |", "|---|---|---|"]
    for method, seconds in per_method.items():
        count = sum(1 for r in rows if r["verifier"] == method)
        lines.append(f"| {method} | {count} | {seconds / 3600:.2f} h |")
    lines += [f"| set-up (rows per model and seed) | {len(setups)} models | {setup_total / 3600:.2f} h |", "",
              f"Whole ablation suite: **{total / 3600:.2f} h** on {args.jobs} cores; **{without / 3600:.2f} h** "
              "without `lv-gr` (the paper: 30 hours on 128 cores). Every method runs on its batched path.", "",
              "| cell | seed | time (s) | source |", "|---|---|---|---|"]
    lines += [f"| {r['key']} | {r.get('seed', 0)} | {r['seed_s']:.1f} | {r.get('source', 'timed')} |" for r in rows]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    Path(args.out).with_suffix(".json").write_text(json.dumps(
        {"commands": commands, "setups": [{"model": list(k), "seconds": v} for k, v in setups.items()],
         "cells": rows, "total_s": total, "without_lv_gr_s": without}, indent=1) + "\n")
    print("\n".join(lines[:12 + len(per_method)]))


if __name__ == "__main__":
    main()
