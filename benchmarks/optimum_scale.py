"""How large an instance ``specproof optimum`` settles exactly, and what each reduction of its LP buys.

Usage: ``python3 benchmarks/optimum_scale.py [--out reports/optimum_scale.md] [--quick]``.

Per instance (shape, model pair, vocabulary; i.i.d. drafting): the LP's columns, rows and blocks, whether the
optimum is proved (exact primal point, exact dual certificate, equal objectives), and the seconds of each stage
(building the LP, HiGHS, the exact primal and dual systems, the exact checks), for three variants:

* ``merged`` (the default): one block per set of root paths, one row per class of sequences;
* ``unmerged``: one block per drafted tree and one row per sequence (``optimum(..., merge=False)``), on the
  smaller instances;
* ``generated``: the merged LP solved by column generation from the dual (``optimum(..., generate=True)``).

Run it on an idle machine; each variant runs in this one process, one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from exact.prove.optimum import MAX_COLUMNS, column_estimate, optimum
from simulator.drafting.drafter_registry import make_drafter
from simulator.models import make_model
from simulator.trees import make_topology

#: (topology, depth, branching, model, seed, vocab, run unmerged too)
CASES = [
    ("chain", 3, 1, "random-rational", 1, 3, True),
    ("complete", 2, 2, "random-rational", 1, 3, True),
    ("complete", 2, 2, "random-rational", 1, 4, True),
    ("complete", 2, 2, "synthetic", 0, 4, True),
    ("chain", 4, 1, "random-rational", 1, 5, True),
    ("chain", 4, 1, "synthetic", 0, 5, False),
    ("tapered", 2, 3, "random-rational", 1, 3, True),
    ("complete", 2, 2, "random-rational", 1, 5, False),
    ("complete", 2, 2, "synthetic", 0, 5, False),
    ("chain", 5, 1, "random-rational", 1, 5, False),
]
QUICK = CASES[:4]


def run(case, merge: bool = True, generate: bool = False) -> dict:
    topology, depth, branching, kind, seed, vocab, _ = case
    model = make_model(kind, None, vocab, seed)
    drafter = make_drafter("iid", make_topology(topology, depth, branching), model)
    start = time.perf_counter()
    result = optimum(model, drafter, max_columns=float("inf"), merge=merge, generate=generate)
    return {"columns": result.columns, "rows": result.rows, "blocks": result.trees, "proved": result.proved,
            "optimum_float": float(result.optimum), "digits": len(str(result.optimum)),
            "seconds": round(time.perf_counter() - start, 2),
            "timings": {k: round(v, 2) for k, v in result.timings.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("reports/optimum_scale.md"))
    parser.add_argument("--quick", action="store_true", help="the four smallest instances only")
    args = parser.parse_args()
    rows = []
    for case in QUICK if args.quick else CASES:
        topology, depth, branching, kind, seed, vocab, unmerged = case
        nodes = len(make_topology(topology, depth, branching).parents)
        row = {"shape": f"{topology} (depth {depth}, branching {branching})", "model": f"{kind} {seed}",
               "vocab": vocab, "estimate": column_estimate(nodes, vocab), "merged": run(case),
               "generated": run(case, generate=True)}
        if unmerged:
            row["unmerged"] = run(case, merge=False)
        rows.append(row)
        print(json.dumps(row), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = ["# The exact optimum's scale", "",
             f"Made by `python3 benchmarks/optimum_scale.py{' --quick' if args.quick else ''}` on "
             f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, commit {commit or '?'}; "
             "i.i.d. drafting. Seconds of one run in one process (the stages: build, HiGHS, the exact primal and "
             "dual systems, the exact checks). Every optimum listed is proved: exact primal point, exact dual "
             "certificate, equal objectives.", "",
             "| shape | model, seed | V | estimate | columns | rows | blocks | seconds (build, HiGHS, primal, dual, "
             "check) | generated: seconds (HiGHS) | unmerged: columns, rows, blocks, seconds |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        m, g, u = row["merged"], row["generated"], row.get("unmerged")
        t = m["timings"]
        stages = ", ".join(f"{t.get(k, 0):g}" for k in ("build", "highs", "primal", "dual", "check"))
        unmerged = f"{u['columns']:,}, {u['rows']:,}, {u['blocks']:,}, {u['seconds']:g}" if u else "–"
        over = " (over)" if row["estimate"] > MAX_COLUMNS else ""
        proved = "" if m["proved"] and g["proved"] and (u is None or u["proved"]) else " NOT PROVED"
        lines.append(f"| {row['shape']} | {row['model']} | {row['vocab']} | {row['estimate']:,}{over} | {m['columns']:,} | "
                     f"{m['rows']:,} | {m['blocks']:,} | {m['seconds']:g} ({stages}){proved} | "
                     f"{g['seconds']:g} ({g['timings']['highs']:g}) | {unmerged} |")
    lines += ["", "`estimate` is `V^(nodes−1) · nodes · V`, what `--max-columns` (default 250,000) is compared with "
                  "before any work; the rows marked *over* pass it and run as `--max-columns 0` would.", ""]
    args.out.write_text("\n".join(lines))
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
