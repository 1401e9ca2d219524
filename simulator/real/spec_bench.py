"""KV-cached speculative generation on real model pairs (:func:`speculative_generate`) and a Spec-Bench-compatible
runner (:func:`run_spec_bench`; ``specproof real``, docs/cli/real.md)."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from simulator.array_ops import categorical
from simulator.drafting import Drafter
from simulator.drafting.arrays import ArrayDrafter, array_drafter
from simulator.errors import InvalidParameterError
from simulator.jsonfile import read_text
from simulator.real.causal_lm import Processing
from simulator.real.kv_cache import CachedLM
from simulator.verifiers import VERIFIERS
from simulator.verifiers.batched.torch_verify import TORCH_VERIFIERS, torch_verify


@dataclass
class Round:
    """One draft–verify round as it was decided: the tree (BFS parents and tokens), the uniforms read, the accepted
    node and the token emitted after it (for the decision-by-decision check against the reference)."""

    context: tuple[int, ...]
    parents: tuple[int, ...]
    tokens: tuple[int, ...]
    draft_uniforms: tuple[float, ...]
    verify_uniforms: tuple[float, ...]
    node: int
    emitted: int


@dataclass(frozen=True)
class RoundRows:
    """What a round's verifier read, for an observer (``observe`` of :func:`speculative_generate`): the round, and
    the draft rows ``p [n, V]`` (zero where the drafter sampled nothing: ``sampled[v]`` false) and target rows
    ``q [n, V]`` on the models' device. The exact expectation of the acceptance given them is the application's
    (:mod:`specproof.reports.real_pair`)."""

    round: Round
    p: torch.Tensor
    q: torch.Tensor
    sampled: tuple[bool, ...]


@dataclass
class Generated:
    tokens: list[int]
    accept_lengths: list[int] = field(default_factory=list)  # tokens emitted per step (target pass)
    seconds: float = 0.0
    draft_passes: int = 0
    target_passes: int = 0
    rounds: list[Round] = field(default_factory=list)


def real_verifiers() -> list[str]:
    """The verifiers ``specproof real`` runs: an array rule whose later tokens follow the target."""
    return [v for v in TORCH_VERIFIERS if VERIFIERS[v].array_rule.target_completion]


@dataclass
class _Source:
    """A round's :class:`simulator.drafting.arrays.RoundSource`: the draft model over its KV cache (``None``: a
    drafter that reads no draft model) and drafting uniforms from a numpy generator."""

    context: list[int]
    draft: CachedLM | None
    generator: np.random.Generator
    vocab: int
    like: torch.Tensor

    def rows(self, parents: Sequence[int], tokens: Sequence[int], nodes: Sequence[int]) -> torch.Tensor:
        if self.draft is None:
            raise InvalidParameterError("draft", "this drafter needs a draft model (--draft)")
        return self.draft.extend(self.context, parents, tokens, [v for v in nodes if v > 0])[-len(nodes):]

    def uniform(self) -> float:
        return float(self.generator.random())


def speculative_generate(draft: CachedLM | None, target: CachedLM, context: Sequence[int],
                         drafter: ArrayDrafter | Drafter, verifier: str, new_tokens: int, seed: int,
                         stop: Sequence[int] = (),
                         observe: Callable[[RoundRows], None] | None = None) -> Generated:
    """Up to ``new_tokens`` tokens after ``context`` by draft–verify rounds (a round may overshoot; the output is
    cut), ending early after a token of ``stop``. ``drafter`` is a reference drafter or its kernel
    (:func:`simulator.drafting.arrays.array_drafter`); ``draft`` may be ``None`` for one that reads no draft model
    (ADED). Drafting reads uniforms from ``numpy.random.default_rng([seed, 0])`` in the reference's order; the
    rule reads ``2n + 2`` per round from ``[seed, 1]``. ``observe`` sees every round's rows; the time it takes is
    not counted in ``seconds``.

    It drafts with a drafter's array kernel (:mod:`simulator.drafting.arrays`; each batch of nodes one draft pass over
    the draft's KV cache), scores the tree with the target in one pass over its KV cache
    (:class:`simulator.real.kv_cache.CachedLM`), and lets the rule's array rule decide
    (:func:`simulator.verifiers.batched.torch_verify.torch_verify`); rows stay tensors on the models' device. On the same uniforms
    it decides exactly as the reference drafting and rule on the same rows (tested). :func:`target_generate` is the
    target-only baseline, cached too.
    """
    if verifier not in real_verifiers():
        raise InvalidParameterError("verifier", f"the real path runs the torch path's verifiers whose later "
                                                f"tokens follow the target: {real_verifiers()}")
    kernel = array_drafter(drafter)
    vocab = target.model.config.vocab_size
    weights = next(target.model.parameters())
    source = _Source(list(context), draft, np.random.default_rng([seed, 0]), vocab,
                     torch.zeros(1, dtype=torch.float64, device=weights.device))
    verifying = np.random.default_rng([seed, 1])
    start = time.perf_counter()
    observed = 0.0
    out = Generated([])
    passes = (draft.passes if draft is not None else 0), target.passes
    while len(out.tokens) < new_tokens and not (out.tokens and out.tokens[-1] in stop):
        drafted = kernel.draft(source)
        parents, tokens = tuple(drafted.parents), drafted.tokens
        n = len(parents)
        q = target.extend(source.context, parents, tokens, range(1, n))
        p = torch.zeros_like(q)
        for v, row in enumerate(drafted.rows):
            if row is not None:
                p[v] = row
        u = verifying.random((1, 2 * n + 2))
        node, y = torch_verify(verifier, parents, torch.tensor([tokens], device=q.device), p[None], q[None],
                               torch.as_tensor(u, device=q.device))
        node, y = int(node[0]), int(y[0])
        path = []
        while node > 0:
            path.insert(0, node)
            node = parents[node]
        block = [tokens[v] for v in path] + [y]
        decided = Round(tuple(source.context), parents, tuple(tokens), tuple(drafted.uniforms), tuple(u[0].tolist()),
                        path[-1] if path else 0, y)
        out.rounds.append(decided)
        if observe is not None:
            before = time.perf_counter()
            observe(RoundRows(decided, p, q, tuple(row is not None for row in drafted.rows)))
            observed += time.perf_counter() - before
        if draft is not None:
            draft.commit([drafted.order[v] for v in path])
        target.commit(path)
        source.context.extend(block)
        kernel = kernel.advance(source.context)
        out.tokens.extend(block)
        out.accept_lengths.append(len(block))
    out.tokens = _cut(out.tokens, new_tokens, stop)
    out.seconds = time.perf_counter() - start - observed
    out.draft_passes = (draft.passes - passes[0]) if draft is not None else 0
    out.target_passes = target.passes - passes[1]
    return out


def target_generate(target: CachedLM, context: Sequence[int], new_tokens: int, seed: int,
                    stop: Sequence[int] = ()) -> Generated:
    """Target-only decoding over the KV cache: one token per forward pass from the processed target row, drawn
    from ``numpy.random.default_rng([seed, 2])``."""
    uniforms = np.random.default_rng([seed, 2])
    start = time.perf_counter()
    out, context = Generated([]), list(context)
    passes = target.passes
    while len(out.tokens) < new_tokens and not (out.tokens and out.tokens[-1] in stop):
        row = target.extend(context, (-1,), (0,), ())
        x = int(categorical(row, torch.as_tensor(uniforms.random(1), device=row.device))[0])
        target.commit(())
        context.append(x)
        out.tokens.append(x)
        out.accept_lengths.append(1)
    out.seconds = time.perf_counter() - start
    out.target_passes = target.passes - passes
    return out


def _cut(tokens: list[int], limit: int, stop: Sequence[int]) -> list[int]:
    """``tokens`` up to ``limit``, and up to the first stop token (kept)."""
    tokens = tokens[:limit]
    for i, x in enumerate(tokens):
        if x in stop:
            return tokens[:i + 1]
    return tokens


@dataclass(frozen=True)
class Answered:
    """One question's totals over its turns: the speculative run and the target-only baseline."""

    question_id: object
    tokens: int  # kept tokens
    emitted: int  # tokens emitted by the rounds (the last round's overshoot included)
    steps: int  # rounds: target passes after the prompt's
    seconds: float
    draft_passes: int
    baseline_tokens: int
    baseline_seconds: float

    @property
    def block_efficiency(self) -> float:
        return self.emitted / self.steps


