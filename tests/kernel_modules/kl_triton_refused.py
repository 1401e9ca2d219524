"""Triton chain kernels the interpreter capture must refuse, one unmodelled use of a random value each
(tests/test_triton_kernels.py); each is ``specproof.gate.triton_kernels``' correct acceptance kernel with one
line changed, launched by the same torch wrapper."""

from __future__ import annotations

import functools

import triton
import triton.language as tl

from specproof.gate.triton_kernels import _verify


@triton.jit
def _summed(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    u = tl.sum(tl.load(uniforms + tl.arange(0, 2)), 0)
    tl.store(accepted + i, (u * tl.load(draft_rows + i * V + x) < tl.load(target_rows + i * V + x)).to(tl.int32))


@triton.jit
def _stored(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    i = tl.program_id(0)
    u = tl.load(uniforms + i)
    tl.store(draft_rows + i * V, u)


@triton.jit
def _branched(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    i = tl.program_id(0)
    u = tl.load(uniforms + i)
    if u:
        tl.store(accepted + i, 1)


@triton.jit
def _bits(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    i = tl.program_id(0)
    u = tl.load(uniforms + i)
    tl.store(accepted + i, (u.to(tl.int64, bitcast=True) < 3).to(tl.int32))


@triton.jit
def _squared(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    u = tl.load(uniforms + i)
    tl.store(accepted + i, (u * u * tl.load(draft_rows + i * V + x) < tl.load(target_rows + i * V + x)).to(tl.int32))


@triton.jit
def _normal(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    i = tl.program_id(0)
    tl.store(accepted + i, (tl.abs(tl.randn(1234, i)) < 0.5).to(tl.int32))  # a normal folded: not monotone


@triton.jit
def _raw(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    i = tl.program_id(0)
    tl.store(accepted + i, (tl.randint(1234, i) < 3).to(tl.int32))  # raw random bits as an integer


@triton.jit
def _reciprocal(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    i = tl.program_id(0)
    tl.store(accepted + i, (2.0 / tl.load(uniforms + i) < 3.0).to(tl.int32))


summed, stored, branched, bits, squared, normal, raw, reciprocal = (functools.partial(_verify, k) for k in (
    _summed, _stored, _branched, _bits, _squared, _normal, _raw, _reciprocal))
