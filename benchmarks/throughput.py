"""Trials per second per verifier and structure, and the projected time of Table 1 at full scale.

Usage: ``python3 benchmarks/throughput.py [--out reports/benchmarks.md] [--batch 20000] [--reference 300]``.

For each method of the layer_verification.txt toy study on each of its three structures at the base
configuration (V=15, H=4, b=2, ρ=0.5, τ=1): the per-seed set-up (the model's rows of every context, and for
GR its flow table), the batched path's trials per second where one exists, and the reference path's. Table 1
at full scale is 20 seeds × 10^6 trials per cell; its projected time on ``--jobs`` cores is
``Σ_cells 20 × (set-up + 10^6 / rate) / jobs``. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from simulator.batched import ContextRows, batched_rounds, has_batched_path
from simulator.drafting import FixedShape
from simulator.models import SyntheticModel
from simulator.montecarlo import run_trials, target_table
from simulator.study import paper_cells
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS


def measure(name: str, structure: str, batch: int, reference: int) -> dict:
    model = SyntheticModel(15, 0.5, 1.0, 1.0, seed=0)
    topology = make_topology(structure, 4, 2)
    start = time.perf_counter()
    rows = ContextRows(model, 4)
    target_table(model, 4, rows)
    setup = time.perf_counter() - start
    out = {"verifier": name, "structure": structure, "setup_s": setup}
    if has_batched_path(name, "iid", 15, topology):
        start = time.perf_counter()
        batched_rounds(model, topology, "iid", name, 0, np.arange(1000), rows)  # warm-up; GR builds its table
        out["setup_s"] += time.perf_counter() - start
        start = time.perf_counter()
        batched_rounds(model, topology, "iid", name, 0, np.arange(batch), rows)
        out["batched_trials_per_s"] = batch / (time.perf_counter() - start)
    start = time.perf_counter()
    run_trials(model, FixedShape(topology), VERIFIERS[name].fn, 0, range(reference))
    out["reference_trials_per_s"] = reference / (time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports/benchmarks.md")
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--reference", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2, help="cores the projection assumes")
    args = parser.parse_args()
    rows = []
    for method, _, cell in paper_cells(1):
        result = measure(method, cell.topology, args.batch, args.reference)
        rate = result.get("batched_trials_per_s", result["reference_trials_per_s"])
        result["path"] = "batched" if "batched_trials_per_s" in result else "reference"
        result["table1_cell_s"] = 20 * (result["setup_s"] + 10**6 / rate)
        rows.append(result)
        print(json.dumps(result), file=sys.stderr)
    total = sum(r["table1_cell_s"] for r in rows) / args.jobs
    batched_total = sum(r["table1_cell_s"] for r in rows if r["path"] == "batched") / args.jobs
    command = "python3 benchmarks/throughput.py " + " ".join(sys.argv[1:])
    lines = ["# Benchmarks: Monte Carlo throughput", "",
             f"Command: `{command}`. Machine: {platform.machine()}, {os.cpu_count()} cores, "
             f"{platform.platform()}, Python {platform.python_version()}, numpy {np.__version__}.", "",
             "Base configuration of the toy study (V=15, H=4, b=2, ρ=0.5, τ=1), i.i.d. drafting, one model seed. "
             "Set-up is per model seed (rows of every context; GR's flow table). A Table 1 cell is 20 seeds × "
             "10^6 trials.", "",
             "| verifier | structure | path | set-up s | batched trials/s | reference trials/s | Table 1 cell, 1 core |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        batched = f"{r['batched_trials_per_s']:,.0f}" if "batched_trials_per_s" in r else "–"
        lines.append(f"| {r['verifier']} | {r['structure']} | {r['path']} | {r['setup_s']:.1f} | {batched} | "
                     f"{r['reference_trials_per_s']:,.0f} | {r['table1_cell_s'] / 3600:.2f} h |")
    lines += ["", f"Projected Table 1 at full scale on {args.jobs} cores: **{total / 3600:.1f} h** in all; "
              f"{batched_total / 60:.0f} min for the cells with a batched path.", ""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    Path(args.out).with_suffix(".json").write_text(json.dumps({"command": command, "rows": rows}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
