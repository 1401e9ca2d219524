"""Table 1's seed times at two commits, measured side by side: cell by cell, the two alternating.

Usage: ``python3 benchmarks/side_by_side.py --before DIR [--after .] [--repeats 2] [--cells tv-rrs,trv] [--rows LOG]
[--out reports/side_by_side.md]`` with ``DIR`` a checkout of the other commit (``git worktree add DIR COMMIT``).

Whole runs of :mod:`benchmarks.throughput` see the machine's speed drift by 10-15 %, so each cell's seed 0 runs
in a fresh process of each checkout in turn, ``--repeats`` times, keeping each one's best time; the
accepted-length means must agree unless the sampling changed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from specproof.reports.portable import portable_command
from specproof.study import PAPER_SEEDS, paper_cells

#: Workers the projection of Table 1 assumes (the 2-core machine's), as ``benchmarks/throughput.py`` by default.
JOBS = 2
#: The keys every row holds, measured or read back with ``--rows``.
ROW_KEYS = ("verifier", "structure", "before_s", "after_s", "before_setup_s", "after_setup_s", "before_mean",
            "after_mean")

# Runs in the checkout under test: its own modules, whichever layout it has.
CHILD = r"""
import json, os, sys
for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(name, "1")
from dataclasses import replace
try:
    from specproof import study
except ImportError:  # an older checkout: the study in the core package
    try:
        from simulator.montecarlo import study
    except ImportError:  # older still: the study module at the package's top
        from simulator import study
import time
cell = [c for _, _, c in study.paper_cells(1)][int(sys.argv[1])]
start = time.perf_counter()
study._rows(*study.model_key(cell, 0))
setup = time.perf_counter() - start
record = study.compute_seed(replace(cell, seeds=1, trials=10**6), 0)
print(json.dumps({"verifier": cell.verifier, "structure": cell.topology, "seconds": record["seconds"],
                  "setup_seconds": setup, "accept_len_mean": record["accept_len_mean"]}))
