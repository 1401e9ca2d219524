"""The exact engine's recursions for a round's law, by the registry's :class:`~simulator.verifiers.registry.Recursion`
(``certify --method recursion``): a rule's ``VerifierSpec.exact_law`` says which recursion and with which options,
and this table supplies its function, so the core names no function of the exact engine."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from simulator.verifiers.registry import LawRecursion, Recursion

from .layer_dp import layer_law
from .token_law import token_law
from .traversal_dp import traversal_law

#: every recursion's function, called ``f(view, drafter, **options)``
LAWS: dict[Recursion, Callable[..., Any]] = {Recursion.TOKEN: token_law, Recursion.LAYER: layer_law,
                                             Recursion.TRAVERSAL: traversal_law}


def law_function(ref: LawRecursion) -> Callable[..., Any]:
    """The function of ``ref``'s recursion with its options bound, called ``f(view, drafter)``: an
    :class:`~exact.recursions.token_law.ArrayLaw`, or ``(outcomes, sub-problems solved)``."""
    return partial(LAWS[ref.recursion], **dict(ref.options))
