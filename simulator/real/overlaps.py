"""A draft's per-position acceptance against its target on real text: ``Σ_x min(p(x), q(x))`` at every position of a
target-generated continuation of chat prompts (:func:`measure_overlaps`), with how peaked each row is.

``specproof real-transfer`` fits the toy study's synthetic pair to these samples, and ``specproof train-draft`` checks
a trained draft's acceptance with them. Torch is imported by :func:`measure_overlaps` only, so the command line reads
:class:`OverlapSample` in a bare install.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

#: target tokens generated after each prompt, the positions measured
CONTINUATION_TOKENS = 32


@dataclass(frozen=True)
class OverlapSample:
    """One draft's rows against the target's at every continuation position: ``overlap`` is ``Σ_x min(p, q)``,
    ``draft_top`` and ``target_top`` the largest probability of each row (how peaked the rows are, which
    ``Σ min`` alone does not say)."""

    overlap: np.ndarray
    draft_top: np.ndarray
    target_top: np.ndarray
    question: np.ndarray | None = None  # each position's question (its index), where questions were measured


def row_statistics(p: np.ndarray, q: np.ndarray) -> OverlapSample:
    """:class:`OverlapSample` of draft rows ``p`` and target rows ``q`` (``[positions, V]`` arrays)."""
    return OverlapSample(np.minimum(p, q).sum(axis=-1), p.max(axis=-1), q.max(axis=-1))


def measure_overlaps(target: str, drafts: Sequence[str], questions: Sequence[dict],
                     new_tokens: int = CONTINUATION_TOKENS, seed: int = 0,
                     tick: Callable[[str, int], None] | None = None,
                     processing: dict | None = None) -> dict[str, OverlapSample]:
    """Per draft, :class:`OverlapSample` over every question: the first turn's chat prompt, then up to
    ``new_tokens`` target tokens (KV-cached target-only decoding under ``processing``, stopping at the end-of-sequence
    token, seed ``seed + 1000·i`` for question ``i`` as ``specproof real-report``'s baseline uses for a first
    turn); the rows at each continuation position come from one plain forward pass of each model over the whole
    sequence. ``processing`` (``Processing``'s fields, as real_pair.json records them; default temperature 1 and
    nothing cut) is applied to the generation and to both rows, so that the fit sees the rows the real rows'
    rules saw."""
    import torch

    from simulator.real.kv_cache import CachedLM
    from simulator.real.causal_lm import Processing, load_causal_lm, load_tokenizer, self_draft, check_vocabularies
    from simulator.real.spec_bench import chat_ids, target_generate

    model = load_causal_lm(target, torch.float32, "target")
    tokenizer, _ = load_tokenizer(target)
    models = {}
    for spec in drafts:
        if spec.startswith("self:"):
            models[spec] = self_draft(model, spec)
        else:
            models[spec] = load_causal_lm(spec, torch.float32, "draft")
            check_vocabularies(models[spec], model)
    stop = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    processed = Processing(**(processing or {}))
    rows: dict[str, list[OverlapSample]] = {spec: [] for spec in drafts}
    for i, question in enumerate(questions):
        prompt = chat_ids(tokenizer, [{"role": "user", "content": str(question["turns"][0])}])
        generated = target_generate(CachedLM(model, processed), prompt, new_tokens, seed + 1000 * i, stop).tokens
        sequence = torch.tensor([prompt + generated])
        positions = slice(len(prompt) - 1, len(prompt) + len(generated) - 1)  # the rows that predict `generated`
        with torch.no_grad():
            q = processed(model(sequence).logits[0, positions]).numpy()
            for spec, draft in models.items():
                p = processed(draft(sequence).logits[0, positions]).numpy()
                rows[spec].append(replace(row_statistics(p, q), question=np.full(len(p), i)))
        if tick is not None:
            tick("questions", len(questions))
    return {spec: OverlapSample(*(np.concatenate([getattr(s, f) for s in samples])
                                  for f in OverlapSample.__dataclass_fields__)) for spec, samples in rows.items()}
