"""Training a cheap draft for a real target by distillation from the target's own generations (``specproof
train-draft``, docs/torch-path.md, "A trained draft"): :func:`make_draft`."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from simulator.errors import InvalidParameterError

#: ``tick(stage, total)``: one more of ``total`` units of ``stage`` ("generate": answers, "train": steps)
Tick = Callable[[str, int], None]


@dataclass(frozen=True)
class TrainingPlan:
    """What :func:`make_draft` does: ``prompts`` answered ``samples`` times each in batches of
    ``generation_batch``, up to ``new_tokens`` tokens; labels of the target's top ``label_tokens`` tokens; a draft
    from the target's decoder ``layers`` with a head of ``head_tokens`` tokens, trained ``epochs`` times over the
    answers in batches of ``batch_sequences`` at peak ``learning_rate`` (``steps``, when given, stops earlier)."""

    prompts: tuple[str, ...]
    layers: tuple[int, ...]
    head_tokens: int
    samples: int = 1
    new_tokens: int = 192
    generation_batch: int = 32
    label_tokens: int = 32
    epochs: int = 3
    batch_sequences: int = 16
    learning_rate: float = 5e-4
    steps: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.prompts or not all(isinstance(p, str) and p.strip() for p in self.prompts):
            raise InvalidParameterError("prompts", "need at least one non-empty instruction")
        if not self.layers or len(set(self.layers)) != len(self.layers) or min(self.layers) < 0:
            raise InvalidParameterError("layers", f"must be distinct layer numbers ≥ 0, got {self.layers!r}")
        for name in ("head_tokens", "samples", "new_tokens", "generation_batch", "label_tokens", "epochs",
                     "batch_sequences"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(name, f"must be an integer ≥ 1, got {value!r}")
        if self.steps is not None and (isinstance(self.steps, bool) or not isinstance(self.steps, int)
                                       or self.steps < 1):
            raise InvalidParameterError("steps", f"must be an integer ≥ 1 or None, got {self.steps!r}")
        if not (isinstance(self.learning_rate, float) and 0 < self.learning_rate < 1):
            raise InvalidParameterError("learning_rate", f"must lie in (0, 1), got {self.learning_rate!r}")


def check_plan(plan: TrainingPlan, config) -> None:
    """Refuse, before any work, a plan the target (its transformers ``config``) cannot take: a decoder layer it
    does not have (:class:`InvalidParameterError` on ``layers``), a head larger than its vocabulary (on
    ``head_tokens``)."""
    count = config.num_hidden_layers
    if max(plan.layers) >= count:
        raise InvalidParameterError("layers", f"the target has layers 0..{count - 1}, got {plan.layers}")
    if plan.head_tokens > config.vocab_size:
        raise InvalidParameterError("head_tokens", f"the target's vocabulary has {config.vocab_size:,} tokens, so "
                                                   f"the head can keep at most that many, got {plan.head_tokens:,}")


@dataclass
class Generations:
    """The target's answers: token ids of prompt and answer (``sequences``), where each answer starts
    (``starts``), and per answer token the target's top tokens and their probabilities (``label_ids``,
    ``label_probs``: ``[answer length, label_tokens]``), the row the answer's token was sampled from."""

    sequences: list[list[int]] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    label_ids: list[torch.Tensor] = field(default_factory=list)
    label_probs: list[torch.Tensor] = field(default_factory=list)

    @property
    def answer_tokens(self) -> int:
        return sum(len(s) - start for s, start in zip(self.sequences, self.starts))


class _LabelRecorder:
    """A ``generate`` logits processor that records each step's top ``k`` probabilities (at temperature 1, the
    rows the target samples from) and changes nothing."""

    def __init__(self, k: int) -> None:
        self.k, self.ids, self.probs = k, [], []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        top = torch.softmax(scores.float(), dim=-1).topk(self.k, dim=-1)
        self.ids.append(top.indices.to(torch.int32))
        self.probs.append(top.values.to(torch.float16))
        return scores


def stop_tokens(model, tokenizer) -> list[int]:
    """The end-of-sequence ids of ``model``'s generation config and ``tokenizer``."""
    found = model.generation_config.eos_token_id
    ids = list(found) if isinstance(found, (list, tuple)) else [found] if found is not None else []
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return sorted(set(ids))


