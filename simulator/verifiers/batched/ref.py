"""The registry's references to the functions of this package it names — a rule's array rule — imported when first
used (this module imports nothing heavy: the registry loads it with the reference rules, and the named module only
when an engine first runs it)."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable


@dataclass(frozen=True)
class FunctionRef:
    """A function ``module:function`` (imported when first used, so a numpy-only install never imports torch) and
    the keyword options it is called with: the objects selecting what it computes (a single-step rule's array step,
    a flag of a variant)."""

    path: str
    options: tuple[tuple[str, Any], ...] = ()

    def resolve(self) -> Callable[..., Any]:
        module, _, name = self.path.partition(":")
        return partial(getattr(importlib.import_module(module), name), **dict(self.options))


@dataclass(frozen=True)
class ArrayRuleRef(FunctionRef):
    """A rule's array rule in the registry: a function of :mod:`simulator.verifiers.batched` taking a
    :class:`~simulator.verifiers.batched.frame.Batch` and returning ``(node [B], y [B])``, with its options. Engines
    look an array rule up here, never by the rule's name.

    ``float64``: the array rule computes in float64 whatever its inputs (the flow-defined rules, whose solver is a
    float64 CPU routine). ``target_completion``: the tokens after the emitted one follow the target (false for
    greedy BV, whose later tokens follow a modified target the reference returns)."""

    float64: bool = False
    target_completion: bool = True

    def path_nodes(self, parents: tuple[int, ...]) -> int | None:
        """The most nodes the array rule reads in one trial, where it reads only each trial's path from the root and
        the children of its nodes (its function's ``path_nodes``: token verification); ``None`` where it reads the
        whole tree."""
        count = getattr(self.resolve().func, "path_nodes", None)
        return None if count is None else count(parents)

    def run(self, batch: Any) -> tuple[Any, Any]:
        """The array rule on ``batch``. On torch it runs under ``inference_mode`` (no autograd bookkeeping: a few µs
        less per operation, which is most of a small batch's time); its results are copied out as ordinary
        tensors, which a caller may update in place."""
        rule = self.resolve()
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(batch.shape.kids, torch.Tensor):
            return rule(batch)
        with torch.inference_mode():
            out = rule(batch)
        return tuple(a.clone() for a in out)


def array_rule(path: str, **options: Any) -> ArrayRuleRef:
    """An :class:`ArrayRuleRef` of a function of this package, ``"module:function"`` relative to it."""
    flags = {key: options.pop(key) for key in ("float64", "target_completion") if key in options}
    return ArrayRuleRef(f"{__package__}.{path}", tuple(sorted(options.items())), **flags)
