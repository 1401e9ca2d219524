"""The registry's reference to a rule's batched kernel (imports nothing heavy: the registry loads it with the
reference rules, and the kernel module itself only when an engine first runs it)."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable


@dataclass(frozen=True)
class KernelRef:
    """A rule's batched kernel in the registry: ``module:function`` (imported when first used, so a numpy-only
    install never imports torch) and the keyword options that select the rule within a kernel family.

    ``float64``: the kernel computes in float64 whatever its inputs (the flow-defined rules, whose solver is a
    float64 CPU routine). ``target_completion``: the tokens after the emitted one follow the target (false for
    greedy BV, whose later tokens follow a modified target the reference returns)."""

    path: str
    options: tuple[tuple[str, Any], ...] = ()
    float64: bool = False
    target_completion: bool = True

    def resolve(self) -> Callable[..., tuple]:
        module, _, name = self.path.partition(":")
        return partial(getattr(importlib.import_module(module), name), **dict(self.options))

    def run(self, batch: Any) -> tuple[Any, Any]:
        """The kernel on ``batch`` (a :class:`~simulator.verifiers.batched.frame.Batch`). On torch it runs under
        ``inference_mode`` (no autograd bookkeeping: a few µs less per operation, which is most of a small
        batch's time); its results are copied out as ordinary tensors, which a caller may update in place."""
        kernel = self.resolve()
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(batch.shape.kids, torch.Tensor):
            return kernel(batch)
        with torch.inference_mode():
            out = kernel(batch)
        return tuple(a.clone() for a in out)


def kernel(path: str, **options: Any) -> KernelRef:
    """A :class:`KernelRef` of a function of this package, ``"module:function"`` relative to it."""
    flags = {key: options.pop(key) for key in ("float64", "target_completion") if key in options}
    return KernelRef(f"{__package__}.{path}", tuple(sorted(options.items())), **flags)
