"""transformers' own logits processors for a sampling dict, in the order ``generate`` applies them, and the
processed row they make: what a loop in specproof's convention (docs/loops.md) uses to process its rows as
transformers does. The reference's row (:meth:`simulator.loops.sampling.Sampling.probs`) is written apart from
these and tested against them."""

from __future__ import annotations

import torch
from transformers import (LogitsProcessorList, MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                          TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)


def transformers_processors(sampling: dict) -> LogitsProcessorList:
    """transformers' processors for the parameters present in ``sampling`` (a key absent: off), in ``generate``'s
    order: repetition penalty, temperature, top-k, top-p, min-p."""
    chosen = LogitsProcessorList()
    if "repetition_penalty" in sampling:
        chosen.append(RepetitionPenaltyLogitsProcessor(sampling["repetition_penalty"]))
    if "temperature" in sampling:
        chosen.append(TemperatureLogitsWarper(sampling["temperature"]))
    if "top_k" in sampling:
        chosen.append(TopKLogitsWarper(sampling["top_k"]))
    if "top_p" in sampling:
        chosen.append(TopPLogitsWarper(sampling["top_p"]))
    if "min_p" in sampling:
        chosen.append(MinPLogitsWarper(sampling["min_p"]))
    return chosen


def processed_row(process: LogitsProcessorList, ids: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """The processed next-token distribution ``[V]`` after the sequence ``ids [1, T]``, from its logits ``[V]``,
    in float64."""
    return torch.softmax(process(ids, logits[None].double())[0], dim=-1)
