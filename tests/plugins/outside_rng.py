"""Speculative sampling on each node's first child, written as plugins that accept with a uniform of their own
instead of ``rng.bernoulli``: lossless in law, but every such draw is outside the enumerator, so specproof refuses
each of them (tests/test_plugin_random_sources.py). ``sps_rng`` draws through ``rng`` only: the control."""

from __future__ import annotations

import os
import random
from random import random as bound_random

import numpy as np

GENERATOR = np.random.default_rng(0)  # made at import, drawn from later: only the profiler sees it


def _sps(tree, p, q, rng, accept):
    """Walk the first children; accept draft ``x`` at ``v`` when ``accept(v, x)``; the correction from the
    residual, the bonus from ``q`` (through ``rng``)."""
    v = 0
    while tree.children(v):
        child = tree.children(v)[0]
        x = tree.tokens[child]
        if accept(v, x):
            v = child
            continue
        return v, rng.categorical([max(a - b, 0) for a, b in zip(q[v], p[v])])
    return v, rng.categorical(q[v])


def _ratio(p, q, v, x):
    return min(1, q[v][x] / p[v][x])


def sps_rng(tree, p, q, rng):
    return _sps(tree, p, q, rng, lambda v, x: rng.bernoulli(_ratio(p, q, v, x)))


def sps_python_random(tree, p, q, rng):
    return _sps(tree, p, q, rng, lambda v, x: random.random() < _ratio(p, q, v, x))  # draw: random.random


def sps_random_choice(tree, p, q, rng):
    return _sps(tree, p, q, rng, lambda v, x: random.choice(range(1000)) < 1000 * _ratio(p, q, v, x))  # draw: random.choice


def sps_numpy_generator(tree, p, q, rng):
    return _sps(tree, p, q, rng, lambda v, x: GENERATOR.random() < _ratio(p, q, v, x))  # draw: numpy.random


def sps_numpy_global(tree, p, q, rng):
    return _sps(tree, p, q, rng, lambda v, x: np.random.rand() < _ratio(p, q, v, x))  # draw: numpy.random.rand


def sps_urandom(tree, p, q, rng):
    return _sps(tree, p, q, rng, lambda v, x: os.urandom(1)[0] / 256 < _ratio(p, q, v, x))  # draw: os.urandom


def sps_torch(tree, p, q, rng):
    import torch

    return _sps(tree, p, q, rng, lambda v, x: torch.rand(()).item() < _ratio(p, q, v, x))  # draw: torch.rand


def sps_caught(tree, p, q, rng):
    """Catches the refusal and falls back to ``rng``: still refused (no verdict rests on a draw it made)."""
    def accept(v, x):
        try:
            return random.random() < _ratio(p, q, v, x)  # draw: random.random
        except Exception:  # noqa: BLE001 — the point of the plugin
            return rng.bernoulli(_ratio(p, q, v, x))
    return _sps(tree, p, q, rng, accept)


def sps_bound(tree, p, q, rng):
    return _sps(tree, p, q, rng, lambda v, x: bound_random() < _ratio(p, q, v, x))  # draw: bound before


def sps_aliased(tree, p, q, rng):
    import random as r

    return _sps(tree, p, q, rng, lambda v, x: r.uniform(0, 1) < _ratio(p, q, v, x))  # draw: an alias


class HeldGenerator:
    """A callable plugin holding its own numpy generator."""

    def __init__(self) -> None:
        self.generator = np.random.default_rng(0)

    def __call__(self, tree, p, q, rng):
        return _sps(tree, p, q, rng, lambda v, x: self.generator.random() < _ratio(p, q, v, x))


sps_held = HeldGenerator()


def sps_names_random_in_text(tree, p, q, rng):
    """The control: a string naming random.random() is no draw."""
    return _sps(tree, p, q, rng, lambda v, x: rng.bernoulli(_ratio(p, q, v, x)) if "random.random()" else False)
