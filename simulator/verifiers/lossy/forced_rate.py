"""Synthetic acceptance (``forced-rate``) as vLLM 0.33.0's Model Runner V2 runs ``rejection_method="synthetic"`` at
temperature > 0 (``_rejection_kernel``'s ``SYNTHETIC_MODE`` and ``_resample_kernel``; docs/lossy.md): draft tokens
accepted at forced per-position rates whatever the target says, the token after them drawn as after a rejection."""

from __future__ import annotations

from fractions import Fraction
from typing import Optional, Sequence

from ...errors import InvalidParameterError
from ...numeric import Number
from ...randomness import Randomness
from ...trees import DraftTree
from ..block import chain_of
from ..knobs import FIELD, Knob, number_in
from ..rules import SPS

Rows = Sequence[Optional[Sequence[Number]]]
#: the token ``_resample_kernel`` emits when ``(q − p)_+`` has no mass: every residual logit is ``-inf``, and the
#: Gumbel-max's ``tl.max`` then breaks the tie to the left (Triton's default), in the first vocabulary block
EMPTY_RESIDUAL_TOKEN = 0


def _rates(value: object) -> Fraction | tuple[Fraction, ...]:
    """A number in ``[0, 1]`` (the conditional rate at every position), or vLLM's list as its
    ``SpeculativeConfig._resolve_synthetic_acceptance_rates`` checks it: numbers in ``[0, 1]``, non-increasing; the
    list's length (the chain's depth) is checked by the rule."""
    if not isinstance(value, (list, tuple)):
        return number_in(0, 1)(value)
    if not value:
        raise ValueError("must be a number or a non-empty list of per-position rates")
    rates = tuple(number_in(0, 1)(r) for r in value)
    if any(later > earlier for earlier, later in zip(rates, rates[1:])):
        raise ValueError(f"must be non-increasing (each the probability that every draft up to it is accepted), "
                         f"got {list(value)!r}")
    return rates


#: the rate per position when none is given: vLLM has no default (the knob is required with
#: ``rejection_method="synthetic"``); 0.8 is the lower of the two rates docs/lossy.md prices
DEFAULT_RATE = Fraction(4, 5)

KNOBS = (
    Knob("synthetic_acceptance_rates", DEFAULT_RATE, "vLLM's list: per position i, the probability that the first "
         "i+1 drafts are all accepted (non-increasing, one per draft position); or one number r, the probability "
         "of accepting each position given the earlier ones (vLLM's list [r, r², …]); vLLM has no default",
         _rates),
)


def conditional_rates(rates: Number | Sequence[Number], depth: int) -> list[Number]:
    """The acceptance probability of each of ``depth`` positions given the earlier ones: ``rates`` itself at every
    position for one number; for vLLM's list, its ``unconditional_to_conditional_rates``
    (``vllm/v1/spec_decode/utils.py``): ``c_i = r_i / r_{i−1}`` with ``r_{−1} = 1``, and 0 where ``r_{i−1} = 0``,
    the list as long as the depth, as vLLM's config requires."""
    if not isinstance(rates, (list, tuple)):
        return [rates] * depth
    if len(rates) != depth:
        raise InvalidParameterError(f"{FIELD}.synthetic_acceptance_rates",
                                    f"forced-rate: must have one rate per draft position, {depth} on this chain, got "
                                    f"{len(rates)} (or give one number, the rate at every position)")
    return [r / before if before > 0 else 0 * r for r, before in zip(rates, [1, *rates[:-1]])]


def make(synthetic_acceptance_rates: Number | Sequence[Number] = DEFAULT_RATE):
    """The ``forced-rate`` rule at the given rates (:data:`KNOBS`).

    On a chain of depth ``k``, position ``i`` is accepted with probability ``c_i`` (:func:`conditional_rates`: one
    number is ``c_i`` at every position, vLLM's list is converted as vLLM converts it), one coin ``u < c_i`` per
    position, in order, until the first failure; the drafted token is kept whatever ``p`` and ``q`` say of it.
    After ``τ`` acceptances the next token comes from the target's row when ``τ = k``, else from speculative
    sampling's residual ``(q − p)_+`` normalised at position ``τ``, as ``_resample_kernel`` draws after a rejection.
    Where that has no mass (``q = p`` there) the kernel's residual logits are all ``-inf`` and it emits token
    :data:`EMPTY_RESIDUAL_TOKEN`.
    """
    def forced_rate(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
        nodes = chain_of(tree, "forced-rate")
        k = len(nodes) - 1
        accepted = 0
        for c in conditional_rates(synthetic_acceptance_rates, k):
            if not rng.bernoulli(c):
                break
            accepted += 1
        node = nodes[accepted]
        if accepted == k:
            return node, rng.categorical(q[node])
        if all(t == d for t, d in zip(q[node], p[node])):  # rows of equal sums: (q − p)_+ is empty exactly here
            return node, EMPTY_RESIDUAL_TOKEN
        return node, rng.categorical(SPS.planned(p[node], q[node], (tree.tokens[nodes[accepted + 1]],)).residual)

    return forced_rate
