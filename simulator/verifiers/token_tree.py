"""Token verification (TV) on any tree (SPEC §5): a single-step rule applied top-down.

At node ``v`` the rule sees the tokens of ``v``'s children; if it accepts one, verification moves to that
child; if it rejects, the correction ``y`` is drawn from the rule's residual; at a leaf ``y ~ q_v``.
``tv-sps`` offers the rule only the first child, since SpS is a one-candidate rule.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..numeric import Number
from ..randomness import Randomness
from ..trees import DraftTree
from .single_step import StepResult, deterministic_rrs, rrs, rrsw, sps

Rule = Callable[[Sequence[int], Sequence[Number], Sequence[Number], Randomness], StepResult]
Rows = Sequence[Optional[Sequence[Number]]]


def token_verify(rule: Rule, tree: DraftTree, p: Rows, q: Rows, rng: Randomness,
                 max_candidates: int | None = None) -> tuple[int, int]:
    """Walk down from the root with ``rule``; return the accepted node and the emitted token."""
    v = 0
    while True:
        kids = tree.children(v)[:max_candidates]
        if not kids:
            return v, rng.categorical(q[v])
        index, corrected = rule([tree.tokens[c] for c in kids], p[v], q[v], rng)
        if index is None:
            return v, rng.categorical(corrected)
        v = kids[index]


def tv_sps(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """TV-lifted SpS: Leviathan et al.'s token verification along the first child of every node."""
    return token_verify(sps, tree, p, q, rng, max_candidates=1)


def tv_rrs(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """TV-lifted recursive rejection sampling with replacement (i.i.d. children)."""
    return token_verify(rrs, tree, p, q, rng)


def tv_rrsw(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """TV-lifted recursive rejection sampling without replacement (children drawn without replacement)."""
    return token_verify(rrsw, tree, p, q, rng)


def tv_det(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """TV-lifted deterministic RRS (EAGLE-2): lossless for any draft, since it never reads ``p``."""
    return token_verify(deterministic_rrs, tree, p, q, rng)
