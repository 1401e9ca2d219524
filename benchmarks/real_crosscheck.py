"""The exact cross-check on a real trained pair, rule by rule: writes ``reports/real_crosscheck.md`` and ``.json``.

Usage: ``python3 benchmarks/real_crosscheck.py [--rounds 2000] [--mc-trials 4000] [--top-k 3] [--threads N]
[--target smollm2] [--draft self:skip=12,14,16,18] [--prompt TEXT] [--cache-dir DIR]
[--out reports/real_crosscheck.md]``.

For MT-bench's first question under the chat template, SmolLM2-135M-Instruct (``specproof fetch smollm2``) and its
own layers as draft, top-k on both sides, chain (depth 2) and complete tree (b = 2, depth 2): each rule's exact
verdict and TVD against the target's joint from plain forward passes, and three estimates of the first round's
accepted length that must agree (exact, Monte Carlo on the same rows, real first rounds of the KV-cached loop).
``specproof.reports.real_crosscheck`` does the work; ``specproof certify --model causal-lm`` certifies one rule
the same way. About a quarter of an hour on 2 cores at the defaults (the committed report: 1,038 s); the real
rounds take most of it (``--rounds``).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from specproof.reports.portable import portable_command
from specproof.reports.real_crosscheck import DRAFT, PROMPT, TARGET, TOP_K, run_crosscheck, write_real_crosscheck_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default=TARGET)
    parser.add_argument("--draft", default=DRAFT)
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--top-k", type=int, default=TOP_K)
    parser.add_argument("--rounds", type=int, default=2000, help="real first rounds per row")
    parser.add_argument("--mc-trials", type=int, default=4000, help="Monte Carlo trials per row")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--cache-dir")
    parser.add_argument("--out", default="reports/real_crosscheck.md")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    command = portable_command(["python3", "benchmarks/real_crosscheck.py", *sys.argv[1:]])
    before = os.getloadavg()[0]

    def tick(stage: str, total: int) -> None:
        tick.done += 1
        print(f"{stage}: {tick.done}/{total}", file=sys.stderr, flush=True)
    tick.done = 0

    rows, meta = run_crosscheck(args.target, args.draft, args.prompt, args.top_k, args.rounds, args.mc_trials,
                                args.cache_dir, tick)
    write_real_crosscheck_report(args.out, rows, meta, command, (before, os.getloadavg()[0]))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
