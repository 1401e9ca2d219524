"""Planted bugs around vLLM 0.11.0's ``RejectionSampler.forward`` (the vllm-v1 artifact, unmodified), the negative
controls of tests/test_vllm_forward.py, each in forward's convention (``--adapter vllm-v1-forward``): the shipped
forward runs, with one thing around it wrong."""

from __future__ import annotations

import dataclasses

from vllm.v1.sample import rejection_sampler


def ignores_top_k(metadata, draft_probs, target_logits, bonus_token_ids, sampling_metadata):
    """forward on sampling metadata without its ``top_k``: every request's target row uncut by its top-k (the
    kind of vllm#9834, sampling parameters not applied to the target's logits)."""
    return rejection_sampler.RejectionSampler().forward(metadata, draft_probs, target_logits, bonus_token_ids,
                                                        dataclasses.replace(sampling_metadata, top_k=None))


def shares_a_uniform(metadata, draft_probs, target_logits, bonus_token_ids, sampling_metadata):
    """forward with the last draft token's acceptance uniform the first's: one request's draw reused for another,
    each request's own law left as it was."""
    draw = rejection_sampler.generate_uniform_probs

    def shared(num_tokens, *args):
        return draw(num_tokens, *args)[[*range(num_tokens - 1), 0]]

    rejection_sampler.generate_uniform_probs = shared
    try:
        return rejection_sampler.RejectionSampler().forward(metadata, draft_probs, target_logits, bonus_token_ids,
                                                            sampling_metadata)
    finally:
        rejection_sampler.generate_uniform_probs = draw
