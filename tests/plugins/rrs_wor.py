"""Token verification with RRS without replacement (Jeon et al.), written as a plugin through ``rng`` and declaring
the drafting scheme it claims, and a buggy twin (tests/test_plugin_schemes.py).

``rrs_wor`` is lossless under without-replacement drafting only: a node's children are distinct tokens drawn from
``p`` with each drawn token's mass removed, and the rule removes it from the draft row it compares against too.
Under i.i.d. drafting a repeated child finds its token's mass already removed and the rule divides by zero: it is
not defined there, so it declares ``schemes = ("without-replacement",)``.
``rrs_wor_kept`` forgets that removal (RRS with replacement's comparison under without-replacement drafting): lossy
from two children on.

    specproof prove --verifier tests.plugins.rrs_wor:rrs_wor --topology complete --branching 2 --depth 1 --vocab 3
"""

from __future__ import annotations


def _residual(target, draft):
    """``norm((target − draft)_+)``; ``target`` itself when that has no mass (a rejection of probability 0)."""
    positive = [max(t - d, 0) for t, d in zip(target, draft)]
    mass = sum(positive)
    return [x / mass for x in positive] if mass > 0 else list(target)


def _token_rrs(tree, p, q, rng, remove_drawn):
    """Walk from the root: try a node's children in order against the residual target, each accepted with
    ``min(1, target(x) / draft(x))``; after a rejection the target becomes the residual and, with
    ``remove_drawn``, the rejected token leaves the draft row (renormalised). All rejected: a correction from the
    residual; at a leaf: the bonus from ``q``."""
    v = 0
    while tree.children(v):
        target, draft = list(q[v]), list(p[v])
        for child in tree.children(v):
            x = tree.tokens[child]
            if rng.bernoulli(min(1, target[x] / draft[x])):
                v = child
                break
            target = _residual(target, draft)
            if remove_drawn:
                draft[x] = draft[x] * 0
                mass = sum(draft)
                if mass <= 0:
                    break
                draft = [d / mass for d in draft]
        else:
            return v, rng.categorical(target)
        if v != child:  # the draft row ran out of mass: every later child is impossible
            return v, rng.categorical(target)
    return v, rng.categorical(q[v])


def rrs_wor(tree, p, q, rng):
    """RRS without replacement on every node. LOSSLESS under without-replacement drafting."""
    return _token_rrs(tree, p, q, rng, remove_drawn=True)


def rrs_wor_kept(tree, p, q, rng):
    """Bug: a rejected token stays in the draft row it is compared against. LOSSY under without-replacement
    drafting from two children on (under i.i.d. drafting it is RRS with replacement, lossless there)."""
    return _token_rrs(tree, p, q, rng, remove_drawn=False)


rrs_wor.schemes = ("without-replacement",)
rrs_wor_kept.schemes = ("without-replacement",)
