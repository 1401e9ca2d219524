"""Negative controls: verifiers known to be lossy (SPEC §6). Each must be flagged with a counterexample.

* ``bug-greedy-bv-nomod`` — greedy block verification whose later tokens come from the plain target:
  block_verification.txt's ``BA`` example gives 1/3 instead of 2/9.
* ``bug-residual-q`` — token verification with SpS that resamples the correction from ``q`` rather than
  ``norm((q−p)_+)`` (a production bug class).
* ``bug-accept-all`` — every first-child draft token accepted (the uniform stuck at 0).
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..numeric import Number, ratio
from ..randomness import Randomness
from ..trees import DraftTree
from .block import greedy_block_decision
from .single_step import StepResult
from .token_tree import token_verify

Rows = Sequence[Optional[Sequence[Number]]]


def bug_greedy_bv_nomod(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    node, y, _ = greedy_block_decision(tree, p, q, rng, verifier="bug-greedy-bv-nomod")
    return node, y


def _sps_residual_q(candidates: Sequence[int], p: Sequence[Number], q: Sequence[Number],
                    rng: Randomness) -> StepResult:
    x = candidates[0]
    if rng.bernoulli(ratio(q[x], p[x])):
        return 0, None
    return None, tuple(q)  # the bug: should be norm((q - p)_+)


def bug_residual_q(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    return token_verify(_sps_residual_q, tree, p, q, rng, max_candidates=1)


def _accept_first(candidates: Sequence[int], p: Sequence[Number], q: Sequence[Number],
                  rng: Randomness) -> StepResult:
    return 0, None


def bug_accept_all(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    return token_verify(_accept_first, tree, p, q, rng, max_candidates=1)
