"""A token-verification plugin with one line per decision kind, the fixture of tests/test_certificate_coverage.py:
the acceptance line runs only where a draft token can be accepted, the correction line only where one is
rejected, the bonus line only where a round reaches a leaf. Lossless (SpS along the first child)."""

from __future__ import annotations


def _residual(q_row, p_row):
    return [max(a - b, 0) for a, b in zip(q_row, p_row)]


def sps_branches(tree, p, q, rng):
    v = 0
    while tree.children(v):
        child = tree.children(v)[0]
        x = tree.tokens[child]
        if rng.bernoulli(min(1, q[v][x] / p[v][x])):
            v = child  # ACCEPT
            continue
        return v, rng.categorical(_residual(q[v], p[v]))  # CORRECTION
    return v, rng.categorical(q[v])  # BONUS