@torch.no_grad()
def generate_data(target, tokenizer, plan: TrainingPlan, tick: Tick | None = None) -> Generations:
    """The target's answers to every prompt of ``plan``, ``plan.samples`` each, sampled at temperature 1 with
    ``torch.manual_seed(plan.seed, batch)``; an answer ends at its first stop token (kept) or at ``new_tokens``."""
    from transformers import LogitsProcessorList

    from simulator.real.spec_bench import chat_ids

    stops = stop_tokens(target, tokenizer)
    prompts = [chat_ids(tokenizer, [{"role": "user", "content": text}]) for text in plan.prompts] * plan.samples
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))  # similar lengths pad little
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    data = Generations()
    for b, first in enumerate(range(0, len(order), plan.generation_batch)):
        batch = [prompts[i] for i in order[first:first + plan.generation_batch]]
        width = max(map(len, batch))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        recorder = _LabelRecorder(min(plan.label_tokens, target.config.vocab_size))  # a tiny vocabulary: all
        torch.manual_seed(plan.seed * 1_000_003 + b)
        out = target.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                              top_p=1.0, max_new_tokens=plan.new_tokens, logits_processor=LogitsProcessorList([recorder]),
                              eos_token_id=stops, pad_token_id=pad)
        label_ids, label_probs = torch.stack(recorder.ids, 1), torch.stack(recorder.probs, 1)
        for row, prompt in enumerate(batch):
            answer = out[row, width:].tolist()
            end = next((i + 1 for i, x in enumerate(answer) if x in stops), len(answer))
            data.sequences.append(prompt + answer[:end])
            data.starts.append(len(prompt))
            data.label_ids.append(label_ids[row, :end].clone())
            data.label_probs.append(label_probs[row, :end].clone())
            if tick is not None:
                tick("generate", len(prompts))
    return data


def choose_head_tokens(data: Generations, vocab: int, size: int, always: Sequence[int] = ()) -> torch.Tensor:
    """The ``size`` tokens with the most label mass over ``data`` (ties to the smaller id), ``always`` among them;
    sorted by id."""
    if not 1 <= size <= vocab:
        raise InvalidParameterError("head_tokens", f"must lie in 1..{vocab}, got {size}")
    mass = torch.zeros(vocab, dtype=torch.float64)
    for ids, probs in zip(data.label_ids, data.label_probs):
        mass.index_add_(0, ids.reshape(-1).long(), probs.reshape(-1).double())
    mass[list(always)] = math.inf
    order = torch.sort(-mass, stable=True).indices[:size]  # stable: ties keep the smaller id first
    return torch.sort(order).values


def head_coverage(data: Generations, kept: torch.Tensor, vocab: int) -> float:
    """The share of the labels' mass on ``kept`` tokens (a lower bound on what the pruned head can reach)."""
    member = torch.zeros(vocab, dtype=torch.bool)
    member[kept] = True
    inside = sum(float((p.double() * member[i.long()]).sum()) for i, p in zip(data.label_ids, data.label_probs))
    return inside / max(sum(float(p.double().sum()) for p in data.label_probs), 1e-300)


def initial_draft(target, layers: Sequence[int]):
    """A model of ``target``'s class over copies of its decoder ``layers`` (and final norm); the embeddings and
    output head stay ``target``'s own tensors, frozen."""
    from simulator.real.causal_lm import with_layers

    count = target.config.num_hidden_layers
    if max(layers) >= count:
        raise InvalidParameterError("layers", f"the target has layers 0..{count - 1}, got {tuple(layers)}")
    shared = with_layers(target, list(layers))
    draft = copy.deepcopy(shared)  # its own layers and norm, to train; the target stays as it is
    draft.set_input_embeddings(target.get_input_embeddings())
    if not draft.config.tie_word_embeddings:
        draft.set_output_embeddings(target.get_output_embeddings())
    else:
        draft.tie_weights()
    for parameter in draft.get_input_embeddings().parameters():
        parameter.requires_grad_(False)
    for parameter in draft.get_output_embeddings().parameters():
        parameter.requires_grad_(False)
    return draft


