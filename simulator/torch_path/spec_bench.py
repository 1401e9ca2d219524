"""Speculative generation on real model pairs and a Spec-Bench-compatible runner (``specproof real``,
docs/cli/real.md).

:func:`speculative_generate` drafts a tree layer by layer with the draft model, scores it with the target in one
pass (:meth:`simulator.torch_path.real.CausalLMPair.batch_rows`) and lets the batched torch verifier decide
(:func:`simulator.torch_path.verify.torch_verify`); :func:`target_generate` is the target-only baseline for block
efficiency and tokens/s. :func:`run_spec_bench` reads and writes Spec-Bench's files (Xia et al. 2024).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError
from simulator.models import ModelView
from simulator.randomness import SamplingRandomness
from simulator.torch_path.real import CausalLMPair, Processing
from simulator.torch_path.verify import TORCH_VERIFIERS, torch_verify
from simulator.verifiers import VERIFIERS


@dataclass
class Generated:
    tokens: list[int]
    accept_lengths: list[int] = field(default_factory=list)  # tokens emitted per step
    seconds: float = 0.0


def speculative_generate(pair: CausalLMPair, drafter: FixedShape, verifier: str, new_tokens: int,
                         seed: int) -> Generated:
    """``new_tokens`` tokens after ``pair.prompt`` by draft–verify rounds (the last round may overshoot; it is
    cut)."""
    usable = [v for v in TORCH_VERIFIERS if VERIFIERS[v].array_rule.target_completion]
    if verifier not in usable:
        raise InvalidParameterError("verifier", f"specproof real runs the torch path's verifiers whose later "
                                                f"tokens follow the target: {usable}")
    start = time.perf_counter()
    rng, uniforms = SamplingRandomness([seed, 0]), np.random.default_rng([seed, 1])
    out = Generated([])
    view = ModelView(pair, "float")
    while len(out.tokens) < new_tokens:
        draft = drafter.draft(view, rng)  # a draft pass per layer, one target pass for the tree
        tree, n = draft.tree, len(draft.tree)
        zeros = (0.0,) * pair.vocab
        p = torch.tensor([[row if row is not None else zeros for row in draft.p]], dtype=torch.float64)
        q = torch.tensor([draft.q], dtype=torch.float64)
        tokens = torch.tensor([[0] + [int(t) for t in tree.tokens[1:]]])
        u = torch.tensor(uniforms.random((1, 2 * n + 2)))
        node, y = torch_verify(verifier, tree.parents, tokens, p, q, u)
        block = list(tree.path(int(node[0]))) + [int(y[0])]
        out.tokens.extend(block)
        out.accept_lengths.append(len(block))
        view = view.advanced(tuple(block))
    out.tokens = out.tokens[:new_tokens]
    out.seconds = time.perf_counter() - start
    return out


@torch.no_grad()
def target_generate(pair: CausalLMPair, new_tokens: int, seed: int) -> Generated:
    """Target-only decoding: one token per forward pass from the processed target row."""
    start = time.perf_counter()
    rng = SamplingRandomness([seed, 2])
    out = Generated([])
    context: tuple[int, ...] = ()
    while len(out.tokens) < new_tokens:
        x = rng.categorical(pair.q(context))
        out.tokens.append(x)
        out.accept_lengths.append(1)
        context = context + (x,)
    out.seconds = time.perf_counter() - start
    return out


@dataclass
class BenchSummary:
    questions: int
    tokens: int  # generated (kept) tokens
    block_efficiency: float  # tokens per target forward pass (mean emitted per step)
    tokens_per_s: float
    baseline_tokens_per_s: float

    @property
    def speedup(self) -> float:
        return self.tokens_per_s / self.baseline_tokens_per_s


def read_questions(path: str) -> list[dict]:
    """Spec-Bench's ``question.jsonl``: one ``{"question_id", "category", "turns": [...]}`` object per line."""
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines()):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            raise InvalidParameterError(f"questions[{i}]", f"not JSON: {err}") from None
        if not isinstance(item, dict) or not isinstance(item.get("turns"), list) or "question_id" not in item:
            raise InvalidParameterError(f"questions[{i}]", "needs question_id and a list of turns")
        out.append(item)
    return out


def run_spec_bench(draft, target, tokenizer, questions: Sequence[dict], verifier: str, drafter: FixedShape,
                   answers: str, new_tokens: int, draft_processing: Processing, target_processing: Processing,
                   seed: int, model_id: str) -> BenchSummary:
    """Answer every turn of every question speculatively (and once target-only, for the baseline); write
    Spec-Bench's answer lines to ``answers``, one per question: ``{"question_id", "answer_id", "model_id",
    "choices": [{"index": 0, "turns": [...], "idxs": [...], "new_tokens": [...], "wall_time": [...],
    "accept_lengths": [[...], ...]}], "tstamp"}``, where ``accept_lengths`` holds the tokens emitted per step
    (accepted draft tokens + 1)."""
    steps, emitted, kept, spec_seconds, base_seconds, base_tokens = 0, 0, 0, 0.0, 0.0, 0
    with open(answers, "w") as out:
        for qi, question in enumerate(questions):
            history: list[int] = []
            turns, idxs, news, walls, accepts = [], [], [], [], []
            for ti, turn in enumerate(question["turns"]):
                history = history + list(tokenizer(str(turn))["input_ids"]) or [0]
                pair = CausalLMPair(draft, target, history, draft_processing, target_processing)
                result = speculative_generate(pair, drafter, verifier, new_tokens, seed + 1000 * qi + ti)
                baseline = target_generate(pair, new_tokens, seed + 1000 * qi + ti)
                history = history + result.tokens
                turns.append(tokenizer.decode(result.tokens))
                idxs.append(len(result.accept_lengths))
                news.append(len(result.tokens))
                walls.append(result.seconds)
                accepts.append(result.accept_lengths)
                steps += len(result.accept_lengths)
                emitted += sum(result.accept_lengths)
                kept += len(result.tokens)
                spec_seconds += result.seconds
                base_seconds += baseline.seconds
                base_tokens += len(baseline.tokens)
            out.write(json.dumps({"question_id": question["question_id"], "answer_id": uuid.uuid4().hex,
                                  "model_id": model_id, "choices": [{"index": 0, "turns": turns, "idxs": idxs,
                                                                      "new_tokens": news, "wall_time": walls,
                                                                      "accept_lengths": accepts}],
                                  "tstamp": time.time()}) + "\n")
    return BenchSummary(len(questions), kept, emitted / steps if steps else 0.0,
                        kept / spec_seconds if spec_seconds else 0.0,
                        base_tokens / base_seconds if base_seconds else 0.0)
