"""A vocabulary-pruned output head (FR-Spec, Zhao et al., ACL 2025, arXiv:2502.14856): a draft's head over the
tokens it keeps (:func:`prune_head`; docs/torch-path.md, "A trained draft")."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from simulator.errors import InvalidParameterError
from simulator.real.trained_draft import HEAD_TOKENS


class PrunedHead(torch.nn.Module):
    """An output head over the rows ``kept`` of ``weight`` (``[V, d]``): logits ``[..., V]`` whose kept entries are
    ``h · W[kept]ᵀ`` and the rest ``-inf``. The product runs over a transposed copy of the kept rows (8,192 of
    SmolLM2's 49,152 take 0.8 ms a row on 2 cores, the whole head 4.5 ms)."""

    def __init__(self, weight: torch.Tensor, kept: torch.Tensor) -> None:
        super().__init__()
        vocab = weight.shape[0]
        if kept.ndim != 1 or not len(kept) or int(kept.min()) < 0 or int(kept.max()) >= vocab \
                or len(torch.unique(kept)) != len(kept):
            raise InvalidParameterError("head_tokens", f"must be distinct token ids in 0..{vocab - 1}")
        self.vocab = vocab
        self.register_buffer("kept", kept.to(weight.device, torch.long), persistent=False)
        self.register_buffer("transposed", weight.detach()[self.kept].t().contiguous(), persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        out = hidden.new_full((*hidden.shape[:-1], self.vocab), float("-inf"))
        out[..., self.kept] = hidden @ self.transposed
        return out


def read_head_tokens(folder: Path, vocab: int) -> torch.Tensor | None:
    """The kept token ids of the draft in ``folder``, or ``None`` when it keeps its whole head."""
    path = folder / HEAD_TOKENS
    if not path.is_file():
        return None
    try:
        ids = json.loads(path.read_text())
    except ValueError as err:
        raise InvalidParameterError("head_tokens", f"{path} is not JSON: {err}") from None
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InvalidParameterError("head_tokens", f"{path} must hold a list of token ids")
    kept = torch.tensor(ids, dtype=torch.long)
    if len(ids) and (int(kept.min()) < 0 or int(kept.max()) >= vocab):
        raise InvalidParameterError("head_tokens", f"{path} names ids outside the vocabulary 0..{vocab - 1}")
    return kept


def prune_head(model, kept: torch.Tensor):
    """``model`` drafting over the tokens ``kept`` only: its output embeddings replaced by a :class:`PrunedHead`
    over the same weight's kept rows (the input embeddings, tied or not, are untouched).

    The head's cost grows with its rows, and the few thousand tokens a target's answers use most carry nearly all of
    its mass. A trained draft's ``head_tokens.json`` is applied when its folder is loaded
    (:func:`simulator.real.causal_lm.load_causal_lm`), so every path (the KV-cached rounds, tree scoring,
    transformers' assisted generation) drafts from the same rows: the kept tokens' logits, every other token's
    ``-inf`` (probability zero, which every lossless rule allows a draft).
    """
    model.set_output_embeddings(PrunedHead(model.get_output_embeddings().weight, kept))
    model.config.tie_word_embeddings = False  # the head is no longer the embedding table: nothing to re-tie
    return model
