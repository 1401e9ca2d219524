"""vLLM 0.11.0's ``RejectionSampler.forward`` on a batch of requests (``--adapter vllm-v1-forward``, docs/kernels.md):
its ``SpecDecodeMetadata`` and ``SamplingMetadata`` built from the requests with vLLM's own classes, as its model
runner builds them; the target's logits and the draft's probabilities one row per draft token; the bonus tokens
drawn as vLLM's sampler draws them; each request's row of the output read back."""

from __future__ import annotations

import importlib
import types
from typing import Sequence

import numpy as np
import torch

from simulator.errors import InvalidParameterError, KernelError
from simulator.kernels.adapters import PLACEHOLDER, chain_nodes, int_values, padded_tokens, rows_tensor
from simulator.kernels.conventions import vllm_v1_imports

#: the modules of the vllm-v1 artifact the adapter builds the kernel's arguments with
_MODULES = ("vllm.v1.spec_decode.metadata", "vllm.v1.sample.metadata", "vllm.v1.sample.ops.topk_topp_sampler")


def vllm_v1_forward_adapter(kernel, drafts: Sequence, requests: Sequence, vocab: int,
                            dtype: torch.dtype) -> list[tuple[int, int]]:
    """vLLM 0.11.0's ``RejectionSampler.forward(metadata, draft_probs [T, V], target_logits [T, V], bonus_token_ids
    [B, 1], sampling_metadata) -> output_token_ids [B, K+1]`` (``vllm/v1/sample/rejection_sampler.py``) on one chain
    of drafts per request, ``T`` draft tokens in all, ``K`` the most of one request:

    * ``metadata``: ``SpecDecodeMetadata.make_dummy(draft_token_ids, "cpu")``, vLLM's own constructor (the
      fields ``forward`` reads: the drafts, their counts and cumulative counts, the longest);
    * ``sampling_metadata``: :func:`sampling_metadata`;
    * ``target_logits``: the log of the target's raw row at each draft token (``-inf`` at a zero);
      ``draft_probs``: the draft's row there, each draft drawn from it;
    * ``bonus_token_ids``: :func:`bonus_token_ids`, drawn before the call as vLLM's sampler draws them.

    The answer of request ``i``: row ``i`` of the output, its accepted drafts, one token, then ``-1``s."""
    spec_decode, sample_metadata, topk_topp = _modules()
    chains = [chain_nodes(d.tree, "vllm-v1-forward") for d in drafts]
    drafted = [[d.tree.tokens[v] for v in chain[1:]] for d, chain in zip(drafts, chains)]
    metadata = sampling_metadata(sample_metadata.SamplingMetadata, requests, vocab)
    leaves = torch.log(rows_tensor([d.q[chain[-1]] for d, chain in zip(drafts, chains)], dtype))
    bonus = bonus_token_ids(leaves, requests, metadata.generators, vocab, topk_topp)
    target_logits = torch.log(rows_tensor([d.q[v] for d, chain in zip(drafts, chains) for v in chain[:-1]], dtype))
    draft_probs = rows_tensor([d.p[v] for d, chain in zip(drafts, chains) for v in chain[:-1]], dtype, vocab)
    out = kernel(spec_decode.SpecDecodeMetadata.make_dummy(drafted, "cpu"), draft_probs, target_logits, bonus,
                 metadata)
    width = max(len(tokens) for tokens in drafted) + 1
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (len(drafts), width):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise KernelError("kernel", f"returned {shape}, expected output token ids of shape [{len(drafts)}, {width}]")
    answers = []
    for i, (chain, tokens) in enumerate(zip(chains, drafted)):
        if any(t != PLACEHOLDER for t in int_values(out[i, len(tokens) + 1:], f"row {i} of the output")):
            raise KernelError("kernel", f"returned {out[i].tolist()} for request {i}: a token past its "
                                        f"{len(tokens)} draft(s) and one more")
        emitted = padded_tokens(out[i:i + 1, :len(tokens) + 1], tokens, vocab)
        answers.append((chain[len(emitted) - 1], emitted[-1]))
    return answers


vllm_v1_forward_adapter.batched = True  # type: ignore[attr-defined]
vllm_v1_forward_adapter.before_kernel_import = vllm_v1_imports  # type: ignore[attr-defined]


def _modules() -> list:
    """The artifact's modules the arguments are built with (imported already by ``forward``'s module)."""
    try:
        return [importlib.import_module(name) for name in _MODULES]
    except ImportError as err:
        raise InvalidParameterError("import-path", f"the vllm-v1-forward adapter builds vLLM 0.11.0's metadata with "
                                                   f"its own modules ({err}): pass --import-path \"$(specproof fetch "
                                                   "vllm-v1)\"") from None