"""


def timed(root: Path, index: int) -> dict:
    """Cell ``index`` of Table 1, seed 0, in a fresh process of the checkout at ``root``."""
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-c", CHILD, str(index)], cwd=root, env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{root}: cell {index} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(roots: dict[str, Path], wanted: set[str], repeats: int) -> list[dict]:
    """One row per Table 1 cell (of the verifiers ``wanted``, every one if empty): the best of ``repeats`` fresh
    processes at each checkout, the two alternating. Each row is printed to stderr as a JSON line as it is
    measured, so that ``--rows`` can render a report from them later."""
    rows = []
    for index, (_, _, cell) in enumerate(paper_cells(1)):  # the same cells, in the same order, at both commits
        if wanted and cell.verifier not in wanted:
            continue
        best: dict[str, dict] = {}
        for _ in range(repeats):
            for tag, root in roots.items():
                result = timed(root, index)
                if tag not in best or result["seconds"] < best[tag]["seconds"]:
                    best[tag] = result
        row = {"verifier": best["after"]["verifier"], "structure": best["after"]["structure"],
               **{f"{tag}_s": r["seconds"] for tag, r in best.items()},
               **{f"{tag}_setup_s": r["setup_seconds"] for tag, r in best.items()},
               **{f"{tag}_mean": r["accept_len_mean"] for tag, r in best.items()}}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def render(rows: list[dict], command: str, commits: dict[str, str], repeats: int) -> str:
    """The report: a row per cell, the slowest speed-up, and Table 1's projection when every cell was measured."""
    lines = ["# Table 1 seed times side by side", "",
             f"Command: `{command}`; before = `{commits['before']}`, after = `{commits['after']}`. Machine: "
             f"{os.cpu_count()} cores, {platform.machine()}, {platform.platform()}, Python {platform.python_version()}. "
             f"Each cell: seed 0, 10^6 trials, as a sweep computes a store record (rows built beforehand and timed "
             f"apart as the set-up), in a fresh process of each checkout in turn, best of {repeats}.", "",
             "| verifier | structure | before (s) | after (s) | speed-up | with set-up | E[τ] before | E[τ] after |",
             "|---|---|---|---|---|---|---|---|"]
    setup = {tag: min(r[f"{tag}_setup_s"] for r in rows) for tag in ("before", "after")} if rows else {}
    for r in rows:
        with_setup = (r["before_s"] + setup["before"]) / (r["after_s"] + setup["after"])
        lines.append(f"| {r['verifier']} | {r['structure']} | {r['before_s']:.2f} | {r['after_s']:.2f} | "
                     f"{r['before_s'] / r['after_s']:.2f} | {with_setup:.2f} | {r['before_mean']:.6f} | "
                     f"{r['after_mean']:.6f} |")
    if not rows:
        return "\n".join(lines)
    worst = min(rows, key=lambda r: r["before_s"] / r["after_s"])
    totals = {tag: sum(r[f"{tag}_s"] for r in rows) for tag in ("before", "after")}
    lines += ["", f"*With set-up*: the speed-up of trials per second when the model's set-up of a seed (the fastest "
                  f"of the cells' fresh processes: {setup['before']:.2f} s before, {setup['after']:.2f} s after) "
                  f"is counted with each cell.", "",
              f"**Slowest cell relative to before: {worst['verifier']} {worst['structure']}, "
              f"{worst['before_s'] / worst['after_s']:.2f}×.** Total seed time {totals['before']:.0f} s before, "
              f"{totals['after']:.0f} s after.", ""]
    if len(rows) == sum(1 for _ in paper_cells(1)):
        # As benchmarks/throughput.py projects a sweep: each seed brings the model's set-up once per worker and
        # its cells' seed times shared by the workers.
        sweep = {tag: PAPER_SEEDS * (setup[tag] + totals[tag] / JOBS) for tag in ("before", "after")}
        lines += [f"Table 1 at full scale on this machine, {PAPER_SEEDS} × (set-up + Σ seed time / {JOBS}): "
                  f"{sweep['before'] / 60:.0f} min before, {sweep['after'] / 60:.0f} min after "
                  f"({sweep['before'] / sweep['after']:.2f}× less).", ""]
    return "\n".join(lines)


def two_commit_parser(out: str) -> argparse.ArgumentParser:
    """The options every side-by-side benchmark takes: the two checkouts, ``--rows`` and ``--out``."""
    parser = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the earlier commit")
    parser.add_argument("--after", type=Path, default=Path("."))
    parser.add_argument("--rows", type=Path, default=None,
                        help="render the report from the JSON rows an earlier run printed, measuring nothing")
    parser.add_argument("--out", default=out)
    return parser


def checkouts(args: argparse.Namespace) -> tuple[dict[str, Path], dict[str, str]]:
    """The two checkouts' roots and their short commit hashes, tagged ``before`` and ``after``."""
    roots = {"before": args.before.resolve(), "after": args.after.resolve()}
    commits = {tag: subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                   text=True).stdout.strip() for tag, root in roots.items()}
    return roots, commits


def read_rows(parser: argparse.ArgumentParser, path: Path, keys: tuple[str, ...]) -> list[dict]:
    """The JSON rows an earlier run printed (its log's lines that start with ``{``), each checked for ``keys``."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    if not rows:
        parser.error(f"--rows {path}: no rows in it (the JSON lines this script prints to stderr as it measures)")
    for number, row in enumerate(rows, 1):
        missing = [key for key in keys if key not in row]
        if missing:
            parser.error(f"--rows {path}: row {number} lacks {', '.join(missing)} (a log of this script's rows is "
                         "needed; older logs may lack later fields)")
    return rows


def main() -> None:
    parser = two_commit_parser("reports/side_by_side.md")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cells", default="", help="only these verifiers (comma-separated)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    roots, commits = checkouts(args)
    if args.rows:
        rows = read_rows(parser, args.rows, ROW_KEYS)
    else:
        rows = measure(roots, set(filter(None, args.cells.split(","))), args.repeats)
    command = portable_command(["python3", "benchmarks/side_by_side.py", *sys.argv[1:]])
    text = render(rows, command, commits, args.repeats)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
