"""Real causal-LM pairs (transformers) for every engine: processed next-token rows and one-pass tree scoring.

* :class:`Processing` — temperature, top-k and top-p applied once to a model's logits; the processed rows are
  what drafting samples from and what verification reads (SPEC §6 lists a mismatch between the two as a bug).
* :func:`load_causal_lm` — a model from a local directory (``local_files_only``: nothing is fetched).
* :class:`CausalLMPair` — a :class:`simulator.models.ModelPair` over a prompt: ``p(c)``/``q(c)`` run the draft
  and target model on ``prompt + c`` (cached), so the exact engine, Monte Carlo and the torch path can use a
  real pair like any other.
* :func:`tree_attention` and :func:`score_tree` — the whole draft tree in one forward pass: every node attends
  to the prompt and to its own ancestors, at position ``len(prompt) − 1 + depth``.
* :class:`TreeScored` — a drafter whose drafts carry the target rows of one tree-scoring pass (what a
  deployment verifies with), optionally with draft rows processed differently from the ones sampled from
  (the mismatched-temperature control).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .drafting import Draft, Drafter
from .errors import InvalidParameterError
from .models import Context, ModelView
from .randomness import Randomness
from .trees import DraftTree


@dataclass(frozen=True)
class Processing:
    """``softmax(logits / temperature)`` restricted to the ``top_k`` most likely tokens (0: all) and to the
    smallest most-likely set of mass ≥ ``top_p``, renormalised."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise InvalidParameterError("temperature", f"must be positive, got {self.temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise InvalidParameterError("top_k", f"must be an integer ≥ 0, got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise InvalidParameterError("top_p", f"must lie in (0, 1], got {self.top_p!r}")

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits.double() / self.temperature, dim=-1)
        keep = torch.ones_like(probs, dtype=torch.bool)
        order = torch.argsort(probs, dim=-1, descending=True, stable=True)
        ranked = probs.gather(-1, order)
        if self.top_k:
            keep_ranked = torch.arange(probs.shape[-1], device=probs.device) < self.top_k
            keep = keep & torch.zeros_like(keep).scatter(-1, order, keep_ranked.expand_as(order))
        if self.top_p < 1:
            before = torch.cumsum(ranked, dim=-1) - ranked  # mass ranked above each token
            keep = keep & torch.zeros_like(keep).scatter(-1, order, before < self.top_p)
        kept = torch.where(keep, probs, torch.zeros_like(probs))
        return kept / kept.sum(dim=-1, keepdim=True)


def load_causal_lm(path: str, dtype: torch.dtype = torch.float64):
    """A causal LM from a local directory, in evaluation mode (eager attention: it takes 4-D tree masks)."""
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype,
                                                     attn_implementation="eager")
    except OSError as err:
        raise InvalidParameterError("model", f"cannot load a causal LM from {path}: {err}") from None
    return model.eval()


def tree_attention(prompt_len: int, parents: Sequence[int], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The additive 4-D mask ``[1, 1, L, L]`` and position ids ``[1, L]`` for ``prompt + draft nodes 1..n−1``:
    the prompt is causal; node ``v`` sees the prompt and its ancestors, at ``prompt_len − 1 + depth(v)``."""
    n = len(parents)
    length = prompt_len + n - 1
    allowed = torch.tril(torch.ones(length, length, dtype=torch.bool))
    allowed[prompt_len:, prompt_len:] = False
    depth = [0] * n
    for v in range(1, n):
        depth[v] = depth[parents[v]] + 1
        a = v
        while a > 0:
            allowed[prompt_len + v - 1, prompt_len + a - 1] = True
            a = parents[a]
    mask = torch.zeros(1, 1, length, length, dtype=dtype)
    mask[0, 0][~allowed] = torch.finfo(dtype).min
    positions = list(range(prompt_len)) + [prompt_len - 1 + depth[v] for v in range(1, n)]
    return mask, torch.tensor([positions])


@torch.no_grad()
def score_tree(model, prompt: Sequence[int], tree: DraftTree, processing: Processing) -> torch.Tensor:
    """Processed next-token rows ``[n, V]`` of every node of ``tree`` (node 0: after the prompt), one pass."""
    if not prompt:
        raise InvalidParameterError("prompt", "tree scoring needs at least one prompt token")
    dtype = next(model.parameters()).dtype
    mask, positions = tree_attention(len(prompt), tree.parents, dtype)
    ids = torch.tensor([list(prompt) + [int(t) for t in tree.tokens[1:]]])
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[0]
    return processing(logits[len(prompt) - 1:])


class CausalLMPair:
    """A draft and a target causal LM after ``prompt``, as a model pair (rows from plain forward passes)."""

    def __init__(self, draft, target, prompt: Sequence[int], draft_processing: Processing = Processing(),
                 target_processing: Processing = Processing()) -> None:
        if draft.config.vocab_size != target.config.vocab_size:
            raise InvalidParameterError("draft", "draft and target vocabularies differ "
                                                 f"({draft.config.vocab_size} vs {target.config.vocab_size})")
        if not prompt:
            raise InvalidParameterError("prompt", "needs at least one token")
        self.draft, self.target, self.prompt = draft, target, tuple(prompt)
        self.draft_processing, self.target_processing = draft_processing, target_processing
        self.vocab = target.config.vocab_size
        self._rows: dict[tuple[str, Context], list[float]] = {}

    @torch.no_grad()
    def _row(self, name: str, context: Context) -> list[float]:
        key = (name, tuple(context))
        if key not in self._rows:
            model, processing = ((self.draft, self.draft_processing) if name == "p"
                                 else (self.target, self.target_processing))
            logits = model(input_ids=torch.tensor([list(self.prompt) + list(context)])).logits[0, -1]
            self._rows[key] = processing(logits).tolist()
        return self._rows[key]

    def p(self, context: Context) -> list[float]:
        return self._row("p", context)

    def q(self, context: Context) -> list[float]:
        return self._row("q", context)

    def describe(self) -> dict:
        return {"model": "causal-lm", "vocab": self.vocab, "prompt": list(self.prompt),
                "draft_processing": vars(self.draft_processing), "target_processing": vars(self.target_processing)}


@dataclass(frozen=True)
class TreeScored:
    """``inner``'s drafts with target rows from one tree-scoring pass of ``pair.target`` (and, given
    ``verify_draft``, draft rows processed by it instead of the processing the tokens were sampled with)."""

    inner: Drafter
    pair: CausalLMPair
    verify_draft: Processing | None = None

    @property
    def scheme(self) -> str:
        return self.inner.scheme

    @property
    def height(self) -> int:
        return self.inner.height

    def draft(self, view: ModelView, rng: Randomness) -> Draft:
        drafted = self.inner.draft(view, rng)
        prompt = self.pair.prompt + tuple(view.context)
        q = score_tree(self.pair.target, prompt, drafted.tree, self.pair.target_processing)
        p_rows = drafted.p
        if self.verify_draft is not None:
            p = score_tree(self.pair.draft, prompt, drafted.tree, self.verify_draft)
            p_rows = tuple(None if row is None else tuple(p[v].tolist()) for v, row in enumerate(drafted.p))
        return Draft(drafted.tree, p_rows, tuple(tuple(row) for row in q.tolist()))

    def advance(self, generated: Context) -> "TreeScored":
        return TreeScored(self.inner.advance(generated), self.pair, self.verify_draft)

    def describe(self) -> dict:
        return {**self.inner.describe(), "target_rows": "one tree-scoring pass"}
