"""Token-verification plugins whose single step is lossy only at nodes with two children, the fixtures of the
proofs by lifting (tests/test_prove_lifting.py). Each is a lift — :func:`simulator.verifiers.token_tree.tv` of a
:class:`SingleStepRule` — so ``specproof prove`` lifts it, and a reproducer names it by ``module:function``:

* ``tv_second_from_q``: RRS (:func:`simulator.verifiers.single_step.rrs_plan`) except that the second candidate is
  tried against ``q`` again, where RRS tries it against the residual ``norm((q − p)_+)`` left by the first
  rejection. With one candidate it is RRS (lossless); with two it is lossy, on every tree with a node of two
  children: ``specproof prove --verifier tests.plugins.tv_lift_bugs:tv_second_from_q --parents=-1,0,1,1``.
* ``tv_never_reached``: with one candidate it rejects surely and draws from ``q`` (lossless); with two it accepts
  the first surely (lossy). On a tree whose nodes of two children lie below a node of one child they are never
  reached, and the tree is lossless for every model pair although its two-child step is not.
"""

from __future__ import annotations

from simulator.numeric import ratio
from simulator.verifiers.rules import SingleStepRule
from simulator.verifiers.single_step import Plan, rrs_plan
from simulator.verifiers.token_tree import tv


def second_from_q_plan(candidates, p, q) -> Plan:
    """RRS's plan with the second candidate accepted w.p. ``min(1, q(x)/p(x))``. LOSSY from two candidates on."""
    plan = rrs_plan(candidates, p, q)
    if len(candidates) < 2:
        return plan
    x = candidates[1]
    return Plan((plan.steps[0], (1, ratio(q[x], p[x])), *plan.steps[2:]), plan.residual)


SECOND_FROM_Q = SingleStepRule("second-from-q", plan=second_from_q_plan)
tv_second_from_q = tv(SECOND_FROM_Q)


def never_reached_plan(candidates, p, q) -> Plan:
    """One candidate: rejected surely, the correction from ``q``. Two or more: the first accepted surely. LOSSY at
    two children."""
    return Plan(((0, 0 if len(candidates) == 1 else 1),), tuple(q))


NEVER_REACHED = SingleStepRule("never-reached", plan=never_reached_plan)
tv_never_reached = tv(NEVER_REACHED)