def _batches(lengths: Sequence[int], size: int, rng: np.random.Generator) -> list[list[int]]:
    """Batches of ``size`` sequence indices of similar length, in a seeded random order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    chunks = [order[i:i + size] for i in range(0, len(order), size)]
    return [chunks[i] for i in rng.permutation(len(chunks))]


def train(draft, data: Generations, kept: torch.Tensor, plan: TrainingPlan, tick: Tick | None = None) -> list[float]:
    """Fit ``draft``'s trainable parameters to ``data``'s labels over the pruned head ``kept``; returns the loss
    (mean cross-entropy per answer token, in nats) of every step. Seeded by ``plan.seed``; the model is left in
    evaluation mode."""
    torch.manual_seed(plan.seed)
    rng = np.random.default_rng([plan.seed, 7])
    vocab = draft.config.vocab_size
    weight = draft.get_output_embeddings().weight.detach()[kept]  # [K, d], frozen
    position = torch.full((vocab,), -1, dtype=torch.long)
    position[kept] = torch.arange(len(kept))
    lengths = [len(s) for s in data.sequences]
    epochs = [_batches(lengths, plan.batch_sequences, rng) for _ in range(plan.epochs)]
    schedule = [batch for epoch in epochs for batch in epoch][:plan.steps]
    parameters = [p for p in draft.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=plan.learning_rate, betas=(0.9, 0.95), weight_decay=0.0)
    warmup = max(1, len(schedule) // 20)

    def rate(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        done = (step - warmup) / max(1, len(schedule) - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    draft.train()
    losses = []
    for step, batch in enumerate(schedule):
        width = max(lengths[i] for i in batch)
        ids = torch.tensor([data.sequences[i] + [0] * (width - lengths[i]) for i in batch])
        mask = torch.tensor([[1] * lengths[i] + [0] * (width - lengths[i]) for i in batch])
        rows = torch.cat([torch.full((lengths[i] - data.starts[i],), r) for r, i in enumerate(batch)])
        columns = torch.cat([torch.arange(data.starts[i] - 1, lengths[i] - 1) for i in batch])
        label = position[torch.cat([data.label_ids[i] for i in batch]).long()]  # [N, k] into the head, or -1
        probs = torch.cat([data.label_probs[i] for i in batch]).float() * (label >= 0)
        hidden = draft.base_model(input_ids=ids, attention_mask=mask).last_hidden_state[rows, columns]
        log_q = torch.log_softmax(hidden @ weight.t(), dim=-1)
        loss = -(probs * log_q.gather(1, label.clamp(min=0))).sum() / len(rows)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.detach()))
        if tick is not None:
            tick("train", len(schedule))
    draft.eval()
    return losses


@dataclass
class TrainedDraft:
    """What :func:`make_draft` returns: the draft (full head), its kept head tokens, the data's size and head
    coverage, the loss of every step, and the seconds each stage took."""

    model: object
    kept: torch.Tensor
    answer_tokens: int
    coverage: float
    losses: list[float]
    seconds: dict[str, float]


def make_draft(target, tokenizer, plan: TrainingPlan, tick: Tick | None = None) -> TrainedDraft:
    """Generate, choose the head, train: three steps, each seeded.

    1. :func:`generate_data`: the target answers instructions that are not MT-bench's (batched ``generate``,
       sampling at temperature 1); at every answer position its top ``label_tokens`` probabilities are kept as the
       soft label.
    2. :func:`choose_head_tokens`: the ``head_tokens`` tokens carrying most of those labels' mass, plus the stop
       tokens: the draft's pruned head (:class:`~simulator.real.pruned_head.PrunedHead`).
    3. :func:`train`: a copy of some of the target's decoder layers and its final norm (:func:`initial_draft`), the
       embeddings frozen and shared, learns to minimise the cross-entropy ``−Σ p log q`` of those labels over the
       pruned head (forward KL, up to the target's entropy), with AdamW and a warm-up then cosine learning rate.
    """
    start = time.perf_counter()
    data = generate_data(target, tokenizer, plan, tick)
    generated = time.perf_counter()
    vocab = target.config.vocab_size
    kept = choose_head_tokens(data, vocab, plan.head_tokens, stop_tokens(target, tokenizer))
    draft = initial_draft(target, plan.layers)
    losses = train(draft, data, kept, plan, tick)
    return TrainedDraft(draft, kept, data.answer_tokens, head_coverage(data, kept, vocab), losses,
                        {"generate": generated - start, "train": time.perf_counter() - generated})
