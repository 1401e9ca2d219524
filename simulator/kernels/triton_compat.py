"""A fix to Triton's CPU interpreter that lets shipped kernels run under it unmodified
(:func:`interpreter_scalar_index`; docs/kernels.md, "Shipped Triton clients"). Triton is not imported here."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

_MISSING = object()


def _scalar_index(self: Any) -> int:
    """``tensor.__index__`` for the interpreter: the integer a one-element array holds (a larger array still raises
    NumPy's TypeError, as a block has no integer value)."""
    return int(self.handle.data.squeeze())


@contextlib.contextmanager
def interpreter_scalar_index() -> Iterator[bool]:
    """While the block runs, Triton's interpreter converts a scalar used as an integer (``range(n)``, an index) by
    its one element, so that it works with NumPy 2.4 and later. Yields whether the fix was applied: True for
    Triton 3.5's interpreter, whose ``_patch_lang_tensor(tensor)`` installs ``__index__`` at every launch (the
    fix wraps that function); False for a layout it does not know, which is left as it is.

    On exit the interpreter's function and ``tensor.__index__`` are put back as they were, so nothing outlives
    the block. Raises ImportError when triton is not installed.

    Why: Triton 3.5's interpreter holds a scalar as a NumPy array of shape ``(1,)`` and converts it with
    ``int(array)`` in ``tensor.__index__``; NumPy 2.4 turned that conversion, deprecated since 1.25, into a
    ``TypeError`` (numpy 2.4.0 release notes; triton-lang/triton#9171). So a loop bound computed in the kernel, such
    as SGLang's ``for step in range(1, num_accept + 1)``, stops the interpreter although the kernel is valid and runs
    compiled. Triton's later fix converts by the one element, as this does. ``TRITON_INTERPRET=1`` must be set before
    triton is first imported, and triton is optional, so nothing here imports it at module import.
    """
    from triton.language import core
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or len(inspect.signature(original).parameters) != 1:
        yield False
        return

    def patch_lang_tensor(tensor: type) -> None:
        original(tensor)
        tensor.__index__ = _scalar_index

    before = core.tensor.__dict__.get("__index__", _MISSING)
    interpreter._patch_lang_tensor = patch_lang_tensor
    try:
        yield True
    finally:
        interpreter._patch_lang_tensor = original
        if before is _MISSING:
            with contextlib.suppress(AttributeError):
                del core.tensor.__index__
        else:
            core.tensor.__index__ = before
