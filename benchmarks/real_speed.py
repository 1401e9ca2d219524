"""Tokens per second on a real trained pair: transformers beside specproof's KV-cached path, the target's own
layers beside a trained draft, in one run.

Usage: ``python3 benchmarks/real_speed.py [--target smollm2] [--draft self:skip=12,14,16,18]
[--trained smollm2-draft] [--prompts 20] [--choice-prompts 3] [--new-tokens 64] [--verifier-prompts 2]
[--device cpu|cuda] [--dtype float32|bfloat16] [--out reports/real_speed.md]``.

The first turns of MT-bench's questions under the chat template, sampled at temperature 1 with no top-k or top-p
on both sides, each answer up to ``--new-tokens`` tokens or the end-of-sequence token. Three stages:

1. *choice* — on ``--choice-prompts`` questions after the first ``--prompts`` (so the shapes are not chosen on
   the prompts they are then measured on), the trained draft's candidate trees and rules, each against
   target-only decoding: the fastest chain, the fastest complete tree, and the fastest of the rules
   ``reports/real_pair.md`` ranks best (TRV, and GBV on multi-chains);
2. *side by side* — per prompt of the first ``--prompts``, in turn (so machine load falls on all alike):
   transformers' ``generate(do_sample=True, top_k=0)``, specproof's target-only decoding, assisted generation
   and ``tv-sps`` on a chain of depth 3 with the self-skip draft, assisted generation with the trained draft
   (``num_assistant_tokens`` the chosen chain's depth, constant schedule, confidence threshold 0: the same rule as
   ``tv-sps`` on that chain), and the three chosen configurations with it. Speed-ups are per prompt against
   target-only on the same prompt, with their standard error across prompts;
3. *per verifier* — every verifier of the real-pair report on its shapes with the trained draft over
   ``--verifier-prompts`` prompts, with the draft/target cost per step that explains its speed-up.

Target forward passes of transformers' generation are counted by a hook. One warm-up generation per method is
not timed.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import transformers

from simulator.drafting import FixedShape
from simulator.real.causal_lm import Processing, check_vocabularies, load_causal_lm, load_pair, load_tokenizer
from simulator.real.fetch import fetch
from simulator.real.kv_cache import CachedLM
from simulator.real.spec_bench import chat_ids, read_questions, speculative_generate, target_generate
from simulator.trees import make_topology
from specproof.reports.portable import portable_command

#: the per-verifier table's verifiers and shapes (the real-pair report's)
SHAPES = {"chain": ("chain", 3, 1), "complete": ("complete", 3, 2), "multi-chain": ("multi-chain", 3, 3)}
RULES = [("tv-sps", "chain", "iid"), ("tv-rrs", "chain", "iid"), ("tv-rrsw", "chain", "without-replacement"),
         ("tv-kseq", "chain", "iid"), ("bv", "chain", "iid"), ("trv", "chain", "iid"), ("lv-rrs", "chain", "iid"),
         ("gbv", "multi-chain", "iid"), ("tv-rrs", "complete", "iid"), ("trv", "complete", "iid")]
#: the choice stage's candidates with the trained draft: (group, verifier, topology, depth, branching)
CANDIDATES = ([("chain", "tv-rrs", "chain", d, 1) for d in (1, 2, 3, 4)]
              + [("complete", "tv-rrs", "complete", d, 2) for d in (1, 2, 3)]
              + [("best rule", "trv", "chain", d, 1) for d in (2, 3)]
              + [("best rule", "trv", "complete", d, 2) for d in (1, 2)]
              + [("best rule", "gbv", "multi-chain", d, 2) for d in (2, 3)])


class PassCounter:
    """Counts a model's forward calls (a hook), the target passes a generation costs."""

    def __init__(self, model) -> None:
        self.calls = 0
        model.register_forward_hook(lambda *_: setattr(self, "calls", self.calls + 1))