@dataclass(frozen=True)
class BenchSummary:
    """A run's totals; standard errors are across questions (each question's own block efficiency)."""

    answered: tuple[Answered, ...]

    @property
    def questions(self) -> int:
        return len(self.answered)

    @property
    def tokens(self) -> int:
        return sum(a.tokens for a in self.answered)

    @property
    def block_efficiency(self) -> float:
        """Tokens emitted per target pass (mean tokens per step), over all steps."""
        return sum(a.emitted for a in self.answered) / sum(a.steps for a in self.answered)

    @property
    def block_efficiency_se(self) -> float:
        values = np.array([a.block_efficiency for a in self.answered])
        return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / sum(a.seconds for a in self.answered)

    @property
    def baseline_tokens_per_s(self) -> float:
        seconds = sum(a.baseline_seconds for a in self.answered)
        return sum(a.baseline_tokens for a in self.answered) / seconds if seconds else float("nan")

    @property
    def speedup(self) -> float:
        return self.tokens_per_s / self.baseline_tokens_per_s

    @property
    def draft_passes_per_step(self) -> float:
        return sum(a.draft_passes for a in self.answered) / sum(a.steps for a in self.answered)


def read_questions(path: str) -> list[dict]:
    """Spec-Bench's ``question.jsonl``: one ``{"question_id", "category", "turns": [...]}`` object per line, each
    with at least one turn, a non-empty string, and a ``question_id`` no other line has (answers and
    ``real-report``'s store are keyed by it, as text: ``1`` and ``"1"`` are one key); blank lines are skipped.
    Checked whole before any model loads: :class:`InvalidParameterError` on ``questions`` naming the file and
    line, or the file when it holds no question."""
    out = []
    seen: dict[str, int] = {}
    for number, line in enumerate(read_text(path, "questions").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            raise InvalidParameterError("questions", f"{where}: not JSON: {err}") from None
        if not isinstance(item, dict) or "question_id" not in item or not isinstance(item.get("turns"), list):
            raise InvalidParameterError("questions", f"{where}: needs a question_id and a list of turns")
        if not item["turns"]:
            raise InvalidParameterError("questions", f"{where}: question {item['question_id']!r} has no turns")
        if not all(isinstance(turn, str) and turn.strip() for turn in item["turns"]):
            raise InvalidParameterError("questions", f"{where}: question {item['question_id']!r} has a turn that "
                                                     "is not a non-empty string")
        key = str(item["question_id"])
        if key in seen:
            raise InvalidParameterError("questions", f"{where}: question_id {item['question_id']!r} is line "
                                                     f"{seen[key]}'s too: question ids must be unique (answers and "
                                                     "the report's store are keyed by them)")
        seen[key] = number
        out.append(item)
    if not out:
        raise InvalidParameterError("questions", f"{path} holds no question (one JSON object per line, with "
                                                 "question_id and turns)")
    return out


def shipped_instructions(name: str = "instructions.txt") -> list[str]:
    """Varied instructions shipped with specproof, written for it (none is MT-bench's): ``instructions.txt`` (40),
    ADED's default corpus on a real pair and prompts for anything that must not see MT-bench, and
    ``train_instructions.txt`` (320, across MT-bench's eight categories and everyday advice), the prompts
    ``specproof train-draft`` answers."""
    from importlib.resources import files

    return [line for line in files("simulator").joinpath("data", name).read_text().splitlines() if line.strip()]


def real_drafter(scheme: str, topology, tokenizer, vocab: int, options=None,
                 corpus: Sequence[str] | None = None) -> Drafter:
    """The reference drafter ``specproof real`` runs: a fixed ``topology`` drafted by ``scheme``, DySpec's trees, or
    ADED's tri-gram drafts, whose table starts from ``corpus`` (texts, tokenized without a template; default
    :func:`shipped_instructions`) and learns from every round's output."""
    from simulator.drafting.drafter_registry import DrafterOptions, make_drafter

    options = options or DrafterOptions()
    if scheme == "aded":
        texts = shipped_instructions() if corpus is None else list(corpus)
        ids = [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts]
        options = dataclasses.replace(options, corpus=ids)
    return make_drafter(scheme, topology, options=options, vocab=vocab)


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The token ids of ``messages`` under the tokenizer's chat template, ready for the assistant's reply."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(ids["input_ids"])


def run_spec_bench(draft, target, tokenizer, questions: Sequence[dict], verifier: str, drafter: Drafter,
                   answers: str | None, new_tokens: int, processing: Processing, seed: int, model_id: str,
                   baseline: bool = True, progress=None, max_turns: int | None = None,
                   observe: Callable[[RoundRows], None] | None = None, marks: dict | None = None) -> BenchSummary:
    """Answer every turn of every question speculatively (and target-only, for the baseline, when ``baseline``),
    under the tokenizer's chat template, each turn continuing the conversation with the speculative answer; stop
    at ``new_tokens`` or the end-of-sequence token. Writes Spec-Bench's answer lines to ``answers`` (unless
    ``None``), one per question: ``{"question_id", "answer_id", "model_id", "choices": [{"index": 0, "turns": [...],
    "idxs": [...], "new_tokens": [...], "wall_time": [...], "accept_lengths": [[...], ...]}], "tstamp"}``, where
    ``accept_lengths`` holds the tokens emitted per step (accepted draft tokens + 1). ``progress(i)`` is called
    after question ``i``. ``draft`` is ``None`` for a drafter that reads no draft model (ADED). Every question
    starts from the drafter as given (ADED's table learns within an answer, not from question to question), so
    questions are independent samples for their standard errors. ``max_turns`` keeps only the first turns of each
    question; ``observe`` sees every round's rows (:func:`speculative_generate`); ``marks`` are fields added to every
    answer line (``specproof real``'s ``claim``: whether the rule is lossless under the drafting).

    Spec-Bench's file formats: Xia et al., Findings of ACL 2024, arXiv:2401.07851.
    """
    kernel = array_drafter(drafter)
    stop = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    answered = []
    out = open(answers, "w") if answers is not None else None
    try:
        for qi, question in enumerate(questions):
            messages: list[dict] = []
            turns, idxs, news, walls, accepts = [], [], [], [], []
            totals = dict(tokens=0, emitted=0, steps=0, seconds=0.0, draft_passes=0, baseline_tokens=0,
                          baseline_seconds=0.0)
            for ti, turn in enumerate(question["turns"][:max_turns]):
                messages.append({"role": "user", "content": str(turn)})
                context = chat_ids(tokenizer, messages)
                turn_seed = seed + 1000 * qi + ti
                result = speculative_generate(None if draft is None else CachedLM(draft, processing),
                                              CachedLM(target, processing), context, kernel, verifier, new_tokens,
                                              turn_seed, stop, observe)
                if baseline:
                    base = target_generate(CachedLM(target, processing), context, new_tokens, turn_seed, stop)
                    totals["baseline_tokens"] += len(base.tokens)
                    totals["baseline_seconds"] += base.seconds
                text = tokenizer.decode(result.tokens, skip_special_tokens=True)
                messages.append({"role": "assistant", "content": text})
                turns.append(text)
                idxs.append(len(result.accept_lengths))
                news.append(len(result.tokens))
                walls.append(result.seconds)
                accepts.append(result.accept_lengths)
                totals["tokens"] += len(result.tokens)
                totals["emitted"] += sum(result.accept_lengths)
                totals["steps"] += len(result.accept_lengths)
                totals["seconds"] += result.seconds
                totals["draft_passes"] += result.draft_passes
            answered.append(Answered(question["question_id"], **totals))
            if out is not None:
                out.write(json.dumps({"question_id": question["question_id"], "answer_id": uuid.uuid4().hex,
                                      "model_id": model_id, "choices": [{"index": 0, "turns": turns, "idxs": idxs,
                                                                          "new_tokens": news, "wall_time": walls,
                                                                          "accept_lengths": accepts}],
                                      "tstamp": time.time(), **(marks or {})}) + "\n")
                out.flush()
            if progress is not None:
                progress(qi)
    finally:
        if out is not None:
            out.close()
    return BenchSummary(tuple(answered))
