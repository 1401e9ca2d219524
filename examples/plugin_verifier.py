"""A verifier written as a plugin (``module:function``, against specproof's randomness interface), and a twin
with one small deliberate bug: the README's example (certify, gate, pytest) and the gate's tests.

    specproof certify --verifier examples.plugin_verifier:my_tv --topology chain --depth 3 --model random-rational
"""

from __future__ import annotations


def _first_child_sps(tree, p, q, rng, residual_node):
    """Speculative sampling along each node's first child; after a rejection at ``v`` the token comes from the
    residual of node ``residual_node(v)``'s rows."""
    v = 0
    while tree.children(v):
        child = tree.children(v)[0]
        x = tree.tokens[child]
        if rng.bernoulli(min(1, q[v][x] / p[v][x])):
            v = child
            continue
        r = residual_node(v)
        return v, rng.categorical([max(a - b, 0) for a, b in zip(q[r], p[r])])
    return v, rng.categorical(q[v])


def my_tv(tree, p, q, rng):
    """Token verification with speculative sampling (the README's plugin). LOSSLESS."""
    return _first_child_sps(tree, p, q, rng, lambda v: v)


def my_tv_root_residual(tree, p, q, rng):
    """Bug: the residual after a rejection is taken from the root's rows, not the rejecting node's. Right at
    depth 1 (the root is the rejecting node), LOSSY from depth 2 on."""
    return _first_child_sps(tree, p, q, rng, lambda v: 0)
