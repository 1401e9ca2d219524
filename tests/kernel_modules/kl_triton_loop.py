"""A Triton chain kernel with a loop bound loaded from a tensor (``for step in range(1, n + 1)``, the construct
SGLang's chain_speculative_sampling_triton runs), which Triton 3.5's interpreter stops at under NumPy 2.4 unless
the capture applies simulator/kernels/triton_compat.py's fix (tests/test_triton_kernels.py). The kernel is
``specproof.gate.triton_kernels``' correct acceptance with the draft's id counted in a loop; its twin counts one
step short, so it reads the probabilities of the token before the draft."""

from __future__ import annotations

import functools

import triton
import triton.language as tl

from specproof.gate.triton_kernels import _verify


@triton.jit
def _looped(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    i = tl.program_id(0)
    n = tl.load(drafts + i)
    x = 0
    for step in range(1, n + 1):
        x += 1
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    u = tl.load(uniforms + i)
    tl.store(accepted + i, (u * p < q).to(tl.int32))


@triton.jit
def _looped_short(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    i = tl.program_id(0)
    n = tl.load(drafts + i)
    x = 0
    for step in range(1, n):
        x += 1
    p = tl.load(draft_rows + i * V + x)
    q = tl.load(target_rows + i * V + x)
    u = tl.load(uniforms + i)
    tl.store(accepted + i, (u * p < q).to(tl.int32))


looped, looped_short = (functools.partial(_verify, k) for k in (_looped, _looped_short))
