"""Chain verifiers written in Triton, each correct one beside a twin carrying one bug class that reached a
production Triton or CUDA verifier; certified unmodified on the CPU under Triton's interpreter (docs/kernels.md,
"Triton kernels")::

    specproof certify --kernel specproof.gate.triton_kernels:sps_chain --adapter chain --depth 2

Each kernel is transformers' ``chain`` convention (:func:`simulator.torch_path.kernels.chain`): a thin torch
wrapper draws the acceptance uniforms with ``torch.rand``, launches a Triton kernel that decides every position's
acceptance, and draws the residual (or the bonus) in torch. Each docstring says whether it is lossless, and why.
Importing this module without triton installed raises :class:`~simulator.errors.MissingDependencyError` naming
the extra that installs it.
"""

from __future__ import annotations

from simulator.torch_path.triton_capture import interpreter_on
from simulator.usercode import require

require("triton", "a Triton kernel", "kernel")
interpreter_on()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from specproof.gate.torch_kernels import _chain_rows, _emitted, _inverse_cdf, _residual  # noqa: E402


# ---- the Triton kernels: one program per drafted position, writing 1 where the draft is accepted ---------------
@triton.jit
def _accept(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    """Correct: accept draft ``x`` at position ``i`` when ``u_i · p_i(x) < q_i(x)`` (``u_i < q_i(x)/p_i(x)``)."""
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    u = tl.load(uniforms + i)
    tl.store(accepted + i, (u * p < q).to(tl.int32))


@triton.jit
def _accept_le(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    """Bug (sglang#35771): ``<=`` accepts a draft of target probability 0 when the coin is exactly 0."""
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    u = tl.load(uniforms + i)
    tl.store(accepted + i, (u * p <= q).to(tl.int32))  # BUG: <= accepts q = 0 at u = 0


@triton.jit
def _accept_reused(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    """Bug (FlashInfer #425): every position reads the first uniform, so the acceptances are correlated."""
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    u = tl.load(uniforms)  # BUG: uniforms + 0 for every position
    tl.store(accepted + i, (u * p < q).to(tl.int32))


@triton.jit
def _accept_sqrt(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    """Not resolvable: ``sqrt`` of a uniform is a map the capture does not follow (refused, naming this line)."""
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    u = tl.load(uniforms + i)
    tl.store(accepted + i, (tl.sqrt(u) * p < q).to(tl.int32))


# ---- the torch wrappers (adapter: chain) -----------------------------------------------------------------------
def _verify(accept, candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Launch ``accept`` on fresh float64 uniforms, then emit the accepted drafts and a residual or bonus token
    drawn in torch (the helpers of :mod:`specproof.gate.torch_kernels`, none of which carries a bug)."""
    drafts, draft, target = _chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    gamma, vocab = int(candidate_length), draft.shape[-1]
    uniforms = torch.rand(gamma, dtype=torch.float64)
    accepted = torch.zeros(gamma, dtype=torch.int32)
    accept[(gamma,)](drafts.contiguous(), draft.contiguous(), target.contiguous(), uniforms, accepted, V=vocab)
    for i, ok in enumerate(accepted.tolist()):
        if not ok:
            return _emitted(drafts, i, _inverse_cdf(_residual(target[i], draft[i]), torch.rand(())))
    return _emitted(drafts, gamma, torch.multinomial(target[gamma], 1))


def sps_chain(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Speculative sampling with the acceptance in Triton, correct. LOSSLESS under both uniform models; the twin
    of the bugs below."""
    return _verify(_accept, candidate_input_ids, candidate_logits, candidate_length, new_logits)


def sps_chain_le(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """The coin of 0 with ``<=``: LOSSLESS under ``--uniforms continuous`` (``u = 0`` has probability 0), LOSSY by
    a support violation under ``--uniforms grid`` wherever the draft proposes a token the target excludes."""
    return _verify(_accept_le, candidate_input_ids, candidate_logits, candidate_length, new_logits)


def sps_chain_reused_uniform(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """One uniform decides every position's acceptance. LOSSY from depth 2."""
    return _verify(_accept_reused, candidate_input_ids, candidate_logits, candidate_length, new_logits)


def sps_chain_sqrt(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """A kernel the capture refuses: ``certify`` exits 2 naming the ``tl.sqrt`` line."""
    return _verify(_accept_sqrt, candidate_input_ids, candidate_logits, candidate_length, new_logits)
