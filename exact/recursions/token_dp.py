"""Exact ``E[τ]`` of token verification at the paper's scale by dynamic programming over contexts
(:func:`tv_expected_accepted`), where enumerating draft trees is out of reach (``15^30`` at ``V = 15, H = 4``)."""

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
    """Exact ``E[τ]`` of ``verifier`` (one of :data:`DP_RULES`) under i.i.d. drafting. The registry names the rule's
    array step for it (:class:`~simulator.verifiers.registry.VerifierSpec`'s ``exact_dp``), whose
    :meth:`~simulator.verifiers.single_step_arrays.ArrayStep.accepted_mean` is for SpS, RRS and K-SEQ a sum that
    factorises over positions, for GR a sum over its tabulated flows. Every context of a level is handled at once
    (numpy, float64: exact up to rounding, ~1e-15).

    Token verification walks down one path, so ``E(v, c) = E_X[Σ_i 1{i accepted | X} (1 + E(w_i, c·X_i))]`` over
    (shape node, context), ``X`` the children's i.i.d. tokens, ``w_i`` the ``i``-th child; the expectation over ``X``
    is the single-step rule's (:meth:`~simulator.verifiers.single_step_arrays.ArrayStep.accepted_mean`).
    """
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
