"""Oracles computed independently of the code under test."""

from __future__ import annotations

import itertools
from fractions import Fraction


def target_joint(model, height: int) -> dict[tuple[int, ...], Fraction]:
    """``q^(H+1)`` by brute force over Σ^(H+1), straight from the model's rows (no engine code)."""
    out = {}
    for seq in itertools.product(range(model.vocab), repeat=height + 1):
        prob = Fraction(1)
        for k in range(len(seq)):
            prob *= Fraction(model.q(seq[:k])[seq[k]])
        if prob:
            out[seq] = prob
    return out


def marginal(law: dict[tuple[int, ...], Fraction], length: int) -> dict[tuple[int, ...], Fraction]:
    out: dict[tuple[int, ...], Fraction] = {}
    for seq, prob in law.items():
        out[seq[:length]] = out.get(seq[:length], 0) + prob
    return out
