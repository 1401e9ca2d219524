"""simulator/kernels/triton_compat.py: under Triton 3.5's interpreter with NumPy 2.4 or later, a loop bound
loaded from a tensor (``for i in range(1, n + 1)``, the construct SGLang's chain_speculative_sampling_triton stops
at) raises TypeError; inside :func:`interpreter_scalar_index` the same kernel, unmodified, runs and gives the sum.
The kernels are written to a file here and imported with ``TRITON_INTERPRET=1`` set, as the interpreter reads a
kernel's source."""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import numpy as np  # noqa: E402

from simulator.kernels.triton_compat import interpreter_scalar_index  # noqa: E402

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def triangular(n_ptr, out_ptr):
    n = tl.load(n_ptr)
    total = 0
    for i in range(1, n + 1):
        total += i
    tl.store(out_ptr, total)


@triton.jit
def block_bound(out_ptr):
    total = 0
    for i in range(tl.arange(0, 2) + 1):
        total += i
    tl.store(out_ptr, total)
'''
NUMPY_REFUSES = tuple(int(part) for part in np.__version__.split(".")[:2]) >= (2, 4)


@pytest.fixture
def kernels(monkeypatch, tmp_path):
    """The module of :data:`KERNELS`, imported with Triton's interpreter on (triton reads the variable when a
    kernel is decorated)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    path = tmp_path / "compat_kernels.py"
    path.write_text(KERNELS)
    spec = importlib.util.spec_from_file_location("compat_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _triangular(kernels, n: int) -> int:
    out = torch.zeros(1, dtype=torch.int32)
    kernels.triangular[(1,)](torch.tensor([n], dtype=torch.int32), out)
    return int(out.item())


@pytest.mark.parametrize("n", [0, 1, 4])
def test_a_loop_bound_loaded_from_a_tensor_runs_with_the_fix(kernels, n):
    with interpreter_scalar_index() as applied:
        assert applied
        assert _triangular(kernels, n) == n * (n + 1) // 2


@pytest.mark.skipif(not NUMPY_REFUSES, reason="NumPy before 2.4 converts a one-element array, with a warning")
def test_without_the_fix_the_interpreter_stops_and_after_it_stops_again(kernels):
    from triton.runtime import interpreter
    from triton.runtime.errors import InterpreterError

    original = interpreter._patch_lang_tensor
    with pytest.raises(InterpreterError, match="only 0-dimensional arrays"):
        _triangular(kernels, 4)
    with interpreter_scalar_index():
        assert _triangular(kernels, 4) == 10
    assert interpreter._patch_lang_tensor is original
    with pytest.raises(InterpreterError, match="only 0-dimensional arrays"):
        _triangular(kernels, 4)


def test_a_block_is_still_no_integer_with_the_fix(kernels):
    from triton.runtime.errors import InterpreterError

    with interpreter_scalar_index(), pytest.raises(InterpreterError, match="TypeError"):
        kernels.block_bound[(1,)](torch.zeros(1, dtype=torch.int32))
