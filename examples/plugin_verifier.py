"""A verifier written as a plugin (``module:function``, against specproof's randomness interface), and a twin
with one small deliberate bug: the README's example (certify, gate, pytest) and the gate's tests. ``my_tv`` is
the README's code block, letter for letter (tests/test_readme_plugin.py checks it).

    specproof certify --verifier examples.plugin_verifier:my_tv --topology chain --depth 3 --model random-rational
"""

from __future__ import annotations


def my_tv(tree, p, q, rng):
    v = 0
    while tree.children(v):
        child = tree.children(v)[0]
        x = tree.tokens[child]
        if rng.bernoulli(min(1, q[v][x] / p[v][x])):
            v = child
            continue
        return v, rng.categorical([max(a - b, 0) for a, b in zip(q[v], p[v])])
    return v, rng.categorical(q[v])


def my_tv_root_residual(tree, p, q, rng):
    """``my_tv`` with one bug: the residual after a rejection is taken from the root's rows, not the rejecting
    node's. Right at depth 1 (the root is the rejecting node), LOSSY from depth 2 on."""
    v = 0
    while tree.children(v):
        child = tree.children(v)[0]
        x = tree.tokens[child]
        if rng.bernoulli(min(1, q[v][x] / p[v][x])):
            v = child
            continue
        return v, rng.categorical([max(a - b, 0) for a, b in zip(q[0], p[0])])
    return v, rng.categorical(q[v])
