"""Closed-form references that run no verifier: :func:`chain_coupling_bound`, Block Verification's Lemma 10 (Sun et
al., ICLR 2025, arXiv:2403.10444)."""

from __future__ import annotations


from simulator.models import ModelView
from simulator.numeric import Number, rational


def chain_coupling_bound(view: ModelView, gamma: int) -> Number:
    """``Σ_ℓ Σ_{x^ℓ} min(P(x^ℓ), Q(x^ℓ))`` over prefixes of length ``1..γ``, by explicit recursion.

    For chain drafts of length ``γ`` from ``p``, any coupling of the draft block with a target block accepts in
    expectation at most ``Σ_{ℓ=1..γ} Σ_{x^ℓ} min(M_s(x^ℓ), M_b(x^ℓ))`` tokens (joint probabilities of the first ``ℓ``
    tokens). Greedy BV attains it (their Lemma 9); BV and token verification stay at or below it.
    """
    zero: Number = rational(0) if view.arithmetic == "fraction" else 0.0
    one: Number = rational(1) if view.arithmetic == "fraction" else 1.0

    def walk(block: tuple[int, ...], joint_p: Number, joint_q: Number) -> Number:
        if len(block) == gamma:
            return zero
        p, q = view.p(block), view.q(block)
        acc = zero
        for x in range(view.vocab):
            jp, jq = joint_p * p[x], joint_q * q[x]
            if jp > 0 or jq > 0:
                acc += min(jp, jq) + walk(block + (x,), jp, jq)
        return acc

    return walk((), one, one)
