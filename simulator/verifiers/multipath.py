"""Greedy multi-path block verification (GBV; Thomas & Pal, arXiv:2602.16961, as specified in docs/rules.md) on
multi-chain drafts of ``K`` i.i.d. paths, and its control ``bug-gbv-clipped``."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..errors import UnsupportedDraftError
from ..numeric import Number, power_gap
from ..randomness import Randomness
from ..trees import DraftTree
from .block import block_verify

Rows = Sequence[Optional[Sequence[Number]]]
#: Why a drafted token of zero draft probability is refused: the selected path's law divides by its mass.
ZERO_DRAFT_GBV = "GBV's path law is defined on the i.i.d. paths drafting produces (it divides by their mass)"
Ranker = Callable[[Number, Number], tuple[int, Number]]


def _unclipped(qx: Number, px: Number) -> tuple[int, Number]:
    """``q/p`` as ``(tier, value)``: ``p = 0`` ranks above every finite ratio (tier 1) without a float infinity,
    so that the ranking runs on exact and symbolic numbers (``specproof prove``) as on floats."""
    return (1, 0) if px == 0 else (0, qx / px)


def _clipped(qx: Number, px: Number) -> tuple[int, Number]:
    return (0, 1 if px == 0 or qx >= px else qx / px)


def ranking(p: Sequence[Number], q: Sequence[Number], score: Ranker = _unclipped) -> list[int]:
    """Tokens from best to worst: by ``score(q, p)`` descending, ties by token id. GBV ranks the tokens at each prefix
    ``c`` by the unclipped ratio ``r_c(x) = q(x|c)/p(x|c)`` (``p = 0`` first), which orders whole paths
    lexicographically; the maximum of the ``K`` drafted paths is selected."""
    def key(x: int) -> tuple:
        tier, value = score(q[x], p[x])
        return -tier, -value, x
    return sorted(range(len(p)), key=key)


def _chains(tree: DraftTree) -> list[list[int]]:
    chains = []
    for first in tree.children(0):
        nodes = [0, first]
        while tree.children(nodes[-1]):
            kids = tree.children(nodes[-1])
            if len(kids) != 1:
                raise UnsupportedDraftError("tree", "gbv verifies multi-chain drafts (one child below the root)")
            nodes.append(kids[0])
        chains.append(nodes)
    return chains


def selected_law(tree: DraftTree, path: Sequence[int], p: Rows, q: Rows, k: int) -> list[tuple[Number, ...] | None]:
    """``p̃`` along ``path`` (the law of the lexicographic maximum of ``k`` i.i.d. paths), per node. With ``F_c(x)``
    the draft mass ranked below ``x``, ``A(root) = 0``, ``X(root) = 1``, ``A(cx) = A(c) + X(c) F_c(x)``,
    ``X(cx) = X(c) p(x|c)``: ``p̃(x|c) = [(A + X F_c(x) + X p(x|c))^K − (A + X F_c(x))^K] / [(A + X)^K − A^K]``."""
    zero = q[0][0] * 0
    below, mass = zero, zero + 1  # A(c), X(c)
    out: list[tuple[Number, ...] | None] = [None] * len(tree)
    for v, child in zip(path, path[1:]):
        order = ranking(p[v], q[v])
        lower, running = {}, zero
        for x in reversed(order):
            lower[x] = running
            running += p[v][x]
        # P(best path's next token = x) = ((c + m p_x)^k − c^k)/((A + m)^k − A^k), c = A + m·F(x), m = X(c): the
        # factor m cancels, and each difference of powers is m times a power gap (no cancellation in floats)
        norm = power_gap(below, below + mass, k)
        start = {x: below + mass * lower[x] for x in range(len(p[v]))}
        out[v] = tuple(p[v][x] * power_gap(start[x], start[x] + mass * p[v][x], k) / norm for x in range(len(p[v])))
        x = tree.tokens[child]
        below, mass = below + mass * lower[x], mass * p[v][x]
    return out


def greedy_multipath_verify(tree: DraftTree, p: Rows, q: Rows, rng: Randomness,
                            select_by: Ranker = _unclipped) -> tuple[int, int]:
    chains = _chains(tree)
    if not chains:  # depth 0: nothing to verify
        return 0, rng.categorical(q[0])
    depth = len(chains[0])
    if any(len(c) != depth for c in chains):
        raise UnsupportedDraftError("tree", "gbv needs chains of equal depth")
    for chain in chains:
        for v, c in zip(chain, chain[1:]):
            if not p[v][tree.tokens[c]] > 0:
                raise UnsupportedDraftError("tokens", f"node {c}: token {tree.tokens[c]} has zero draft probability; "
                                                      f"{ZERO_DRAFT_GBV}")

    def key(chain: list[int]) -> list[int]:
        return [ranking(p[v], q[v], select_by).index(tree.tokens[c]) for v, c in zip(chain, chain[1:])]

    best = min(chains, key=key)  # first chain among equal paths
    return block_verify(tree, best, selected_law(tree, best, p, q, len(chains)), q, rng)


def gbv(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """GBV: select the lexicographic maximum path by the unclipped ratio, then BV with its law.

    The best drafted path by :func:`ranking` is selected, and block verification runs on it with the selected path's
    law ``p̃`` (:func:`selected_law`) in place of ``p``.
    """
    return greedy_multipath_verify(tree, p, q, rng)


def bug_gbv_clipped(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """CONTROL: selection by the clipped ratio with the law of the unclipped order.

    That is the tie-break mismatch between selection and its probability law of docs/controls.md.
    """
    return greedy_multipath_verify(tree, p, q, rng, select_by=_clipped)
