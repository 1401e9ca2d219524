"""Exact ``E[τ]`` of token verification at the paper's scale, by dynamic programming over contexts.

Enumerating draft trees is out of reach at ``V = 15, H = 4`` (``15^30`` trees), but token verification only
walks down one path, so its expected accepted length obeys a recursion over (shape node, context):
``E(v, c) = E_X[Σ_i 1{position i accepted | X} (1 + E(w_i, c·X_i))]`` with ``X`` the children's i.i.d. tokens and
``w_i`` the ``i``-th child. The expectation over ``X`` is the single-step rule's own
(:meth:`~simulator.verifiers.single_step_arrays.ArrayStep.accepted_mean`: for SpS, RRS and K-SEQ a sum that
factorises over positions, for GR a sum over its tabulated flows), so this module holds the recursion only; the
registry names each rule's array step for it (``VerifierSpec.exact_dp``). Every context of a level is handled at
once (numpy, float64: exact up to rounding, ~1e-15).
"""

from __future__ import annotations

import numpy as np

from simulator.montecarlo.context_rows import ContextRows
from simulator.errors import InvalidParameterError
from simulator.models import ModelPair
from simulator.trees import Topology, node_children, node_depths
from simulator.verifiers import VERIFIERS

#: the rules the recursion covers: those whose registry entry names their single-step rule's array step for it
DP_RULES = tuple(name for name, spec in VERIFIERS.items() if spec.exact_dp is not None)


def tv_expected_accepted(model: ModelPair, topology: Topology, verifier: str,
                         rows: ContextRows | None = None) -> float:
    """Exact ``E[τ]`` of ``verifier`` (one of :data:`DP_RULES`) under i.i.d. drafting."""
    if verifier not in DP_RULES:
        raise InvalidParameterError("verifier", f"the DP covers {DP_RULES}, not {verifier!r}")
    step = VERIFIERS[verifier].exact_dp
    rows = rows or ContextRows(model, topology.height)
    vocab, n = model.vocab, len(topology.parents)
    kids, depth = node_children(topology.parents), node_depths(topology.parents)
    value: dict[int, np.ndarray] = {}
    for v in reversed(range(n)):
        level = depth[v]
        size = vocab**level
        if not kids[v]:
            value[v] = np.zeros(size)
            continue
        ids = rows.offsets[level] + np.arange(size)
        # 1 + E(w, c·x) for every context c of this level and token x: [size, V] per child the rule looks at
        below = [1 + value[w].reshape(size, vocab) for w in kids[v][: step.max_candidates]]
        value[v] = step.accepted_mean(rows, ids, below)
    return float(value[0][0])
