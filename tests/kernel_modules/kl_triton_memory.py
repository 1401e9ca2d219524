"""Triton chain kernels whose random values pass through memory (tests/test_triton_kernels.py), in transformers'
``chain`` convention, each with its negative control:

* ``stored_then_loaded``: one kernel stores each position's uniform to a scratch tensor, a second loads it and
  decides the acceptance; the capture follows the uniform through the store and the load (LOSSLESS, with
  speculative sampling's acceptance). Its twin ``loaded_from_position_0`` loads position 0's every time: a reused
  uniform (LOSSY).
* ``shared_race``: vLLM v1's recovered tokens, one exponential row shared by every position's race, every winner
  stored, only the first rejected position's read (LOSSLESS: the winners never read are never decided). Its twin
  ``shared_race_all_read`` reads every position's winner, two races on one set of exponentials: refused.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from specproof.gate.torch_kernels import chain_answer, chain_rows
from specproof.gate.triton_kernels import _accept


@triton.jit
def _keep(uniforms, scratch):
    i = tl.program_id(0)
    tl.store(scratch + i, tl.load(uniforms + i))


@triton.jit
def _accept_stored(drafts, draft_rows, target_rows, scratch, accepted, V: tl.constexpr, SHIFT: tl.constexpr):
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    u = tl.load(scratch + i * SHIFT)  # SHIFT 0: the twin's bug, position 0's uniform everywhere
    tl.store(accepted + i, (u * p < q).to(tl.int32))


@triton.jit
def _recover(target_rows, draft_rows, exponentials, recovered, V: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    j = tl.arange(0, BLOCK)
    live = j < V
    w = tl.maximum(tl.load(target_rows + i * V + j, mask=live, other=0.0)
                   - tl.load(draft_rows + i * V + j, mask=live, other=0.0), 0.0)
    e = tl.load(exponentials + j, mask=live, other=float("-inf"))  # one row for every position, as vLLM's q
    tl.store(recovered + i, tl.argmax(w / e, axis=0))


def _through_memory(shift, candidate_input_ids, candidate_logits, candidate_length, new_logits):
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    gamma, vocab = int(candidate_length), draft.shape[-1]
    scratch = torch.zeros(gamma, dtype=torch.float64)
    _keep[(gamma,)](torch.rand(gamma, dtype=torch.float64), scratch)
    accepted = torch.zeros(gamma, dtype=torch.int32)
    _accept_stored[(gamma,)](drafts.contiguous(), draft.contiguous(), target.contiguous(), scratch, accepted, V=vocab,
                             SHIFT=shift)
    return _finish(drafts, target, accepted, lambda i: _recovered_one(target, draft, i))


def _recovered_one(target, draft, i):
    """Position ``i``'s residual token by a race of its own."""
    vocab = target.shape[-1]
    recovered = torch.zeros(draft.shape[0], dtype=torch.int32)
    exponentials = torch.empty(vocab, dtype=torch.float64).exponential_()
    _recover[(draft.shape[0],)](target.contiguous(), draft.contiguous(), exponentials, recovered, V=vocab,
                                BLOCK=triton.next_power_of_2(vocab))
    return recovered[i]


def _finish(drafts, target, accepted, residual):
    gamma = accepted.shape[0]
    for i, ok in enumerate(accepted.tolist()):
        if not ok:
            return chain_answer(drafts, i, residual(i).long())
    return chain_answer(drafts, gamma, torch.multinomial(target[gamma], 1))


def _shared(read_all, candidate_input_ids, candidate_logits, candidate_length, new_logits):
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    gamma, vocab = int(candidate_length), draft.shape[-1]
    recovered = torch.zeros(gamma, dtype=torch.int32)
    exponentials = torch.empty(vocab, dtype=torch.float64).exponential_()  # one row, every position's race
    _recover[(gamma,)](target.contiguous(), draft.contiguous(), exponentials, recovered, V=vocab,
                       BLOCK=triton.next_power_of_2(vocab))
    accepted = torch.zeros(gamma, dtype=torch.int32)
    _accept[(gamma,)](drafts.contiguous(), draft.contiguous(), target.contiguous(), torch.rand(gamma, dtype=torch.float64),
                      accepted, V=vocab)
    winners = recovered.tolist() if read_all else None  # the twin's bug: every winner read, not just the rejected one
    return _finish(drafts, target, accepted, lambda i: recovered[i] if winners is None else torch.tensor(winners[i]))


stored_then_loaded = functools.partial(_through_memory, 1)
loaded_from_position_0 = functools.partial(_through_memory, 0)
shared_race = functools.partial(_shared, False)
shared_race_all_read = functools.partial(_shared, True)
