"""The trained draft against the self-skip draft: writes ``reports/trained_draft.md`` and ``trained_draft.png``.

Usage: ``python3 benchmarks/trained_draft.py [--trained smollm2-draft] [--draft self:skip=12,14,16,18]
[--target smollm2] [--questions 20] [--new-tokens 64] [--depth 4] [--out reports/trained_draft.md]``.

Reads the trained draft's ``training.json`` (``specproof train-draft``: its command, stages' seconds, loss of
every step, head coverage, weights' SHA-256 and acceptance check) and measures, on MT-bench's first
``--questions`` first turns at temperature 1 with nothing cut, for both drafts:

* per-token acceptance ``Σ min(p, q)`` on target continuations of ``--new-tokens`` tokens
  (:func:`simulator.real.overlaps.measure_overlaps`);
* acceptance per position: ``tv-sps`` on a chain of depth ``--depth`` in the KV-cached serving loop, the share of
  rounds whose ``k``-th draft token is accepted among those whose first ``k − 1`` were;
* a draft pass's cost in target-only decoding steps, from the same runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from simulator.drafting import FixedShape
from simulator.real.causal_lm import Processing, load_causal_lm, load_pair, load_tokenizer
from simulator.real.fetch import cache_dir, fetch
from simulator.real.kv_cache import CachedLM
from simulator.real.overlaps import measure_overlaps
from simulator.real.spec_bench import chat_ids, read_questions, speculative_generate, target_generate
from simulator.real.trained_draft import TRAINING_RECORD, trained_directory
from simulator.trees import make_topology
from specproof.reports.portable import portable_command


def per_position(accepted: list[list[int]], depth: int) -> list[tuple[float, float, int]]:
    """``(rate, SE clustered by question, rounds)`` of ``P(position k accepted | positions < k accepted)`` for k =
    1..depth, from accepted draft tokens per round (a list per question)."""
    out = []
    for k in range(1, depth + 1):
        reached = [np.array([a >= k - 1 for a in q], float) for q in accepted]
        won = [np.array([a >= k for a in q], float) for q in accepted]
        n, w = np.array([r.sum() for r in reached]), np.array([x.sum() for x in won])
        if not n.sum():
            out.append((math.nan, math.nan, 0))  # no round reached position k
            continue
        rate = w.sum() / n.sum()
        q = len(n)
        se = math.sqrt(q / (q - 1) * float(((w - rate * n) ** 2).sum())) / n.sum() if q > 1 else math.nan
        out.append((float(rate), se, int(n.sum())))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trained", default="smollm2-draft")
    parser.add_argument("--draft", default="self:skip=12,14,16,18")
    parser.add_argument("--target", default="smollm2")
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--out", default="reports/trained_draft.md")
    args = parser.parse_args()
    command = portable_command(["python3", "benchmarks/trained_draft.py", *sys.argv[1:]])
    load_start, wall = os.getloadavg()[0], time.perf_counter()
    folder = trained_directory(args.trained, cache_dir()) if not Path(args.trained).is_dir() else Path(args.trained)
    record = json.loads((folder / TRAINING_RECORD).read_text())
    questions = read_questions(str(fetch("mt-bench")))[:args.questions]

    overlaps = measure_overlaps(args.target, [args.draft, str(folder)], questions, new_tokens=args.new_tokens)
    draft, target = load_pair(args.draft, args.target, torch.float32)
    trained = load_causal_lm(str(folder), torch.float32, "draft")
    tokenizer, _ = load_tokenizer(args.target)
    stop = [tokenizer.eos_token_id]
    processing = Processing()
    shape = FixedShape(make_topology("chain", args.depth, 1), "iid")
    measured = {}
    for name, model in ((args.draft, draft), (str(folder), trained)):
        accepted, draft_seconds, draft_passes, base_seconds, base_passes = [], 0.0, 0, 0.0, 0
        for i, q in enumerate(questions):
            context = chat_ids(tokenizer, [{"role": "user", "content": q["turns"][0]}])
            base = CachedLM(target, processing)
            target_generate(base, context, 16, i, stop)  # a short target-only run: the cost unit
            base_seconds, base_passes = base_seconds + base.seconds, base_passes + base.passes
            small = CachedLM(model, processing)
            out = speculative_generate(small, CachedLM(target, processing), context, shape, "tv-sps",
                                       args.new_tokens, i, stop)
            accepted.append([length - 1 for length in out.accept_lengths])
            draft_seconds, draft_passes = draft_seconds + small.seconds, draft_passes + small.passes
        measured[name] = (per_position(accepted, args.depth), draft_seconds / draft_passes / (base_seconds / base_passes))
        print(f"{name}: done", file=sys.stderr)
    write(args, command, record, folder, overlaps, measured, (load_start, os.getloadavg()[0]),
          time.perf_counter() - wall)
    print(f"written to {args.out}", file=sys.stderr)


def write(args, command, record, folder, overlaps, measured, load, seconds) -> None:
    out = Path(args.out)
    trained_key = str(folder)
    plan, acc = record["plan"], record.get("acceptance") or {}
    stats = {name: (float(s.overlap.mean()),
                    float(np.std([s.overlap[s.question == i].mean() for i in np.unique(s.question)], ddof=1)
                          / math.sqrt(len(np.unique(s.question)))))
             for name, s in overlaps.items()}
    labels = {args.draft: f"`{args.draft}`", trained_key: f"`{args.trained}`"}
    lines = [
        "# A trained draft for SmolLM2-135M-Instruct",
        "",
        f"Generated by `{command}` on {datetime.date.today().isoformat()} in {seconds / 60:.1f} min "
        f"({platform.machine()}, {torch.get_num_threads()} torch threads, {os.cpu_count()} cores; 1-minute load "
        f"average {load[0]:.1f} before and {load[1]:.1f} after), from the draft `{args.trained}` made by "
        f"`{record['command']}` ({record['machine']}, torch {record['torch']}).",
        "",
        "## How it was made",
        "",
        f"The target answered {plan['prompts']} instructions of simulator/data/train_instructions.txt (written for "
        f"specproof, none of MT-bench's) {plan['samples']} times each, sampling at temperature 1, up to "
        f"{plan['new_tokens']} tokens: {record['answer_tokens']:,} answer tokens, each with the target's top "
        f"{plan['label_tokens']} probabilities as its label. The draft is the target's class with "
        f"{len(plan['layers'])} decoder layers, started from the target's layers {plan['layers']}, its embeddings "
        f"the target's (frozen), its head the {plan['head_tokens']:,} tokens with the most label mass "
        f"({record['head_coverage']:.2%} of it). It was trained {plan['epochs']} epochs, "
        f"{len(record['losses'])} steps of {plan['batch_sequences']} answers, on the cross-entropy of the labels "
        f"(AdamW, peak learning rate {plan['learning_rate']:g}, warm-up then cosine), seed {plan['seed']}.",
        "",
        f"Time: generating {record['seconds']['generate'] / 60:.1f} min, training "
        f"{record['seconds']['train'] / 60:.1f} min, checking {record['seconds'].get('check', 0) / 60:.1f} min; "
        f"the whole command {record['seconds'].get('command', 0) / 60:.1f} min (the bar: at most 30 on 2 cores). "
        f"Weights: {', '.join(f'`{k}` SHA-256 `{v}`' for k, v in record['weights_sha256'].items())} "
        f"(in the cache, not committed: over 10 MB).",
        "",
        "![loss of every training step](trained_draft.png)",
        "",
        "## Acceptance and cost against the self-skip draft",
        "",
        f"MT-bench's first {args.questions} first turns, temperature 1, nothing cut. Σ min(p, q): the mean over "
        f"every position of {args.new_tokens}-token target continuations (± SE across questions). Per position: "
        f"`tv-sps` on a chain of depth {args.depth} in the serving loop, the share of rounds whose k-th draft token "
        "is accepted among those that reached it (± SE clustered by question). Cost: a draft pass in target-only "
        "decoding steps, measured in the same runs.",
        "",
        "| draft | Σ min(p, q) | " + " | ".join(f"position {k}" for k in range(1, args.depth + 1))
        + " | draft pass / target step |",
        "|---|---|" + "---|" * args.depth + "---|",
    ]
    for name in (args.draft, trained_key):
        positions, cost = measured[name]
        mean, se = stats[name]
        lines.append(f"| {labels[name]} | {mean:.3f} ± {se:.3f} | "
                     + " | ".join(f"{r:.3f} ± {s:.3f}" if n else "—" for r, s, n in positions) + f" | {cost:.3f} |")
    if acc:
        lines += ["", f"The command's own check (MT-bench's first {len(acc['questions'])} first turns, "
                      f"{acc['tokens']} positions): Σ min(p, q) = {acc['mean']:.4f} ± {acc['se_across_questions']:.4f}."]
    lines.append("")
    out.write_text("\n".join(lines))
    _plot(out.with_suffix(".png"), record["losses"], measured, labels, args.depth)


def _plot(path: Path, losses, measured, labels, depth) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(range(1, len(losses) + 1), losses, lw=1)
    left.set_xlabel("training step")
    left.set_ylabel("cross-entropy of the target's labels (nats)")
    left.set_title("loss", fontsize=9)
    for name, (positions, _) in measured.items():
        right.errorbar(range(1, depth + 1), [p[0] for p in positions], yerr=[p[1] for p in positions], marker="o",
                       capsize=3, label=labels[name].strip("`"))
    right.set_xticks(range(1, depth + 1))
    right.set_xlabel("position in the chain")
    right.set_ylabel("P(accepted | earlier positions accepted)")
    right.set_ylim(0, 1)
    right.legend(fontsize=8)
    right.set_title("acceptance per position, tv-sps chain", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


if __name__ == "__main__":
    main()