def sampling_metadata(cls: type, requests: Sequence, vocab: int):
    """vLLM's ``SamplingMetadata`` (``cls``) of the batch, as vLLM 0.11.0's ``InputBatch`` makes it
    (``gpu_input_batch.py``: ``add_request``, ``_make_sampling_metadata``): ``temperature`` float32, each request's
    as it gives it (a greedy one's 0 or -1), ``None`` when every request is greedy; ``all_greedy``, ``all_random``;
    ``top_k`` int32 (the vocabulary where a request does not cut) and ``top_p`` float32 (1 where it does not),
    each ``None`` when no request cuts; ``generators``, a ``torch.Generator`` seeded with the request's ``seed`` for
    each request that has one; no penalties, logprobs, allowed or bad words, and no logits processors (forward reads
    none of them)."""
    n = len(requests)
    greedy = [r.greedy for r in requests]
    cuts_k = [0 < r.top_k < vocab for r in requests]
    processors = importlib.import_module("vllm.v1.sample.logits_processor").LogitsProcessors
    return cls(
        temperature=None if all(greedy) else _float32([r.temperature for r in requests]),
        all_greedy=all(greedy), all_random=not any(greedy),
        top_p=_float32([r.top_p for r in requests]) if any(r.top_p < 1 for r in requests) else None,
        top_k=(torch.tensor([r.top_k if cut else vocab for r, cut in zip(requests, cuts_k)], dtype=torch.int32)
               if any(cuts_k) else None),
        generators={i: torch.Generator().manual_seed(r.seed) for i, r in enumerate(requests) if r.seed is not None},
        max_num_logprobs=None, no_penalties=True, prompt_token_ids=None, frequency_penalties=_float32([0.0] * n),
        presence_penalties=_float32([0.0] * n), repetition_penalties=_float32([1.0] * n),
        output_token_ids=[[] for _ in requests], allowed_token_ids_mask=None, bad_words_token_ids={},
        logitsprocs=processors())


def _float32(values: Sequence) -> torch.Tensor:
    """A float32 tensor of ``values``, filled through NumPy as ``InputBatch`` fills its CPU tensors: constants the
    kernel is given, not arithmetic of its (the capture's precision record does not see ``torch.from_numpy``)."""
    return torch.from_numpy(np.array(values, dtype=np.float32))


def bonus_token_ids(leaves: torch.Tensor, requests: Sequence, generators: dict, vocab: int,
                    topk_topp) -> torch.Tensor:
    """The bonus tokens ``[B, 1]`` (int32) from the logits of each chain's leaf, as vLLM 0.11.0's ``Sampler.sample``
    draws them from the bonus logits (``sampler.py``): a greedy request's is the leaf's argmax; a random request's
    logits are divided by its temperature (float32) and handed, with its top-k, top-p and generator, to the
    artifact's ``TopKTopPSampler.forward_native`` (``apply_top_k_top_p``, a float32 softmax, ``random_sample``'s
    exponential race), the path the Sampler takes on a GPU without FlashInfer or with per-request generators; it is
    called with the two attributes it reads, its constructor (which asks the platform) not run. The race runs on the
    random requests' rows alone: the Sampler races the greedy rows too and discards their winners, which would only
    multiply the executions."""
    bonus = leaves.argmax(dim=-1)
    random_rows = [i for i, r in enumerate(requests) if not r.greedy]
    if random_rows:
        chosen = [requests[i] for i in random_rows]
        rows = torch.tensor(random_rows)
        logits = leaves[rows].div_(_float32([[r.temperature] for r in chosen]))  # temperature.unsqueeze(dim=1)
        top_k = (torch.tensor([r.top_k if 0 < r.top_k < vocab else vocab for r in chosen], dtype=torch.int32)
                 if any(0 < r.top_k < vocab for r in chosen) else None)
        top_p = _float32([r.top_p for r in chosen]) if any(r.top_p < 1 for r in chosen) else None
        sampler = types.SimpleNamespace(apply_top_k_top_p=topk_topp.apply_top_k_top_p, logprobs_mode="raw_logprobs")
        own = {k: generators[i] for k, i in enumerate(random_rows) if i in generators}
        bonus[rows] = topk_topp.TopKTopPSampler.forward_native(sampler, logits, own, top_k, top_p)[0]
    return bonus.to(torch.int32).unsqueeze(-1)
