"""Completion rules: how a round's output ``path + (y,)`` is extended to ``H + 1`` tokens (docs/notation.md).

A rule's ``next_row(block, view)`` is the next token's distribution given the round's tokens so far: the
target's, greedy block verification's modified target, or greedy decoding's point mass on the target's argmax.
A rule run from the empty block is a reference law over ``Σ^(H+1)`` (:data:`REFERENCES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .models import Context, ModelView
from .numeric import Number, normalise, positive_part, rational, total


@dataclass(frozen=True)
class TargetCompletion:
    """Complete with the target model's conditionals.

    A verifier that leaves later rounds alone is completed with it (Traversal Verification's Lemma A.1, Block
    Verification's Lemma 2).
    """

    def next_row(self, block: Context, view: ModelView) -> tuple[Number, ...]:
        return view.q(block)

    def next_view(self, view: ModelView, block: Context) -> ModelView:
        """The next round's view: the target unchanged."""
        return view.advanced(block)


TARGET = TargetCompletion()


def argmax(row: Sequence[Number]) -> int:
    """The index of the largest entry, the smallest such index on a tie (``torch.argmax``'s documented rule)."""
    return max(range(len(row)), key=lambda x: (row[x], -x))


@dataclass(frozen=True)
class GreedyCompletion:
    """Greedy decoding: each later token is the target's argmax (:func:`argmax`), with probability 1.

    A rule that decodes greedily (TensorRT-LLM's MTP acceptance, docs/lossy.md#relaxed) returns it beside
    ``(node, y)``; from the empty block it is greedy decoding's own law, the point mass on the argmax continuation.
    """

    def next_row(self, block: Context, view: ModelView) -> tuple[Number, ...]:
        q = view.q(block)
        top, one = argmax(q), rational(1) if view.arithmetic == "fraction" else 1.0
        return tuple(one if x == top else one - one for x in range(len(q)))

    def next_view(self, view: ModelView, block: Context) -> ModelView:
        """The next round's view: the target unchanged (the next round decides from its rows again)."""
        return view.advanced(block)


GREEDY = GreedyCompletion()

#: the laws over ``Σ^(H+1)`` a rule can be measured against beside ``q^(H+1)`` (``VerifierSpec.references``), by name:
#: what the law is, and the completion rule that draws it from the empty block
REFERENCES: dict[str, tuple[str, "TargetCompletion | GreedyCompletion"]] = {
    "greedy": ("greedy decoding (the target's argmax continuation)", GREEDY),
}


def joint(view: ModelView, name: str, block: Context) -> Number:
    """``M(block) = Π_k M(block_k | block_<k)`` for ``name`` in ``{"p", "q"}`` (1 for the empty block)."""
    prob: Number = 1
    row = getattr(view, name)
    for k, token in enumerate(block):
        prob = prob * row(block[:k])[token]
    return prob


@dataclass(frozen=True)
class GreedyBlockCompletion:
    """Eq. 31: positions ``τ+2..γ`` of the block use ``M_new(x | s) ∝ (M_b(s, x) − M_s(s, x))_+`` on the joint
    probabilities of the whole block; position ``γ+1`` and later use the target unchanged.

    ``gamma`` is the draft length ``γ``. If the joint residual has no mass the state is unreachable (its
    probability under Lemma 9's recursion is ``Σ_x (M_b − M_s)_+(s, x) = 0``); the target is returned there.

    Greedy block verification is lossless only with this completion (Block Verification, Sun et al., ICLR 2025,
    arXiv:2403.10444, Alg. 5, Eq. 31, Lemma 8): the rule returns it beside ``(node, y)`` and every engine completes
    with it.
    """

    gamma: int

    def next_row(self, block: Context, view: ModelView) -> tuple[Number, ...]:
        q = view.q(block)
        if len(block) >= self.gamma:
            return q
        p = view.p(block)
        joint_q, joint_p = joint(view, "q", block), joint(view, "p", block)
        weights = positive_part(joint_q * qx - joint_p * px for qx, px in zip(q, p))
        return normalise(weights) if total(weights) > 0 else q

    def next_view(self, view: ModelView, block: Context) -> ModelView:
        """The next round's view: its target is this rule's modified target until position ``γ+1``."""
        return view.advanced(block) if len(block) >= self.gamma else CompletedView(view, self, block)


class CompletedView:
    """A round's view whose target ``q`` follows a completion rule after ``block`` (greedy BV's modified
    target carried into the next round); ``p`` is the draft model's, unchanged."""

    def __init__(self, base: ModelView, rule: "GreedyBlockCompletion", block: Context) -> None:
        self.base, self.rule, self.block = base, rule, tuple(block)
        self.model, self.vocab, self.arithmetic = base.model, base.vocab, base.arithmetic
        self.context = base.context + self.block

    def prefetch(self, name: str, suffixes: Sequence[Context]) -> None:
        """The base view's rows, computed together (the modified target is built from them)."""
        for base_name in (("p", "q") if name == "q" else ("p",)):
            self.base.prefetch(base_name, [self.block + tuple(s) for s in suffixes])

    def p(self, suffix: Context) -> tuple[Number, ...]:
        return self.base.p(self.block + tuple(suffix))

    def q(self, suffix: Context) -> tuple[Number, ...]:
        return self.rule.next_row(self.block + tuple(suffix), self.base)

    @property
    def key(self) -> tuple:
        return ("completed", self.base.key, self.rule, self.block)

    def advanced(self, block: Context) -> "ModelView | CompletedView":
        """After ``block``: still modified while inside the rule's window, then the base view's target."""
        longer = self.block + tuple(block)
        if len(longer) < self.rule.gamma:
            return CompletedView(self.base, self.rule, longer)
        return self.base.advanced(longer)