def synchronise(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(device: str, fn):
    synchronise(device)
    start = time.perf_counter()
    value = fn()
    synchronise(device)
    return value, time.perf_counter() - start


def mean_se(values) -> tuple[float, float]:
    array = np.asarray(values, dtype=float)
    return float(array.mean()), float(array.std(ddof=1) / math.sqrt(len(array))) if len(array) > 1 else math.nan


@dataclass
class Method:
    """One side-by-side method's per-prompt tokens, seconds and target passes."""

    label: str
    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    passes: list[int] = field(default_factory=list)
    draft_seconds: float = 0.0
    draft_passes: int = 0

    def add(self, tokens: int, seconds: float, passes: int) -> None:
        self.tokens.append(tokens)
        self.seconds.append(seconds)
        self.passes.append(passes)

    @property
    def rate(self) -> float:
        return sum(self.tokens) / sum(self.seconds)


def shape_name(topology: str, depth: int, branching: int) -> str:
    return f"{topology} ({depth}, {branching})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="smollm2")
    parser.add_argument("--draft", default="self:skip=12,14,16,18")
    parser.add_argument("--trained", default="smollm2-draft")
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--choice-prompts", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--verifier-prompts", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="reports/real_speed.md")
    args = parser.parse_args()
    command = portable_command(["python3", "benchmarks/real_speed.py", *sys.argv[1:]])
    load_start, wall_start = os.getloadavg()[0], time.perf_counter()

    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    draft, target = load_pair(args.draft, args.target, dtype, args.device)
    trained = load_causal_lm(args.trained, dtype, "draft", args.device)
    check_vocabularies(trained, target)
    tokenizer, _ = load_tokenizer(args.target)
    stop = [tokenizer.eos_token_id]
    questions = read_questions(str(fetch("mt-bench")))
    prompts = [chat_ids(tokenizer, [{"role": "user", "content": q["turns"][0]}])
               for q in questions[:args.prompts + args.choice_prompts]]
    measured, choosing = prompts[:args.prompts], prompts[args.prompts:]
    processing = Processing()
    counter = PassCounter(target)

    def ours(model, context, seed, verifier=None, topology=("chain", 3, 1)):
        """specproof's decoding of ``context``: target-only, or ``verifier`` on ``topology`` with ``model``."""
        big = CachedLM(target, processing)
        if verifier is None:
            return target_generate(big, context, args.new_tokens, seed, stop), None, big
        small = CachedLM(model, processing)
        shape = FixedShape(make_topology(*topology), "iid")
        return speculative_generate(small, big, context, shape, verifier, args.new_tokens, seed, stop), small, big

    def hf(context, assistant=None, assistant_tokens=3):
        ids = torch.tensor([context], device=target.device)
        if assistant is not None:
            for key, value in (("num_assistant_tokens", assistant_tokens),
                               ("num_assistant_tokens_schedule", "constant"),
                               ("assistant_confidence_threshold", 0.0)):
                setattr(assistant.generation_config, key, value)  # transformers reads them from the assistant
        before = counter.calls
        out = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0,
                              top_p=1.0, max_new_tokens=args.new_tokens, assistant_model=assistant)
        return out.shape[1] - ids.shape[1], counter.calls - before

    warm = prompts[0][:32]
    hf(warm), hf(warm, draft), hf(warm, trained, 2), ours(None, warm, 0), ours(draft, warm, 0, "tv-sps")
    ours(trained, warm, 0, "tv-rrs")

    # 1. choice
    choice_rows = []
    base_rate = []
    for i, context in enumerate(choosing):
        result, s = timed(args.device, lambda: ours(None, context, args.seed + 500 + i)[0])
        base_rate.append(len(result.tokens) / s)
    for group, verifier, topology, depth, branching in CANDIDATES:
        ups = []
        for i, context in enumerate(choosing):
            result, s = timed(args.device, lambda: ours(trained, context, args.seed + 500 + i, verifier,
                                                        (topology, depth, branching))[0])
            ups.append(len(result.tokens) / s / base_rate[i])
        choice_rows.append((group, verifier, shape_name(topology, depth, branching), (topology, depth, branching),
                            float(np.mean(ups))))
        print(f"choice {verifier} {shape_name(topology, depth, branching)}: x{np.mean(ups):.2f}", file=sys.stderr)
    chosen = {}
    for group in ("chain", "complete", "best rule"):
        best = max((r for r in choice_rows if r[0] == group), key=lambda r: r[4])
        chosen[group] = best
    chain_depth = chosen["chain"][3][1]

    # 2. side by side
    methods = {
        "generate": Method("transformers `generate(do_sample=True, top_k=0)`"),
        "target-only": Method("specproof target-only (KV cache)"),
        "assisted-self": Method(f"transformers assisted generation, `{args.draft}` (3 assistant tokens, constant)"),
        "tv-sps-self": Method(f"specproof `tv-sps`, chain (3, 1), `{args.draft}`"),
        "assisted-trained": Method(f"transformers assisted generation, `{args.trained}` ({chain_depth} assistant "
                                   "tokens, constant)"),
    }
    for group in ("chain", "complete", "best rule"):
        _, verifier, name, _, _ = chosen[group]
        methods[group] = Method(f"specproof `{verifier}`, {name}, `{args.trained}`")
    for i, context in enumerate(measured):
        seed = args.seed + i
        (new, passes), s = timed(args.device, lambda: hf(context))
        methods["generate"].add(new, s, passes)
        (result, _, big), s = timed(args.device, lambda: ours(None, context, seed))
        methods["target-only"].add(len(result.tokens), s, result.target_passes)
        methods["target-only"].draft_seconds += big.seconds  # target-only step seconds, the cost unit
        methods["target-only"].draft_passes += big.passes
        (new, passes), s = timed(args.device, lambda: hf(context, draft, 3))
        methods["assisted-self"].add(new, s, passes)
        (result, small, _), s = timed(args.device, lambda: ours(draft, context, seed, "tv-sps"))
        methods["tv-sps-self"].add(len(result.tokens), s, result.target_passes)
        methods["tv-sps-self"].draft_seconds += small.seconds
        methods["tv-sps-self"].draft_passes += small.passes
        (new, passes), s = timed(args.device, lambda: hf(context, trained, chain_depth))
        methods["assisted-trained"].add(new, s, passes)
        for group in ("chain", "complete", "best rule"):
            _, verifier, _, topology, _ = chosen[group]
            (result, small, _), s = timed(args.device, lambda: ours(trained, context, seed, verifier, topology))
            methods[group].add(len(result.tokens), s, result.target_passes)
            methods[group].draft_seconds += small.seconds
            methods[group].draft_passes += small.passes
        print(f"prompt {i}: done", file=sys.stderr)
    load_side = os.getloadavg()[0]
    base = methods["target-only"]
    step = base.draft_seconds / base.draft_passes  # one target-only decoding step, in seconds

    def speedups(m: Method) -> list[float]:
        return [(t / s) / (bt / bs) for t, s, bt, bs in zip(m.tokens, m.seconds, base.tokens, base.seconds)]

    # 3. per verifier, trained draft
    rows = []
    for verifier, name, scheme in RULES:
        shape = FixedShape(make_topology(*SHAPES[name]), scheme)
        totals = dict(tokens=0, seconds=0.0, emitted=0, steps=0, draft_passes=0, draft_seconds=0.0,
                      target_seconds=0.0, base_tokens=0, base_seconds=0.0)
        for i, context in enumerate(measured[:args.verifier_prompts]):
            baseline = target_generate(CachedLM(target, processing), context, args.new_tokens, args.seed + i, stop)
            small, big = CachedLM(trained, processing), CachedLM(target, processing)
            result = speculative_generate(small, big, context, shape, verifier, args.new_tokens, args.seed + i, stop)
            for key, value in (("tokens", len(result.tokens)), ("seconds", result.seconds),
                               ("emitted", sum(result.accept_lengths)), ("steps", len(result.accept_lengths)),
                               ("draft_passes", result.draft_passes), ("draft_seconds", small.seconds),
                               ("target_seconds", big.seconds), ("base_tokens", len(baseline.tokens)),
                               ("base_seconds", baseline.seconds)):
                totals[key] += value
        unit = totals["base_seconds"] / totals["base_tokens"]
        steps = totals["steps"]
        draft_cost, target_cost = totals["draft_seconds"] / steps / unit, totals["target_seconds"] / steps / unit
        rows.append((verifier, name, scheme, totals["emitted"] / steps, totals["draft_passes"] / steps, draft_cost,
                     target_cost, totals["tokens"] / steps / (draft_cost + target_cost),
                     (totals["tokens"] / totals["seconds"]) * unit))
        print(f"{verifier} {name}: x{rows[-1][-1]:.2f}", file=sys.stderr)

    write(args, command, methods, speedups, step, chosen, choice_rows, rows,
          (load_start, load_side, os.getloadavg()[0]), time.perf_counter() - wall_start, len(choosing))
    print(f"written to {args.out}", file=sys.stderr)


