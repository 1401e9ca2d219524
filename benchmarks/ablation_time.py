"""The time of the toy study's whole ablation suite (Tables 4–15) at full scale, measured cell by cell.

Usage: ``python3 benchmarks/ablation_time.py [--out reports/ablation_time.md] [--reference 100] [--jobs 2]``.

Every ablation cell (20 seeds × 10^5 trials at full scale) is timed on model seed 0 exactly as the sweep runs
it (:func:`simulator.study.compute_seed`, the model's rows built once per model and shared, as a sweep's
worker shares them): per model configuration the set-up (rows of every context up to ``H``), per cell the
Monte Carlo of one seed. Methods without a batched path (``lv-gr``) run the reference path on ``--reference``
trials and are projected to 10^5. The suite's projected time on ``--jobs`` cores is
``20 × (Σ_models set-up + Σ_cells seed time) / jobs``. The paper reports 30 hours on 128 cores. Run it on an
otherwise idle machine.
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

import numpy as np

from simulator import study
from simulator.batched import has_batched_path
from simulator.drafting import FixedShape
from simulator.montecarlo import run_trials
from simulator.study import ABLATIONS, PAPER_SEEDS, compute_seed, model_key, paper_cells
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS


def time_cell(cell: study.Cell, reference: int) -> dict:
    """One seed of ``cell``: batched through the sweep's own code, else ``reference`` trials projected."""
    topology = make_topology(cell.topology, cell.depth, cell.branching)
    out = {"verifier": cell.verifier, "topology": cell.topology, "key": cell.key()}
    if has_batched_path(cell.verifier, "iid", cell.vocab, topology):
        out["path"], out["seed_s"] = "batched", compute_seed(cell, 0)["seconds"]
        return out
    start = time.perf_counter()
    run_trials(cell.model(0), FixedShape(topology), VERIFIERS[cell.verifier].fn, 0, range(reference))
    out["path"], out["seed_s"] = "reference", (time.perf_counter() - start) * cell.trials / reference
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports/ablation_time.md")
    parser.add_argument("--reference", type=int, default=100, help="trials timed where no batched path exists")
    parser.add_argument("--jobs", type=int, default=2, help="cores the projection assumes")
    args = parser.parse_args()
    cells = list(dict.fromkeys(c for t in ABLATIONS for _, _, c in paper_cells(t)))
    cells.sort(key=lambda c: model_key(c, 0))
    setups: dict[tuple, float] = {}
    rows = []
    for cell in cells:
        key = model_key(cell, 0)
        if key not in setups:
            study._rows.cache_clear()
            start = time.perf_counter()
            study._rows(*key)
            setups[key] = time.perf_counter() - start
        rows.append(time_cell(replace(cell, seeds=1), args.reference))
        print(json.dumps(rows[-1]), file=sys.stderr)
    per_method: dict[str, float] = {}
    for r in rows:
        per_method[r["verifier"]] = per_method.get(r["verifier"], 0.0) + PAPER_SEEDS * r["seed_s"] / args.jobs
    setup_total = PAPER_SEEDS * sum(setups.values()) / args.jobs
    total = setup_total + sum(per_method.values())
    batched = setup_total + sum(v for m, v in per_method.items()
                                if all(r["path"] == "batched" for r in rows if r["verifier"] == m))
    command = "python3 benchmarks/ablation_time.py " + " ".join(sys.argv[1:])
    lines = ["# Benchmark: the ablation suite (Tables 4–15) at full scale", "",
             f"Command: `{command}`. Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}, "
             f"Python {platform.python_version()}, numpy {np.__version__}.", "",
             f"{len(cells)} ablation cells (each 20 model seeds × 10^5 trials), {len(setups)} model configurations. "
             "Each cell's seed 0 timed as the sweep runs it; set-up (the model's rows of every context) once per "
             f"model configuration and seed. Projected on {args.jobs} cores:", "",
             "| method | path | cells | projected time |", "|---|---|---|---|"]
    for method, seconds in per_method.items():
        paths = {r["path"] for r in rows if r["verifier"] == method}
        count = sum(1 for r in rows if r["verifier"] == method)
        lines.append(f"| {method} | {', '.join(sorted(paths))} | {count} | {seconds / 3600:.2f} h |")
    lines += [f"| set-up (rows per model and seed) | | {len(setups)} models | {setup_total / 3600:.2f} h |", "",
              f"Whole ablation suite: **{total / 3600:.1f} h** on {args.jobs} cores; **{batched / 3600:.1f} h** for "
              "the methods with a batched path (the paper: 30 hours on 128 cores).", "",
              "| cell | path | seed 0 (s) |", "|---|---|---|"]
    lines += [f"| {r['key']} | {r['path']} | {r['seed_s']:.1f} |" for r in rows]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    Path(args.out).with_suffix(".json").write_text(json.dumps(
        {"command": command, "setups": [{"model": list(k), "seconds": v} for k, v in setups.items()],
         "cells": rows, "total_s": total, "batched_total_s": batched}, indent=1) + "\n")
    print("\n".join(lines[:12 + len(per_method)]))


if __name__ == "__main__":
    main()
