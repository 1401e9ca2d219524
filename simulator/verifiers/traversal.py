"""Traversal Verification (Weng et al., NeurIPS 2025, arXiv:2505.12398, Alg. 3, Eqs. 1–3): :func:`traversal_verify`,
the lossless ``trv`` and ``trv-iid``, and the control ``bug-trv-insertion-order``."""

from __future__ import annotations

from collections import deque
from typing import Optional, Sequence

from ..numeric import Number, normalise, positive_part, ratio, total
from ..randomness import Randomness
from ..trees import DraftTree

Rows = Sequence[Optional[Sequence[Number]]]


def _trie(tree: DraftTree, merge: bool) -> tuple[list[int], list[int], list[list[int]]]:
    """``(representative, row source, children)`` of the tree to traverse. Merged siblings are represented by
    their first node; their rows (equal: same path) are read from a member that has children, since a leaf
    carries no draft row."""
    rep, source, kids = [0], [0], [[]]
    queue = deque([(0, [0])])  # (trie node, original nodes merged into it), breadth first: BFS numbering
    while queue:
        node, members = queue.popleft()
        groups: dict[object, list[int]] = {}
        for m in members:
            for c in tree.children(m):
                key = tree.tokens[c] if merge else c
                groups.setdefault(key, []).append(c)
        for group in groups.values():
            rep.append(group[0])
            source.append(next((m for m in group if tree.children(m)), group[0]))
            kids.append([])
            kids[node].append(len(rep) - 1)
            queue.append((len(rep) - 1, group))
    return rep, source, kids


def traversal_verify(tree: DraftTree, p: Rows, q: Rows, rng: Randomness, merge: bool = True,
                     zero_draft: bool = True, post_order: bool = True) -> tuple[int, int]:
    """Alg. 3. Leaves are visited in DFS post-order (``post_order=False``: in insertion order): the chain ``α`` from
    the root to the first remaining leaf is accepted with probability ``p_α(leaf)`` (one Bernoulli); on rejection
    the leaf is deleted and its parent ``u`` updated (:func:`reject_child`): the target
    ``q_u ← norm((p_α(u) q_u − p_u)_+)`` (Eq. 1), the draft ``p_u(x_leaf) ← 0`` renormalised (Eq. 2, with
    ``zero_draft``), the rate ``p_α(u) ← S/(S + 1 − p_α(u))`` with ``S = Σ_x (p_α(u) q_u − p_u)_+`` (Eq. 3; 0 when
    ``S = 0``, as BV does); then the rates of ``u``'s remaining subtree are recomputed (line 13,
    :func:`child_rate`). When the root itself is accepted, ``y`` is drawn from its current target. With ``merge``,
    duplicate siblings are merged into one node, recursively (:func:`_trie`: a trie of the drafted paths, the merged
    node's subtree the union of theirs)."""
    rep, source, kids = _trie(tree, merge)
    n = len(rep)
    parent = [-1] * n
    for u in range(n):
        for c in kids[u]:
            parent[c] = u
    token = [tree.tokens[rep[u]] for u in range(n)]
    target = [list(q[source[u]]) for u in range(n)]
    draft = [list(p[source[u]]) if kids[u] else None for u in range(n)]
    rate: list[Number] = [0] * n
    rate[0] = target[0][0] * 0 + 1

    def refresh(u: int) -> None:  # line 1 / line 13: rates down u's subtree
        for c in kids[u]:
            rate[c] = child_rate(rate[u], target[u], draft[u], token[c])
            refresh(c)

    refresh(0)
    alive = [True] * n
    while True:
        leaf = _next_leaf(kids, alive, post_order)
        if rng.bernoulli(rate[leaf]):
            return rep[leaf], rng.categorical(target[leaf])
        alive[leaf] = False
        u = parent[leaf]
        if u < 0:  # the root was rejected: Alg. 3 ends with Y ~ its current target (probability 0 exactly)
            return rep[0], rng.categorical(target[0])
        rate[u], target[u], draft[u] = reject_child(rate[u], target[u], draft[u], token[leaf], zero_draft)
        kids[u] = [c for c in kids[u] if alive[c]]
        refresh(u)


def child_rate(rate: Number, target: Sequence[Number], draft: Sequence[Number], token: int) -> Number:
    """Line 13: the rate of a child holding ``token`` under a node of rate ``rate`` with rows ``target``, ``draft``:
    ``min(1, rate · target(token)/draft(token))``."""
    return ratio(rate * target[token], draft[token])


def reject_child(rate: Number, target: Sequence[Number], draft: Sequence[Number], token: int,
                 zero_draft: bool = True) -> tuple[Number, list[Number], list[Number]]:
    """Lines 10–12 after a child holding ``token`` is rejected: the parent's new rate (Eq. 3), target (Eq. 1)
    and draft (Eq. 2, only with ``zero_draft``)."""
    slack = positive_part(rate * qx - px for qx, px in zip(target, draft))
    mass = total(slack)
    new_target = list(normalise(slack)) if mass > 0 else list(target)
    new_draft = list(draft)
    if zero_draft:
        new_draft[token] = new_draft[token] * 0
        if total(new_draft) > 0:
            new_draft = list(normalise(new_draft))
    new_rate = mass / (mass + (1 - rate)) if mass > 0 else mass
    return new_rate, new_target, new_draft


def _next_leaf(kids: list[list[int]], alive: list[bool], post_order: bool) -> int:
    if post_order:  # root → first remaining child → … → first leaf
        v = 0
        while kids[v]:
            v = kids[v][0]
        return v
    leaves = [v for v in range(len(kids)) if alive[v] and not kids[v]]  # insertion order
    return leaves[0]


def trv(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """TRV with duplicate siblings merged (lossless on i.i.d. and without-replacement trees).

    Alg. 3's zeroing update (Eq. 2) is right for without-replacement trees and lossy on i.i.d. trees with duplicate
    siblings (docs/corrections.md); merging duplicate siblings into one node, recursively, makes it lossless there.
    """
    return traversal_verify(tree, p, q, rng, merge=True, zero_draft=True)


def trv_iid(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """TRV on i.i.d. trees with duplicates kept apart and the draft left unchanged."""
    return traversal_verify(tree, p, q, rng, merge=False, zero_draft=False)


def bug_trv_insertion_order(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """CONTROL: TRV visiting leaves in insertion order rather than DFS post-order."""
    return traversal_verify(tree, p, q, rng, merge=True, zero_draft=True, post_order=False)
