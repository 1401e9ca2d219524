"""Token verification (TV) on any tree (docs/rules.md): a single-step rule applied top-down.

At node ``v`` the rule sees the tokens of ``v``'s children; if it accepts one, verification moves to that
child; if it rejects, the correction ``y`` is drawn from the rule's residual; at a leaf ``y ~ q_v``.
``law`` is the tuple law the flow-defined rules (OPT, GR) solve for; sequential rules ignore it.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..numeric import Number
from ..randomness import Randomness
from ..trees import DraftTree
from .rules import SingleStepRule

Rows = Sequence[Optional[Sequence[Number]]]


def token_verify(rule: SingleStepRule, tree: DraftTree, p: Rows, q: Rows, rng: Randomness,
                 law: str = "iid") -> tuple[int, int]:
    """Walk down from the root with ``rule``; return the accepted node and the emitted token."""
    v = 0
    while True:
        kids = rule.used(tree.children(v))
        if not kids:
            return v, rng.categorical(q[v])
        index, corrected = rule.step([tree.tokens[c] for c in kids], tuple(p[v]), tuple(q[v]), rng, law)
        if index is None:
            return v, rng.categorical(corrected)
        v = kids[index]


def tv(rule: SingleStepRule, law: str = "iid"):
    """The TV lift of ``rule`` as a verifier function."""
    def verify(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
        return token_verify(rule, tree, p, q, rng, law)
    verify.__name__ = f"tv_{rule.name}"
    verify.__doc__ = f"Token verification lifting the single-step rule {rule.name!r} ({law} tuple law)."
    return verify
