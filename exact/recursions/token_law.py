"""The exact law of token verification's first ``H + 1`` tokens by a forward recursion over (prefix, shape node)
(:func:`token_law`; docs/engines.md, "Token verification's law by recursion"), in float64, where enumerating draft
trees is out of reach."""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.drafting import FixedShape
from simulator.errors import InvalidParameterError
from simulator.models import ModelView
from simulator.montecarlo.context_rows import ContextRows
from simulator.trees import node_children, node_depths

from exact.law import Counterexample, Distance

#: why a float64 law of this recursion is lossless within :data:`exact.certificate.FLOAT_TOLERANCE`
TOLERANCE_REASON = ("float64 recursion: each sequence's probability is a product of at most 2(H+1) rounded factors "
                    "and a few sums, so the TVD's rounding stays near 1e-15, far below the tolerance")


class ArrayLaw:
    """The law of the first ``H + 1`` tokens as a vector over ``Σ^(H+1)`` (sequences in lexicographic order) beside
    the target's joint: what a certificate reads of an :class:`exact.law.OutputLaw` (``total``,
    ``expected_accepted``, ``profile``, ``distance``, ``executions``), without a dictionary of outcomes."""

    exact = False
    tolerance_reason = TOLERANCE_REASON

    def __init__(self, law: np.ndarray, target: np.ndarray, vocab: int, height: int, reached: list[float],
                 executions: int) -> None:
        self.vector, self.target_vector = law, target
        self.vocab, self.height = vocab, height
        self._reached = reached  # P(τ ≥ t), t = 1 … H
        self.executions = executions  # (shape node, context) sub-problems solved

    def total(self) -> float:
        return float(self.vector.sum())

    def expected_accepted(self) -> float:
        return float(sum(self._reached))

    def profile(self) -> list[float]:
        return list(self._reached)

    def sequence(self, code: int) -> tuple[int, ...]:
        """The sequence of ``H + 1`` tokens at position ``code``."""
        return tuple(int(x) for x in np.unravel_index(code, (self.vocab,) * (self.height + 1)))

    def distance(self) -> Distance:
        """TVD to the target's joint, the worst sequence (ties: the smallest), and the mass off the target's
        support."""
        gap = np.abs(self.vector - self.target_vector)
        worst = int(np.argmax(gap))
        counterexample = None
        if gap[worst] > 0:
            counterexample = Counterexample(self.sequence(worst), float(self.vector[worst]),
                                            float(self.target_vector[worst]))
        off_support = float(self.vector[self.target_vector == 0].sum())
        return Distance(float(gap.sum() / 2), counterexample, off_support)


def token_law(view: ModelView, drafter: Any, step: Any) -> ArrayLaw:
    """The law of token verification lifting the array step ``step`` on ``drafter``'s fixed shape under i.i.d.
    drafting, from the view's model (float64, empty context).

    After ``d`` tokens the round is *at node* ``v`` (every token so far accepted, ``v`` at depth ``d``, the prefix
    ``s`` its path) or *done* (a correction or bonus token emitted, the rest following the target); the same prefix
    is reached both ways, so each token's probability splits into its accept part and its residual part. At node
    ``v`` with ``k`` children the rule's array step gives ``P(candidate i accepted holding x)`` and ``P(every
    candidate rejected, correction x)`` at every context of the level at once
    (:meth:`~simulator.verifiers.single_step_arrays.ArrayStep.token_law`): the first moves mass to child ``i`` at
    ``s·x``, the second to *done* at ``s·x``; a leaf emits its bonus token from ``q_s``; *done* extends by ``q_s``.
    The law is *done* after ``H + 1`` tokens: ``V^(H+1)`` sequences (759,375 at ``V = 15, H = 4``), level by level,
    one mass vector per shape node (``15^30`` trees there).
    """
    if not isinstance(drafter, FixedShape) or drafter.scheme != "iid":
        raise InvalidParameterError("drafting", "the token-law recursion covers fixed shapes drafted i.i.d. (the "
                                                "candidates of a node are i.i.d. from its draft row); enumerate "
                                                "other schemes and dynamic trees")
    if view.arithmetic != "float":
        raise InvalidParameterError("arithmetic", "the token-law recursion computes in float64: pass --arithmetic "
                                                  "float (or --method enumerate for rationals)")
    if view.context:
        raise InvalidParameterError("context", "the token-law recursion starts from the empty context")
    parents = drafter.topology.parents
    height = drafter.height
    if height == 0:
        raise InvalidParameterError("depth", "a tree with no draft token has nothing to verify")
    rows = ContextRows(view.model, height)
    vocab = view.vocab
    kids, depths = node_children(parents), node_depths(parents)
    mass: dict[int, np.ndarray] = {0: np.ones(1)}  # P(at node v with prefix s), by the prefix's code
    done, target = np.zeros(1), np.ones(1)  # P(done with prefix s); the target's joint
    reached: list[float] = []
    executions = 0
    for level in range(height + 1):
        size = vocab**level
        ids = rows.offsets[level] + np.arange(size)
        q = rows.q[ids]
        step_laws: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # by candidate count, shared by the level's nodes
        following = done[:, None] * q
        for v in (v for v in range(len(parents)) if depths[v] == level and v in mass):
            here = mass.pop(v)[:, None]
            executions += size
            used = kids[v][: step.max_candidates]
            if not used:
                following += here * q  # a leaf: the bonus token from q
                continue
            if len(used) not in step_laws:
                step_laws[len(used)] = step.token_law(rows, ids, len(used))
            accepted, rejected = step_laws[len(used)]
            following += here * rejected
            for i, w in enumerate(used):
                mass[w] = (here * accepted[:, i, :]).reshape(-1)
        if level < height:
            reached.append(float(sum(m.sum() for w, m in mass.items() if depths[w] == level + 1)))
        done, target = following.reshape(-1), (target[:, None] * q).reshape(-1)
    return ArrayLaw(done, target, vocab, height, reached, executions)
