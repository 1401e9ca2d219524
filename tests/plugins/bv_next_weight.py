"""A block-verification plugin with one deliberate bug, the fixture of ``specproof prove``'s tests
(tests/test_prove_decides.py): the residual drawn after accepting ``τ`` tokens is scaled by the *next* position's
weight ``w[τ + 1]`` where Sun et al.'s Eq. 4 has ``w[τ]``, and falls back to ``w[τ]`` when that residual is empty.

Everything else is :func:`simulator.verifiers.block.bv` (Algorithm 2). The loss shows only on some model pairs,
and the fallback's residual is empty only on pairs where the branch that reads it has probability zero — a
symbolic run must prune that branch, not stop on it::

    specproof certify --verifier tests.plugins.bv_next_weight:bv_next_weight --topology chain --depth 2 \\
        --model random-rational --vocab 3 --seeds 20
"""

from __future__ import annotations

from simulator.numeric import positive_part, ratio, total
from simulator.verifiers.block import chain_of


def bv_next_weight(tree, p, q, rng):
    """Block verification whose correction after ``τ < γ`` accepted tokens comes from
    ``norm((w[τ + 1]·q − p)_+)`` at the last accepted node (``w[τ]·q`` when that has no mass). LOSSY."""
    nodes = chain_of(tree, "bv_next_weight")
    gamma = len(nodes) - 1
    weights = [1]
    tau = 0
    for i in range(1, gamma + 1):
        parent, node = nodes[i - 1], nodes[i]
        weights.append(ratio(weights[i - 1] * q[parent][tree.tokens[node]], p[parent][tree.tokens[node]]))
        if i < gamma:
            slack = total(positive_part(weights[i] * qx - px for qx, px in zip(q[node], p[node])))
            h = slack / (slack + (1 - weights[i])) if slack > 0 else 0
        else:
            h = weights[gamma]
        if rng.bernoulli(h):
            tau = i
    node = nodes[tau]
    if tau == gamma:
        return node, rng.categorical(q[node])
    diff = positive_part(weights[tau + 1] * qx - px for qx, px in zip(q[node], p[node]))  # bug: w[τ + 1]
    if total(diff) > 0:
        return node, rng.categorical(diff)
    return node, rng.categorical(positive_part(weights[tau] * qx - px for qx, px in zip(q[node], p[node])))