def write(args, command, methods, speedups, step, chosen, choice_rows, rows, load, seconds, choice_count) -> None:
    """``--out``: the three stages' tables."""
    cores = os.cpu_count()
    lines = [
        "# Real pair speed: specproof's KV-cached path beside transformers, two drafts",
        "",
        f"Generated by `{command}` on {datetime.date.today().isoformat()} in {seconds / 60:.1f} min; machine: "
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, device "
        f"`{args.device}` ({torch.cuda.get_device_name() if args.device.startswith('cuda') else 'CPU'}), dtype "
        f"{args.dtype}; torch {torch.__version__}, transformers {transformers.__version__}, Python "
        f"{platform.python_version()}. 1-minute load average: {load[0]:.1f} at the start, {load[1]:.1f} after the "
        f"side-by-side runs, {load[2]:.1f} at the end, on {cores} cores (this benchmark keeps both busy; the "
        "timings hold for a machine doing nothing else).",
        "",
        f"Target `{args.target}` (SmolLM2-135M-Instruct: 30 layers, vocabulary 49,152). Drafts: `{args.draft}` "
        f"(the target's own layers, sharing its tensors) and `{args.trained}` (trained for the target by "
        "`specproof train-draft`: 3 layers, a pruned head of 8,192 tokens; reports/trained_draft.md). MT-bench's "
        f"first {len(methods['generate'].tokens)} questions (first turn, chat template), up to {args.new_tokens} new "
        "tokens or the end-of-sequence token; sampling at temperature 1, no top-k or top-p, on both sides.",
        "",
        "## Choosing the trained draft's trees",
        "",
        f"Speed-up over target-only decoding on MT-bench questions {args.prompts + 1}–{args.prompts + choice_count} "
        "(not among the measured ones), the mean of per-question ratios. Shapes are (depth, branching); the fastest "
        "of each group goes on to the side-by-side run.",
        "",
        "| group | rule | shape | speed-up | chosen |",
        "|---|---|---|---|---|",
    ]
    for group, verifier, name, _, up in choice_rows:
        mark = "yes" if chosen[group][2] == name and chosen[group][1] == verifier else ""
        lines.append(f"| {group} | `{verifier}` | {name} | {up:.2f} | {mark} |")
    lines += [
        "",
        "## Side by side",
        "",
        "Methods alternate prompt by prompt, so machine load falls on all alike. Speed-up: per prompt, the method's "
        "tokens/s over target-only's on the same prompt; mean ± standard error across prompts.",
        "",
        "| method | tokens | seconds | tokens/s | speed-up over target-only | tokens per target pass (± SE) |",
        "|---|---|---|---|---|---|",
    ]
    for key, m in methods.items():
        per_pass = [t / p for t, p in zip(m.tokens, m.passes)]
        pass_text = "1" if key in ("generate", "target-only") else "{:.3f} ± {:.3f}".format(*mean_se(per_pass))
        up = "1" if key == "target-only" else "{:.2f} ± {:.2f}".format(*mean_se(speedups(m)))
        lines.append(f"| {m.label} | {sum(m.tokens)} | {sum(m.seconds):.1f} | {m.rate:.2f} | {up} | {pass_text} |")
    generate, base = methods["generate"], methods["target-only"]
    chain_depth = chosen["chain"][3][1]
    best_key = max(("chain", "complete", "best rule"), key=lambda k: np.mean(speedups(methods[k])))
    best_mean, best_se = mean_se(speedups(methods[best_key]))
    self_pass = [t / p for t, p in zip(methods["tv-sps-self"].tokens, methods["tv-sps-self"].passes)]
    assisted_pass = [t / p for t, p in zip(methods["assisted-self"].tokens, methods["assisted-self"].passes)]
    (s_mean, s_se), (a_mean, a_se) = mean_se(self_pass), mean_se(assisted_pass)
    trained_cost = [methods[k].draft_seconds / methods[k].draft_passes / step for k in ("chain", "complete", "best rule")]
    self_cost = methods["tv-sps-self"].draft_seconds / methods["tv-sps-self"].draft_passes / step
    lines += [
        "",
        f"- Fastest with the trained draft: **{methods[best_key].label}**, **{best_mean:.2f} ± {best_se:.2f}×** "
        "target-only's tokens/s (the bar: at least 1.2).",
        f"- A draft pass costs {min(trained_cost):.3f}–{max(trained_cost):.3f} of a target-only step with "
        f"`{args.trained}` (the bar: at most 0.15) and {self_cost:.2f} with `{args.draft}`; a target-only step "
        f"took {step * 1e3:.1f} ms.",
        f"- `generate`'s tokens/s over specproof's target-only: **{generate.rate / base.rate:.2f}** (the bar: at "
        "most 1.25).",
        f"- `tv-sps` against assisted generation, both with `{args.draft}` on a chain of depth 3: "
        f"**{methods['tv-sps-self'].rate / methods['assisted-self'].rate:.2f}×** the tokens/s (the bar: at least 1); "
        f"tokens per target pass {s_mean:.3f} vs {a_mean:.3f}, a difference of "
        f"{abs(s_mean - a_mean) / math.hypot(s_se, a_se):.2f} combined standard errors (the bar: under 2).",
        f"- With `{args.trained}`, `{chosen['chain'][1]}` on {chosen['chain'][2]} against assisted generation with "
        f"{chain_depth} assistant tokens: **{methods['chain'].rate / methods['assisted-trained'].rate:.2f}×** the "
        "tokens/s.",
        "",
        f"## Speed-up of every verifier over target-only, `{args.trained}`",
        "",
        "A step (one round) costs its draft passes, one per tree level, and one target pass over the tree; costs "
        "below are seconds per step in units of one target-only decoding step, measured in the same runs. The "
        "speed-up is the tokens kept per step (block efficiency less the last round's overshoot past the "
        "token limit) over the step's cost, less what drafting and the verifier themselves take (the gap between "
        f"the last two columns). MT-bench's first {args.verifier_prompts} questions, first turn. The self-skip "
        "draft's rows are in reports/real_pair.md's speed table.",
        "",
        "| verifier | shape | drafting | block efficiency | draft passes per step | draft cost per step | "
        "target cost per step | kept tokens per step / cost | measured speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for verifier, name, scheme, efficiency, per_step, draft_cost, target_cost, predicted, measured in rows:
        lines.append(f"| `{verifier}` | {name} {SHAPES[name][1:]} | {scheme} | {efficiency:.3f} | {per_step:.2f} | "
                     f"{draft_cost:.2f} | {target_cost:.2f} | {predicted:.2f} | {measured:.2f} |")
    lines.append("")
    Path(args.out).write_text("\n".join(lines))


if __name__ == "__main__":
    main()
