"""Kernels named as a class, a method and a nested method (tests/test_kernel_loading.py), in transformers' chain
convention (the ``chain`` adapter): speculative sampling, LOSSLESS; constructed with ``buggy=True``, the token after
a rejection drawn from the target row instead of the residual ``(q − p)_+``, LOSSY."""

from __future__ import annotations

import torch


def multinomial(weights: torch.Tensor) -> torch.Tensor:
    """One index drawn with probability ``w_i / Σ w``, shape ``[1]``."""
    return torch.multinomial(weights, 1)


def speculative(candidate_input_ids, candidate_logits, candidate_length, new_logits, buggy: bool = False,
                draw=multinomial):
    """Accept draft ``x`` at position ``i`` when ``u < q_i(x) / p_i(x)``; at the first rejection a token from the
    residual (the target row if ``buggy``); after every draft a bonus token from the last target row; tokens are
    drawn by ``draw`` (``[V]`` weights to a ``[1]`` index)."""
    drafts = candidate_input_ids[0]  # [γ]
    draft, target = candidate_logits[0].softmax(-1), new_logits[0].softmax(-1)  # [γ, V], [γ+1, V]
    for i, x in enumerate(drafts.tolist()):
        if torch.rand(()) < target[i, x] / draft[i, x]:
            continue
        residual = target[i] if buggy else (target[i] - draft[i]).clamp(min=0)
        return torch.cat([drafts[:i], draw(residual)]).unsqueeze(0), i
    return torch.cat([drafts, draw(target[candidate_length])]).unsqueeze(0), candidate_length


def race(weights: torch.Tensor) -> torch.Tensor:
    """An index drawn with probability ``w_i / Σ w`` by an exponential race (vLLM's ``_multinomial``); kl_scripted
    and kl_compiled wrap it in TorchScript and ``torch.compile``."""
    exponentials = torch.empty_like(weights).exponential_(1.0)
    return (weights / exponentials).argmax(dim=-1)


def chain_kernels(race_fn):
    """The correct kernel and its target-residual twin, drawing their tokens with ``race_fn``."""

    def sps(candidate_input_ids, candidate_logits, candidate_length, new_logits):
        return speculative(candidate_input_ids, candidate_logits, candidate_length, new_logits,
                           draw=lambda weights: race_fn(weights).reshape(1))

    def sps_target_residual(candidate_input_ids, candidate_logits, candidate_length, new_logits):
        return speculative(candidate_input_ids, candidate_logits, candidate_length, new_logits, buggy=True,
                           draw=lambda weights: race_fn(weights).reshape(1))

    return sps, sps_target_residual


class Sampler:
    """``kl_classes:Sampler.sample``: constructed, then its method called."""

    def __init__(self, buggy: bool = False) -> None:
        self.buggy = buggy

    def sample(self, candidate_input_ids, candidate_logits, candidate_length, new_logits):
        return speculative(candidate_input_ids, candidate_logits, candidate_length, new_logits, self.buggy)


class SamplerModule(torch.nn.Module):
    """``kl_classes:SamplerModule``: constructed, then the instance called (its ``forward``)."""

    def __init__(self, buggy: bool = False) -> None:
        super().__init__()
        self.buggy = buggy

    def forward(self, candidate_input_ids, candidate_logits, candidate_length, new_logits):
        return speculative(candidate_input_ids, candidate_logits, candidate_length, new_logits, self.buggy)


class Outer:
    class Inner(Sampler):
        """``kl_classes:Outer.Inner.sample``: a nested class's method."""


class Broken(Sampler):
    """A constructor that raises: the error names this line."""

    def __init__(self) -> None:
        raise RuntimeError("no GPU here")
