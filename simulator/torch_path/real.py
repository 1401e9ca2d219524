"""Real causal-LM pairs (transformers) for every engine: processed next-token rows and one-pass tree scoring
(docs/torch-path.md, "Real model pairs").

* :class:`Processing` — temperature, top-k and top-p, applied once: drafting samples from and verification reads
  the same processed rows;
* :func:`load_causal_lm` — a model from a local directory (nothing is fetched);
* :class:`CausalLMPair` — a :class:`simulator.models.ModelPair` over a prompt, scoring a whole tree in one pass
  (:func:`tree_attention`, :func:`score_tree`);
* :class:`ReprocessedDraft` — the mismatched-processing negative control.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from simulator.drafting import Draft, Drafter
from simulator.errors import InvalidParameterError
from simulator.models import Context, ModelView
from simulator.randomness import Randomness
from simulator.torch_path.devices import usable_device
from simulator.trees import DraftTree, node_depths


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


def load_causal_lm(path: str, dtype: torch.dtype = torch.float64, field: str = "model", device: str = "cpu"):
    """A causal LM from a local directory, in evaluation mode (eager attention: it takes 4-D tree masks), on
    ``device`` (``cpu``, ``cuda``, ``cuda:1``). A directory that is missing, holds no ``config.json``, or that
    transformers cannot load raises :class:`InvalidParameterError` on ``field`` naming the directory; a device
    torch cannot use raises it on ``device``."""
    from transformers import AutoModelForCausalLM

    folder = Path(path)
    if not folder.is_dir():
        raise InvalidParameterError(field, f"{path} is not a directory")
    if not (folder / "config.json").is_file():
        raise InvalidParameterError(field, f"{path} holds no config.json: not a saved causal LM "
                                           "(save one with model.save_pretrained(DIR))")
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype,
                                                     attn_implementation="eager")
    except (OSError, ValueError) as err:
        raise InvalidParameterError(field, f"cannot load a causal LM from {path}: {err}") from None
    return model.to(usable_device(device)).eval()


def tree_attention(prompt_len: int, parents: Sequence[int], dtype: torch.dtype,
                   device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The additive 4-D mask ``[1, 1, L, L]`` and position ids ``[1, L]`` for ``prompt + draft nodes 1..n−1``
    on ``device``: the prompt is causal; node ``v`` sees the prompt and its ancestors, at
    ``prompt_len − 1 + depth(v)``."""
    n = len(parents)
    length = prompt_len + n - 1
    allowed = torch.tril(torch.ones(length, length, dtype=torch.bool))
    allowed[prompt_len:, prompt_len:] = False
    depth = node_depths(parents)
    for v in range(1, n):
        a = v
        while a > 0:
            allowed[prompt_len + v - 1, prompt_len + a - 1] = True
            a = parents[a]
    mask = torch.zeros(1, 1, length, length, dtype=dtype)
    mask[0, 0][~allowed] = torch.finfo(dtype).min
    positions = list(range(prompt_len)) + [prompt_len - 1 + depth[v] for v in range(1, n)]
    return mask.to(device), torch.tensor([positions], device=device)


@torch.no_grad()
def score_tree(model, prompt: Sequence[int], tree: DraftTree, processing: Processing) -> torch.Tensor:
    """Processed next-token rows ``[n, V]`` of every node of ``tree`` (node 0: after the prompt), one pass, on
    the model's device."""
    if not prompt:
        raise InvalidParameterError("prompt", "tree scoring needs at least one prompt token")
    weights = next(model.parameters())
    mask, positions = tree_attention(len(prompt), tree.parents, weights.dtype, weights.device)
    ids = torch.tensor([list(prompt) + [int(t) for t in tree.tokens[1:]]], device=weights.device)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[0]
    return processing(logits[len(prompt) - 1:])


class CausalLMPair:
    """A draft and a target causal LM after ``prompt``, as a model pair.

    ``p(c)``/``q(c)`` run one plain forward pass on ``prompt + c`` (cached); :meth:`batch_rows` computes many contexts
    in one tree-attention pass, which :meth:`simulator.models.ModelView.prefetch` uses, so drafting runs the
    draft model once per layer of the tree and the target scores a whole drafted tree in one pass."""

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
        self.passes = {"p": 0, "q": 0}  # forward passes run, per model (what a round costs)

    def _model(self, name: str) -> tuple:
        return (self.draft, self.draft_processing) if name == "p" else (self.target, self.target_processing)

    @torch.no_grad()
    def _row(self, name: str, context: Context) -> list[float]:
        key = (name, tuple(context))
        if key not in self._rows:
            model, processing = self._model(name)
            ids = torch.tensor([list(self.prompt) + list(context)], device=model.device)
            logits = model(input_ids=ids).logits[0, -1]
            self.passes[name] += 1
            self._rows[key] = processing(logits).tolist()
        return self._rows[key]

    def p(self, context: Context) -> list[float]:
        return self._row("p", context)

    def q(self, context: Context) -> list[float]:
        return self._row("q", context)

    def batch_rows(self, name: str, contexts: Sequence[Context], processing: Processing | None = None) -> list[list[float]]:
        """The ``name`` rows (``"p"``: draft, ``"q"``: target) of many contexts from one forward pass: their
        longest common prefix extends the prompt and the rest, with every ancestor, is scored as a tree
        (:func:`score_tree`); ``processing`` overrides the model's."""
        if not contexts:
            return []
        model, own = self._model(name)
        base = tuple(os.path.commonprefix([tuple(c) for c in contexts]))
        keys = sorted({tuple(c[len(base):])[:d] for c in contexts for d in range(len(c) - len(base) + 1)},
                      key=lambda k: (len(k), k))  # by depth, then lexicographic: a BFS-ordered trie
        node = {k: i for i, k in enumerate(keys)}
        tree = DraftTree([-1] + [node[k[:-1]] for k in keys[1:]], [None] + [k[-1] for k in keys[1:]], self.vocab)
        scored = score_tree(model, self.prompt + base, tree, processing or own)
        self.passes[name] += 1
        return [scored[node[tuple(c[len(base):])]].tolist() for c in contexts]

    def describe(self) -> dict:
        return {"model": "causal-lm", "vocab": self.vocab, "prompt": list(self.prompt),
                "draft_processing": vars(self.draft_processing), "target_processing": vars(self.target_processing)}


@dataclass(frozen=True)
class ReprocessedDraft:
    """A negative control: ``inner``'s drafts whose draft rows, as verification reads them, are the draft
    model's processed by ``processing`` — not the processing the tokens were sampled with (a mismatch
    between sampling and verification, e.g. a temperature applied to one and not the other)."""

    inner: Drafter
    pair: CausalLMPair
    processing: Processing

    @property
    def scheme(self) -> str:
        return self.inner.scheme

    @property
    def height(self) -> int:
        return self.inner.height

    def draft(self, view: ModelView, rng: Randomness) -> Draft:
        drafted = self.inner.draft(view, rng)
        inner = [v for v, row in enumerate(drafted.p) if row is not None]
        paths = [tuple(view.context) + drafted.tree.path(v) for v in inner]
        rows = dict(zip(inner, self.pair.batch_rows("p", paths, self.processing)))
        return Draft(drafted.tree, tuple(tuple(rows[v]) if v in rows else None for v in range(len(drafted.p))),
                     drafted.q)

    def advance(self, generated: Context) -> "ReprocessedDraft":
        return ReprocessedDraft(self.inner.advance(generated), self.pair, self.processing)

    def describe(self) -> dict:
        return {**self.inner.describe(), "verified_draft_processing": vars(self.processing)}
