"""The exact expected acceptance of one drafted round given its rows: ``E[τ | tree, p, q]`` over the verifier's
own random choices only (docs/engines.md, "One round's expectation"), by enumerating the reference rule's choices
on that one tree.

A real round's rows are vectors over a large vocabulary (49,152 tokens for SmolLM2). Two reductions make the
enumeration small, neither changing the expectation:

* **support** (:func:`restrict_round`) — every row is restricted to the union of the tokens with mass in some row
  of the round and the drafted tokens. Under top-k processing the others have zero mass in every row, so no
  rule's arithmetic sees them (a zero adds nothing to a sum, a positive part or a minimum) and no draw can reach
  them: the restriction drops no mass and renormalises nothing. A round with more than :data:`MAX_SUPPORT` such
  tokens is refused: process the rows with a top-k;
* **undrafted outcomes** (:class:`LumpingChooser`) — a draw over the vocabulary has one branch per drafted token
  and one for all the others together. Exact for every rule whose acceptance after such a draw depends on the
  token only through which drafted token it equals, if any: the built-in rules' vocabulary draws are the emitted
  token (nothing follows) or sample-and-match's target draw (compared with the children's tokens). Tested against
  the enumeration of every outcome on small vocabularies, rule by rule (tests/test_conditional.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from simulator.errors import InvalidParameterError
from simulator.numeric import Number
from simulator.trees import DraftTree

from exact.enumeration import EnumeratingChooser, enumerate_outcomes

#: the most tokens a restricted round may keep (each of the rule's row operations is a Python loop over them)
MAX_SUPPORT = 8192


@dataclass(frozen=True)
class Round:
    """One drafted tree over a (restricted) vocabulary: its rows as float tuples, ``None`` for a node the drafter
    sampled nothing from; ``support[i]`` is token ``i``'s id in the full vocabulary."""

    tree: DraftTree
    p: tuple[tuple[float, ...] | None, ...]
    q: tuple[tuple[float, ...], ...]
    support: tuple[int, ...]


def restrict_round(parents: Sequence[int], tokens: Sequence[int], p: np.ndarray, q: np.ndarray,
                   sampled: Sequence[bool]) -> Round:
    """The round of ``parents``/``tokens`` (``tokens[0]`` unused) with rows ``p [n, V]`` (read where
    ``sampled[v]``) and ``q [n, V]``, restricted to its support (module docstring). A round whose support exceeds
    :data:`MAX_SUPPORT` raises :class:`InvalidParameterError` on ``top_k``."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    inner = np.asarray(sampled, dtype=bool)
    mass = (q > 0).any(axis=0) | (p[inner] > 0).any(axis=0)
    mass[np.asarray(tokens[1:], dtype=np.int64)] = True
    support = np.flatnonzero(mass)
    if len(support) > MAX_SUPPORT:
        raise InvalidParameterError("top_k", f"the round's rows put mass on {len(support):,} tokens (at most "
                                             f"{MAX_SUPPORT:,} are enumerated): process them with a top-k")
    new_id = {int(x): i for i, x in enumerate(support)}
    tree = DraftTree(parents, [None] + [new_id[int(x)] for x in tokens[1:]], len(support))
    rows_p = tuple(tuple(p[v, support].tolist()) if inner[v] else None for v in range(len(parents)))
    rows_q = tuple(tuple(q[v, support].tolist()) for v in range(len(parents)))
    return Round(tree, rows_p, rows_q, tuple(int(x) for x in support))


class LumpingChooser:
    """``inner``'s choices, except that a draw over the whole vocabulary (a weight vector of ``vocab`` entries,
    ``vocab`` above the tree's ``nodes``, so that no draw over nodes or flows is taken for one) has a branch per
    token of ``kept`` and a single branch for every other token, which returns the smallest of them with weight."""

    def __init__(self, inner: EnumeratingChooser, vocab: int, nodes: int, kept: Sequence[int]) -> None:
        self.inner, self.vocab, self.nodes = inner, vocab, nodes
        self.kept = sorted(set(kept))

    def bernoulli(self, prob: Number) -> bool:
        return self.inner.bernoulli(prob)

    def categorical(self, weights: Sequence[Number]) -> int:
        if len(weights) != self.vocab or self.vocab <= self.nodes + 1:
            return self.inner.categorical(weights)
        kept = set(self.kept)
        rest = [x for x, w in enumerate(weights) if w > 0 and x not in kept]
        if len(rest) <= 1:
            return self.inner.categorical(weights)
        lumped = [weights[x] for x in self.kept] + [sum(weights[x] for x in rest)]
        branch = self.inner.categorical(lumped)
        return self.kept[branch] if branch < len(self.kept) else rest[0]


@dataclass(frozen=True)
class Expectation:
    """``E[τ | tree, rows]`` (accepted draft tokens), the total probability enumerated (1 up to rounding) and the
    executions it took."""

    accepted: float
    total: float
    executions: int


def expected_acceptance(verifier: Callable, drafted: Round, lump: bool = True) -> Expectation:
    """``E[τ]`` of ``verifier`` (a reference rule: ``verifier(tree, p, q, rng) -> (node, token)``) on one drafted
    round, every choice it makes enumerated; ``lump`` merges a vocabulary draw's undrafted outcomes
    (:class:`LumpingChooser`)."""
    tree = drafted.tree
    depth = [tree.depth(v) for v in range(len(tree))]
    kept = [x for x in tree.tokens[1:] if x is not None]

    def program(chooser: EnumeratingChooser) -> int:
        rng = LumpingChooser(chooser, len(drafted.support), len(tree), kept) if lump else chooser
        return depth[verifier(tree, drafted.p, drafted.q, rng)[0]]

    accepted = total = 0.0
    executions = 0
    for tau, prob in enumerate_outcomes(program, exact=False):
        accepted += tau * prob
        total += prob
        executions += 1
    return Expectation(accepted, total, executions)
