"""The papers' closed forms of a chain's ``E[τ]`` (:data:`FORMS`; docs/proofs.md), term by term for every number type,
so that ``specproof prove`` checks every term on every cell."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from simulator.numeric import Number


class Rows(Protocol):
    vocab: int

    def p(self, context: Sequence[int]) -> Sequence[Number]: ...

    def q(self, context: Sequence[int]) -> Sequence[Number]: ...


Key = tuple[int, ...] | int


def token_term(rows: Rows, prefix: tuple[int, ...]) -> Number:
    """``P(X^ℓ = x^ℓ, τ ≥ ℓ) = Π_{i ≤ ℓ} min(p(x_i | x^{i−1}), q(x_i | x^{i−1}))`` under token verification, which
    accepts the ``ℓ``-th token with probability ``min(1, q/p)`` after accepting the ``ℓ − 1`` before it."""
    term = 1
    for i, x in enumerate(prefix):
        term = term * min(rows.p(prefix[:i])[x], rows.q(prefix[:i])[x])
    return term


def block_term(rows: Rows, prefix: tuple[int, ...]) -> Number:
    """``P(X^ℓ = x^ℓ, τ ≥ ℓ) = w_ℓ(x^ℓ)``, ``w_ℓ = min(w_{ℓ−1}·q(x_ℓ | x^{ℓ−1}), M_p(x^ℓ))``, ``w_0 = 1`` (block
    verification): Lemma 3's ``M_p(x^ℓ)·p_ℓ(x^ℓ)``, ``p_ℓ = min(p_{ℓ−1}·q(x_ℓ | x^{ℓ−1})/p(x_ℓ | x^{ℓ−1}), 1)``,
    written without the division."""
    kept, joint_p = 1, 1
    for i, x in enumerate(prefix):
        joint_p = joint_p * rows.p(prefix[:i])[x]
        kept = min(kept * rows.q(prefix[:i])[x], joint_p)
    return kept


def greedy_block_term(rows: Rows, prefix: tuple[int, ...]) -> Number:
    """``P(X^ℓ = x^ℓ, τ ≥ ℓ) = min(M_p(x^ℓ), M_q(x^ℓ))`` (greedy block verification, which modifies the target for
    the tokens after its output): the smaller of the two joint laws, the largest of any coupling of them."""
    joint_p, joint_q = 1, 1
    for i, x in enumerate(prefix):
        joint_p, joint_q = joint_p * rows.p(prefix[:i])[x], joint_q * rows.q(prefix[:i])[x]
    return min(joint_p, joint_q)


def level_term(rows: Rows, level: int) -> Number:
    """``P(τ ≥ ℓ) = α^ℓ``, ``α = Σ_x min(p(x), q(x))`` at the root: token verification when every context has the
    root's rows (the paper's ``(1 − α^{γ+1})/(1 − α)`` tokens a round, bonus token included)."""
    alpha = 0
    for a, b in zip(rows.p(()), rows.q(())):
        alpha = alpha + min(a, b)
    return alpha ** level


@dataclass(frozen=True)
class Form:
    """A closed form ``E[τ] = Σ_k term(k)``: over the accepted prefixes ``x^ℓ`` (``by = "prefix"``: ``term`` is
    ``P(X^ℓ = x^ℓ, τ ≥ ℓ)``) or over the lengths ``ℓ`` (``by = "level"``: ``term`` is ``P(τ ≥ ℓ)``).

    Written once for floats, fractions and the symbols of :mod:`exact.prove.symbolic`. :data:`FORMS` holds them by the
    name a rule gives in the registry (``VerifierSpec.chain_expectation``): ``token`` (Leviathan et al., ICML 2023),
    ``block`` (Sun et al., ICLR 2025, Lemma 3; LV, TRV and GBV reduce to it on a chain) and ``greedy-block`` (Sun et
    al., ICLR 2025, Lemma 9, Theorem 3).
    """

    term: Callable[[Rows, Key], Number]
    by: str
    text: str

    def keys(self, vocab: int, depth: int) -> list[Key]:
        if self.by == "level":
            return list(range(1, depth + 1))
        return [k for n in range(1, depth + 1) for k in itertools.product(range(vocab), repeat=n)]

    def keys_of(self, accepted: tuple[int, ...]) -> list[Key]:
        """The keys a round that accepted the tokens ``accepted`` counts towards (one per accepted length)."""
        if self.by == "level":
            return list(range(1, len(accepted) + 1))
        return [accepted[:n] for n in range(1, len(accepted) + 1)]

    def expected_accepted(self, rows: Rows, depth: int) -> Number:
        """``E[τ]`` by the form."""
        total = 0
        for key in self.keys(rows.vocab, depth):
            total = total + self.term(rows, key)
        return total


#: A rule's closed form by the name the registry gives it: the form for every pair of rows, and the paper's form
#: for context-independent rows where it has one.
FORMS: dict[str, tuple[Form, Form | None]] = {
    "token": (Form(token_term, "prefix", "P(X^ℓ = x^ℓ, τ ≥ ℓ) = Π_i min(p, q) (Leviathan et al.)"),
              Form(level_term, "level", "P(τ ≥ ℓ) = α^ℓ: E[τ] + 1 = (1 − α^{γ+1})/(1 − α) (Leviathan et al.)")),
    "block": (Form(block_term, "prefix", "P(X^ℓ = x^ℓ, τ ≥ ℓ) = M_p(x^ℓ)·p_ℓ(x^ℓ) (Sun et al., Lemma 3)"), None),
    "greedy-block": (Form(greedy_block_term, "prefix",
                          "P(X^ℓ = x^ℓ, τ ≥ ℓ) = min(M_p(x^ℓ), M_q(x^ℓ)) (Sun et al., Lemma 9)"), None),
}
