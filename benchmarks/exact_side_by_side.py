"""The exact engine and the Monte Carlo command at two commits, side by side: CPU seconds of whole commands.

Usage: ``python3 benchmarks/exact_side_by_side.py --before DIR [--after .] [--repeats 2] [--timeout 90] [--rows LOG]
[--out reports/exact_side_by_side.md]`` with ``DIR`` a checkout of the other commit (``git worktree add DIR
COMMIT``).

Each command runs as ``python3 -m specproof.cli …`` in a fresh process of each checkout in turn, ``--repeats``
times; a row's ratio is the median of the repeats' ratios (before's CPU seconds over after's), its times the
medians. A command past ``--timeout`` seconds is killed and shown as ``> T``; one the checkout refuses (a method it
lacks) as ``refused``. The outputs' verdicts and ``E[τ]`` lines must agree wherever both finish.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from side_by_side import checkouts, read_rows, two_commit_parser  # benchmarks/, the script's own folder
from simulator.numeric import rational_backend
from specproof.reports.portable import portable_command

SYNTHETIC = ["--model", "synthetic", "--topology", "complete", "--branching", "2"]
#: the environment of a row measured with Python's fractions at the after commit (the before commit has no choice)
FRACTION = {"SPECPROOF_RATIONALS": "fraction"}
#: the exact engine's certifications, each with the after commit's default rationals (gmpy2 where installed) and
#: with Python's fractions
EXACT = [
    ("certify tv-rrs, complete(2, 3), V = 4", ["certify", "--verifier", "tv-rrs", *SYNTHETIC, "--depth", "3",
                                                 "--vocab", "4"]),
    ("certify tv-rrs, complete(2, 3), V = 5", ["certify", "--verifier", "tv-rrs", *SYNTHETIC, "--depth", "3",
                                                 "--vocab", "5"]),
    ("certify tv-kseq, complete(2, 3), V = 4", ["certify", "--verifier", "tv-kseq", *SYNTHETIC, "--depth", "3",
                                                  "--vocab", "4"]),
]
#: (label, command arguments, environment): the reference measurements of the exact engine, the recursion, Monte Carlo
#: and the prover
COMMANDS = [
    *[(f"{label}, {rationals}", args, env) for label, args in EXACT
      for rationals, env in ((f"rationals: {rational_backend()}", {}), ("rationals: Fraction", FRACTION))],
    ("certify tv-rrs --method recursion, complete(2, 4), V = 15, float64",
     ["certify", "--verifier", "tv-rrs", *SYNTHETIC, "--depth", "4", "--vocab", "15", "--method", "recursion",
      "--arithmetic", "float"], {}),
    ("certify bug-residual-q --method recursion, complete(2, 4), V = 15, float64",
     ["certify", "--verifier", "bug-residual-q", *SYNTHETIC, "--depth", "4", "--vocab", "15", "--method",
      "recursion", "--arithmetic", "float"], {}),
    ("mc tv-rrs, complete(2, 4), V = 15, 1 seed × 10^6 trials",
     ["mc", "--verifier", "tv-rrs", *SYNTHETIC, "--depth", "4", "--vocab", "15", "--seeds", "1", "--trials",
      "1000000"], {}),
    ("prove tv-rrs, complete(2, 3), V = 3, every model pair",
     ["prove", "--verifier", "tv-rrs", "--topology", "complete", "--branching", "2", "--depth", "3", "--vocab", "3"],
     {}),
]
ROW_KEYS = ("label", "before_s", "after_s", "ratio", "before_out", "after_out")


def run(root: Path, args: list[str], timeout: float, extra: dict[str, str]) -> tuple[float | str, str]:
    """CPU seconds (user + system) of one command in a fresh process of the checkout at ``root`` with ``extra`` in
    its environment, and the lines of its output that carry numbers; ``"> T"`` past the timeout, ``"refused"`` when
    it exits 2 (no verdict)."""
    env = dict(os.environ, PYTHONPATH=str(root), **extra)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        done = subprocess.run([sys.executable, "-m", "specproof.cli", *args], cwd=root, env=env, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"> {timeout:g}", ""
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line.strip() for line in done.stdout.splitlines()
             if line.strip().startswith(("tv-", "bug-", "E[accepted]", "accepted length", "TVD", "PROVED"))]
    if done.returncode == 2:
        return "refused", done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    return cpu, " / ".join(lines)


def measure(roots: dict[str, Path], repeats: int, timeout: float) -> list[dict]:
    rows = []
    for label, args, extra in COMMANDS:
        times: dict[str, list] = {"before": [], "after": []}
        outs: dict[str, str] = {}
        for _ in range(repeats):
            for tag, root in roots.items():
                seconds, out = run(root, args, timeout, extra)
                times[tag].append(seconds)
                outs[tag] = out
        numeric = all(isinstance(t, float) for tag in times for t in times[tag])
        ratio = statistics.median(b / a for b, a in zip(times["before"], times["after"])) if numeric else None
        shown_env = "".join(f"{k}={v} " for k, v in extra.items())
        row = {"label": label, "command": shown_env + "specproof " + " ".join(args),
               **{f"{tag}_s": (statistics.median(ts) if all(isinstance(t, float) for t in ts) else ts[0])
                  for tag, ts in times.items()},
               "ratio": ratio, **{f"{tag}_out": out for tag, out in outs.items()}}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def render(rows: list[dict], command: str, commits: dict[str, str], repeats: int) -> str:
    def shown(value) -> str:
        return f"{value:.1f}" if isinstance(value, float) else str(value)

    lines = ["# The exact engine and Monte Carlo, side by side", "",
             f"Command: `{command}`; before = `{commits['before']}`, after = `{commits['after']}`. Machine: "
             f"{os.cpu_count()} cores, {platform.machine()}, {platform.platform()}, Python "
             f"{platform.python_version()}; {time.strftime('%Y-%m-%d')}. CPU seconds (user + system) of each whole "
             f"command in a fresh process, the two checkouts alternating, {repeats} times; the ratio is the median of "
             "the repeats' ratios. The before commit computes in Python's fractions always; the after commit in its "
             "default rationals (gmpy2's where installed), and with `SPECPROOF_RATIONALS=fraction` in the rows that "
             "say Fraction.", "",
             "| command | before (CPU s) | after (CPU s) | before / after | after's result |", "|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else ("≥ " + f"{float(r['before_s'][2:]) / r['after_s']:.1f}"
                                                                  if str(r["before_s"]).startswith(">") else "–")
        lines.append(f"| {r['label']} | {shown(r['before_s'])} | {shown(r['after_s'])} | {ratio} | "
                     f"{r['after_out'] or '–'} |")
    lines += ["", "Where both finished, the two outputs' verdict and `E[τ]` lines are equal (checked by the script: a "
                  "row whose outputs differ stops it)."]
    lines += [""] + [f"* Refused by the before checkout: {r['label']}: {r['before_out'] or '(no message)'}"
              for r in rows if r["before_s"] == "refused"]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = two_commit_parser("reports/exact_side_by_side.md")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args()
    roots, commits = checkouts(args)
    rows = read_rows(parser, args.rows, ROW_KEYS) if args.rows else measure(roots, args.repeats, args.timeout)
    for r in rows:
        if isinstance(r["before_s"], float) and isinstance(r["after_s"], float) and r["before_out"] != r["after_out"]:
            raise SystemExit(f"{r['label']}: the outputs differ:\n  before: {r['before_out']}\n  after: {r['after_out']}")
    command = portable_command(["python3", "benchmarks/exact_side_by_side.py", *sys.argv[1:]])
    text = render(rows, command, commits, args.repeats)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
