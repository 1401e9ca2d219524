"""Shared helpers for the tests. Oracles here are computed independently of the code under test."""

from __future__ import annotations

import os
from fractions import Fraction

# Triton kernels are certified under Triton's interpreter, which must be asked for before triton is first imported
# (torch._dynamo imports it): set here, before any test module, for every worker
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

from simulator.models import TableModel


@pytest.fixture
def block_example() -> TableModel:
    """Block Verification (Sun et al., ICLR 2025, arXiv:2403.10444) §2: context-free, tokens A=0, B=1;
    M_b = q = (1/3, 2/3), M_s = p = (2/3, 1/3)."""
    return TableModel(2, {None: [Fraction(2, 3), Fraction(1, 3)]}, {None: [Fraction(1, 3), Fraction(2, 3)]})


@pytest.fixture(params=["cpu", "cuda"])
def torch_device(request) -> str:
    """Each torch-path test that takes this fixture runs on the CPU and, where a CUDA GPU is present, on it too
    (skipped elsewhere): a GPU machine runs the same assertions, unchanged, on the GPU."""
    torch = pytest.importorskip("torch")
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
    return request.param


@pytest.fixture
def sequential_tree_positions(monkeypatch) -> None:
    """A planted deployment bug in the torch path's tree scoring: tree tokens numbered sequentially instead of by
    depth (simulator.real.kv_cache.tree_inputs keeps its mask, loses its positions)."""
    torch = pytest.importorskip("torch")
    import simulator.real.kv_cache as kv_cache
    original = kv_cache.tree_inputs

    def sequential(cached, context_len, pending, parents, nodes, slot, dtype, device):
        mask, positions = original(cached, context_len, pending, parents, nodes, slot, dtype, device)
        return mask, torch.arange(cached, cached + positions.shape[1], device=device)[None]

    monkeypatch.setattr(kv_cache, "tree_inputs", sequential)
