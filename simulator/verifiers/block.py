"""Block verification on a chain draft (Block Verification, Sun et al., ICLR 2025, arXiv:2403.10444): ``bv``
(Alg. 2, :func:`block_verify`) and ``greedy-bv`` (App. C, Alg. 4, :func:`greedy_block_decision`), lossless only
with Alg. 5's modification of later tokens (Lemma 8), returned as a :class:`GreedyBlockCompletion`. Every level
draws its Bernoulli in order ``i = 1..γ`` (no early exit), then the correction token."""

from __future__ import annotations

from typing import Optional, Sequence

from ..completion import GreedyBlockCompletion
from ..errors import UnsupportedDraftError
from ..numeric import Number, positive_part, ratio, residual, total
from ..randomness import Randomness
from ..trees import DraftTree

Rows = Sequence[Optional[Sequence[Number]]]


def chain_of(tree: DraftTree, verifier: str) -> list[int]:
    """The chain's nodes from the root; a tree with branching is not a block draft."""
    if not tree.is_chain():
        raise UnsupportedDraftError("tree", f"{verifier} verifies a chain draft (one child per node); "
                                            "use a chain topology")
    return tree.chain_nodes()


def bv(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """Block verification, Algorithm 2."""
    nodes = chain_of(tree, "bv")
    return block_verify(tree, nodes, p, q, rng)


def block_verify(tree: DraftTree, nodes: Sequence[int], p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """Algorithm 2 along ``nodes`` (a root-to-leaf chain of ``tree``); ``p`` may be any draft law of the chain
    (GBV passes the selected path's law). With Eqs. 4–5: ``p_0 = 1``, ``p_i = min(1, p_{i−1} q(X_i)/p(X_i))``,
    ``h_i = S_i / (S_i + 1 − p_i)`` with ``S_i = Σ_x (p_i q_i(x) − p_i^draft(x))_+`` (``h_i = 0`` when ``S_i = 0``),
    ``h_γ = p_γ``; ``τ`` is the *last* ``i`` whose Bernoulli(``h_i``) succeeds (0 if none); the correction is drawn
    from ``norm((p_τ q_τ − p_τ^draft)_+)``, or from ``q_γ`` when ``τ = γ``."""
    gamma = len(nodes) - 1
    weights: list[Number] = [1]  # p_0 .. p_γ
    tau = 0
    for i in range(1, gamma + 1):
        parent, node = nodes[i - 1], nodes[i]
        x = tree.tokens[node]
        # Alg. 2 line 4: min(1, p_{i−1}·q/p) (ratio() caps at 1 and defines x/0)
        weights.append(ratio(weights[i - 1] * q[parent][x], p[parent][x]))
        if i < gamma:
            slack = total(positive_part(weights[i] * qx - px for qx, px in zip(q[node], p[node])))
            h = slack / (slack + (1 - weights[i])) if slack > 0 else 0  # Eq. 5; (1 − p_i) first keeps h ≤ 1 in floats
        else:
            h = weights[gamma]
        if rng.bernoulli(h):
            tau = i  # the last success wins
    if tau == gamma:
        return nodes[gamma], rng.categorical(q[nodes[gamma]])
    node = nodes[tau]
    return node, rng.categorical(residual(q[node], p[node], scale=weights[tau]))  # Eq. 4


def greedy_block_decision(tree: DraftTree, p: Rows, q: Rows, rng: Randomness,
                          verifier: str = "greedy-bv") -> tuple[int, int, int]:
    """Algorithm 4; returns ``(node, y, γ)``. ``p_i = p_{i−1} q/p`` without the ``min``,
    ``h_i = Σ(p_i q − p)_+ / Σ(p − p_i q)_+`` (Bernoulli of ``min(1, h_i)``), the last level accepted with
    probability ``min(1, p_γ)``, the correction from Eq. 30."""
    nodes = chain_of(tree, verifier)
    gamma = len(nodes) - 1
    weights: list[Number] = [1]
    tau = 0
    for i in range(1, gamma + 1):
        parent, node = nodes[i - 1], nodes[i]
        x = tree.tokens[node]
        if p[parent][x] == 0:
            raise UnsupportedDraftError(f"tokens[{node}]", f"{verifier} needs drafted tokens of positive "
                                                           "draft probability")
        weights.append(weights[i - 1] * q[parent][x] / p[parent][x])  # Alg. 4 line 4: no min
        if i < gamma:
            over = total(positive_part(weights[i] * qx - px for qx, px in zip(q[node], p[node])))
            under = total(positive_part(px - weights[i] * qx for qx, px in zip(q[node], p[node])))
            h = ratio(over, under) if over > 0 else 0  # min(1, over/under); 0/0 → 0 as in bv
        else:
            h = ratio(weights[gamma], 1)  # line 13: η_γ < p_γ
        if rng.bernoulli(h):
            tau = i
    if tau == gamma:
        return nodes[gamma], rng.categorical(q[nodes[gamma]]), gamma
    node = nodes[tau]
    return node, rng.categorical(residual(q[node], p[node], scale=weights[tau])), gamma  # Eq. 30


def greedy_bv(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int, GreedyBlockCompletion]:
    """Greedy block verification with its distribution modification (Algorithms 4–6)."""
    node, y, gamma = greedy_block_decision(tree, p, q, rng)
    return node, y, GreedyBlockCompletion(gamma)
