"""Sample-and-match for deterministic drafts (docs/rules.md; ADED's greedy mode, REST, EAGLE's top-k point masses):
``match``, lossless under every scheme, and its control ``bug-match-per-row``."""

from __future__ import annotations

from typing import Optional, Sequence

from ..numeric import Number
from ..randomness import Randomness
from ..trees import DraftTree

Rows = Sequence[Optional[Sequence[Number]]]


def match(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """At each node one token ``y ~ q_v`` is drawn; if a child holds ``y`` verification moves there, else ``y`` is
    emitted. The output is exactly a target sample whatever the draft: lossless under every scheme."""
    v = 0
    while True:
        y = rng.categorical(q[v])
        nxt = next((c for c in tree.children(v) if tree.tokens[c] == y), None)
        if nxt is None:
            return v, y
        v = nxt


def bug_match_per_row(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """CONTROL: one independent target token per candidate row, accepting a row whose own draw matches (the last draw
    emitted when none does): lossy where a node has two children or more."""
    v = 0
    while True:
        kids = tree.children(v)
        if not kids:
            return v, rng.categorical(q[v])
        for c in kids:
            y = rng.categorical(q[v])
            if tree.tokens[c] == y:
                v = c
                break
        else:
            return v, y
