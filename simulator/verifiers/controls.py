"""Negative controls, verifiers known to be lossy (docs/controls.md): each must be flagged with a counterexample.
The two single-step controls have their array steps beside their plans (:data:`RESIDUAL_Q`,
:data:`ACCEPT_FIRST`)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from array_api_compat import array_namespace

from ..numeric import Number, ratio
from ..randomness import Randomness
from ..trees import DraftTree
from .block import greedy_block_decision
from .rules import SingleStepRule
from .single_step import Plan
from .single_step_arrays import RrsStep
from .token_tree import tv

Rows = Sequence[Optional[Sequence[Number]]]


def bug_greedy_bv_nomod(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
    """CONTROL ``bug-greedy-bv-nomod``: greedy block verification whose later tokens come from the plain target; on
    Block Verification's ``BA`` example (Sun et al., ICLR 2025, arXiv:2403.10444, §2) it gives 1/3 instead of 2/9."""
    node, y, _ = greedy_block_decision(tree, p, q, rng, verifier="bug-greedy-bv-nomod")
    return node, y


def _sps_residual_q(candidates: Sequence[int], p: Sequence[Number], q: Sequence[Number]) -> Plan:
    x = candidates[0]
    return Plan(((0, ratio(q[x], p[x])),), tuple(q))  # the bug: should be norm((q - p)_+)


def _accept_first(candidates: Sequence[int], p: Sequence[Number], q: Sequence[Number]) -> Plan:
    return Plan(((0, 1),), tuple(q))


class _ResidualFromTarget(RrsStep):
    """``bug-residual-q``'s array step: SpS's acceptance, the correction drawn from ``q`` (the bug)."""

    def residual_rows(self, k: int) -> object:
        return "q"


class _AcceptFirst(_ResidualFromTarget):
    """``bug-accept-all``'s array step: the first candidate accepted surely (the correction, never drawn, ``q``)."""

    def accept(self, target: Any, p: Any, scale: Any) -> Any:
        return array_namespace(target).ones_like(target)


_RESIDUAL_Q_RULE = SingleStepRule("bug-residual-q", plan=_sps_residual_q, max_candidates=1)
_ACCEPT_FIRST_RULE = SingleStepRule("bug-accept-all", plan=_accept_first, max_candidates=1)
#: the single-step controls' array steps: ``bug-residual-q``, token verification with SpS resampling the correction
#: from ``q`` rather than ``norm((q − p)_+)`` (a production bug class), and ``bug-accept-all``, every first-child
#: token accepted (the uniform stuck at 0)
RESIDUAL_Q, ACCEPT_FIRST = _ResidualFromTarget(_RESIDUAL_Q_RULE), _AcceptFirst(_ACCEPT_FIRST_RULE)
bug_residual_q = tv(_RESIDUAL_Q_RULE)
bug_accept_all = tv(_ACCEPT_FIRST_RULE)
