"""Table 1's seed times at two commits, measured side by side: cell by cell, the two alternating.

Usage: ``python3 benchmarks/side_by_side.py --before DIR [--after .] [--repeats 2] [--cells tv-rrs,trv]
[--out reports/side_by_side.md]`` with ``DIR`` a checkout of the earlier commit (``git worktree add DIR
COMMIT``).

:mod:`benchmarks.throughput` times a whole Table 1 run; two such runs minutes apart see this machine's speed
drift by 10-15 % (reports/benchmarks.md), more than the differences they are meant to show. Here each cell's
seed 0 (10^6 trials, exactly as a sweep computes a store record, the model's rows built beforehand) runs in a
fresh process of each checkout in turn, ``--repeats`` times, and the best time of each is kept: a drift hits
both. The Monte Carlo numbers (accepted-length mean) of the two are printed too: the same seed and
configuration must give the same numbers at both commits unless the sampling itself changed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from simulator.montecarlo.study import paper_cells

# Runs in the checkout under test: its own modules, whichever layout it has.
CHILD = r"""
import json, os, sys
for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(name, "1")
from dataclasses import replace
try:
    from simulator.montecarlo import study
except ImportError:  # the layout before issue 17
    from simulator import study
cell = [c for _, _, c in study.paper_cells(1)][int(sys.argv[1])]
study._rows(*study.model_key(cell, 0))
record = study.compute_seed(replace(cell, seeds=1, trials=10**6), 0)
print(json.dumps({"verifier": cell.verifier, "structure": cell.topology, "seconds": record["seconds"],
                  "accept_len_mean": record["accept_len_mean"]}))
"""


def timed(root: Path, index: int) -> dict:
    """Cell ``index`` of Table 1, seed 0, in a fresh process of the checkout at ``root``."""
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-c", CHILD, str(index)], cwd=root, env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{root}: cell {index} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the earlier commit")
    parser.add_argument("--after", type=Path, default=Path("."))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cells", default="", help="only these verifiers (comma-separated)")
    parser.add_argument("--out", default="reports/side_by_side.md")
    args = parser.parse_args()
    roots = {"before": args.before.resolve(), "after": args.after.resolve()}
    commits = {tag: subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                   text=True).stdout.strip() for tag, root in roots.items()}
    wanted = set(filter(None, args.cells.split(",")))
    rows = []
    for index, (_, _, cell) in enumerate(paper_cells(1)):  # the same cells, in the same order, at both commits
        if wanted and cell.verifier not in wanted:
            continue
        best: dict[str, dict] = {}
        for _ in range(args.repeats):
            for tag, root in roots.items():
                result = timed(root, index)
                if tag not in best or result["seconds"] < best[tag]["seconds"]:
                    best[tag] = result
        row = {"verifier": best["after"]["verifier"], "structure": best["after"]["structure"],
               **{f"{tag}_s": r["seconds"] for tag, r in best.items()},
               **{f"{tag}_mean": r["accept_len_mean"] for tag, r in best.items()}}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    command = "python3 benchmarks/side_by_side.py " + " ".join(sys.argv[1:])
    lines = ["# Table 1 seed times side by side", "",
             f"Command: `{command}`; before = `{commits['before']}`, after = `{commits['after']}`. Machine: "
             f"{os.cpu_count()} cores, {platform.machine()}, {platform.platform()}, Python {platform.python_version()}. "
             f"Each cell: seed 0, 10^6 trials, as a sweep computes a store record (rows built beforehand), in a fresh "
             f"process of each checkout in turn, best of {args.repeats}.", "",
             "| verifier | structure | before (s) | after (s) | speed-up | E[τ] before | E[τ] after |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['verifier']} | {r['structure']} | {r['before_s']:.2f} | {r['after_s']:.2f} | "
                     f"{r['before_s'] / r['after_s']:.2f} | {r['before_mean']:.6f} | {r['after_mean']:.6f} |")
    if rows:
        worst = min(rows, key=lambda r: r["before_s"] / r["after_s"])
        lines += ["", f"**Slowest cell relative to before: {worst['verifier']} {worst['structure']}, "
                      f"{worst['before_s'] / worst['after_s']:.2f}×.** Total seed time {sum(r['before_s'] for r in rows):.0f} s "
                      f"before, {sum(r['after_s'] for r in rows):.0f} s after.", ""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
