"""What supervision costs per command (reports/supervision.md): wall and CPU time of each command with the
supervisor (the ``specproof`` executable, ``python -m specproof.cli``) and without it (the same command line
called in the process itself, as before supervision), medians of ``--runs`` runs, interleaved so that a change
in the machine's load hits both alike.

    python benchmarks/supervision.py --runs 7 --out reports/supervision.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUPERVISED = [sys.executable, "-m", "specproof.cli"]
UNSUPERVISED = [sys.executable, "-c", "from specproof.cli.app import main; main()"]
COMMANDS = {
    "certify tv-sps (V=3, H=2)": ["certify", "--verifier", "tv-sps"],
    "certify a plugin (examples.plugin_verifier:my_tv)": ["certify", "--verifier", "examples.plugin_verifier:my_tv"],
    "mc tv-sps (5 seeds x 2,000 trials)": ["mc", "--verifier", "tv-sps", "--trials", "2000"],
    "gate examples/specproof.toml (results kept)": ["gate", "--config", "examples/specproof.toml", "--summary",
                                                    "{tmp}/summary.md"],
}


def timed(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, the command's processes together) of one run."""
    before = os.times()
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = os.times()
    if result.returncode not in (0, 1):
        raise SystemExit(f"{command} exited {result.returncode}: {result.stderr[-2000:]}")
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def measure(runs: int) -> list[tuple[str, dict[str, tuple[float, float]]]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in COMMANDS.items():
            args = [a.format(tmp=tmp) for a in args]
            timed(SUPERVISED + args)  # warm: the gate's state, the file cache
            samples: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
            for _ in range(runs):
                samples["with"].append(timed(SUPERVISED + args))
                samples["without"].append(timed(UNSUPERVISED + args))
            rows.append((name, {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
                                for k, v in samples.items()}))
    return rows


def markdown(rows, runs: int, load_before: str, load_after: str) -> str:
    lines = ["# What supervision costs per command", "",
             "Each command with the supervisor (`python -m specproof.cli …`: the command forked once its line is "
             "parsed, the parent waiting for its delivered exit code) and without it (the command line called in "
             "the process itself, as before supervision). Medians of "
             f"{runs} runs each, the two interleaved; CPU is user + system of every process of the run.", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
             f"{platform.system()} {platform.release()}; load average "
             f"{load_before} before, {load_after} after (`uptime`).", "",
             "Produced by `python benchmarks/supervision.py --runs "
             f"{runs} --out reports/supervision.md`.", "",
             "| command | wall with | wall without | wall cost | CPU with | CPU without | CPU cost |",
             "|---|---|---|---|---|---|---|"]
    for name, m in rows:
        (ww, cw), (wo, co) = m["with"], m["without"]
        lines.append(f"| {name} | {ww:.3f} s | {wo:.3f} s | {ww - wo:+.3f} s | {cw:.3f} s | {co:.3f} s | "
                     f"{cw - co:+.3f} s |")
    return "\n".join(lines) + "\n"


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    before = load()
    rows = measure(args.runs)
    text = markdown(rows, args.runs, before, load())
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
