"""Token verification (TV) on any tree (docs/rules.md): a single-step rule applied top-down (:func:`tv`)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..numeric import Number
from ..randomness import Randomness
from ..trees import DraftTree
from .rules import SingleStepRule

Rows = Sequence[Optional[Sequence[Number]]]


@dataclass(frozen=True)
class Lift:
    """What :func:`tv` built a verifier from: the single-step rule and its tuple law."""

    rule: SingleStepRule
    law: str


#: every verifier :func:`tv` returned, by identity (weakly: a lift built and dropped is forgotten). A wrapper of
#: one — ``functools.wraps`` copies attributes, not identity — is not in it.
_LIFTS: "weakref.WeakKeyDictionary[Callable, Lift]" = weakref.WeakKeyDictionary()


def token_step(rule: SingleStepRule, candidates: Sequence[int], p: Optional[Sequence[Number]],
               q: Sequence[Number], rng: Randomness, law: str = "iid") -> tuple[Optional[int], Optional[int]]:
    """One node of token verification: ``(index of the accepted candidate, None)``, or ``(None, y)`` with ``y``
    drawn from the rule's residual on rejection, or from ``q`` where there are no candidates (a leaf's bonus
    token). The whole of what token verification does at a node, so that a proof of the step is a proof of this
    code (exact/prove/lifting.py)."""
    if not candidates:
        return None, rng.categorical(q)
    index, corrected = rule.step(candidates, tuple(p), tuple(q), rng, law)
    if index is None:
        return None, rng.categorical(corrected)
    return index, None


def token_verify(rule: SingleStepRule, tree: DraftTree, p: Rows, q: Rows, rng: Randomness,
                 law: str = "iid") -> tuple[int, int]:
    """Walk down from the root with ``rule``; return the accepted node and the emitted token."""
    v = 0
    while True:
        kids = rule.used(tree.children(v))
        index, y = token_step(rule, [tree.tokens[c] for c in kids], p[v], q[v], rng, law)
        if index is None:
            return v, y
        v = kids[index]


def tv(rule: SingleStepRule, law: str = "iid"):
    """The TV lift of ``rule`` as a verifier function.

    At node ``v`` the rule sees the tokens of ``v``'s children; if it accepts one, verification moves to that child;
    if it rejects, the correction ``y`` is drawn from the rule's residual; at a leaf ``y ~ q_v``. ``law`` is the
    tuple law the flow-defined rules (OPT, GR) solve for; sequential rules ignore it. Each verifier built is
    remembered with its rule and law (:func:`lift_of`), so that a proof can take it apart into its single step
    (:mod:`exact.prove.lifting`) without going by its name.
    """
    def verify(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
        return token_verify(rule, tree, p, q, rng, law)
    verify.__name__ = f"tv_{rule.name}"
    verify.__doc__ = f"Token verification lifting the single-step rule {rule.name!r} ({law} tuple law)."
    _LIFTS[verify] = Lift(rule, law)
    return verify


def lift_of(fn: object) -> Lift | None:
    """The rule and law a verifier was built from by :func:`tv`, or ``None`` for any other function (a user's
    wrapper of a lift included)."""
    try:
        return _LIFTS.get(fn)
    except TypeError:  # not weakly referenceable: not a function tv built
        return None
