"""Exact ``E[τ]`` of token verification at the paper's scale, by dynamic programming over contexts.

Enumerating draft trees is out of reach at ``V = 15, H = 4`` (``15^30`` trees), but token verification only
walks down one path, so its expected accepted length obeys a recursion over (shape node, context):
``E(v, c) = Σ_X P(X) Σ_i P(accept position i | X) (1 + E(w_i, c·X_i))`` with ``X`` the children's i.i.d.
tokens. For the sequential rules the acceptance of position ``i`` is ``a_i(X_i)`` after ``i`` rejections,
and with i.i.d. candidates the sum factorises: RRS (``a_i = min(1, r_i/p)``, ``r_{i+1} = norm((r_i − p)_+)``,
independent of the rejected tokens), K-SEQ (``a_i = min(1, q/(ρ* p))``) and SpS (one candidate):
``E = Σ_i reach_i Σ_x p(x) a_i(x) (1 + E(w_i, c·x))`` with ``reach_{i+1} = reach_i Σ_x p(x)(1 − a_i(x))``.
GR is flow-defined: ``E = Σ_X Σ_i f_i(X) (1 + E(w_i, c·X_i))`` with its tabulated flows. Every context of a
level is handled at once (numpy, float64: exact up to rounding, ~1e-15).
"""

from __future__ import annotations

import numpy as np

from simulator.array_ops import positive_residual, ratio
from simulator.montecarlo.context_rows import ContextRows
from simulator.errors import InvalidParameterError
from simulator.models import ModelPair
from simulator.trees import Topology, node_children, node_depths
from simulator.verifiers import VERIFIERS

#: the rules the recursion covers: those whose registry entry names their single-step rule for it
DP_RULES = tuple(name for name, spec in VERIFIERS.items() if spec.exact_dp is not None)


def tv_expected_accepted(model: ModelPair, topology: Topology, verifier: str,
                         rows: ContextRows | None = None) -> float:
    """Exact ``E[τ]`` of ``verifier`` (one of :data:`DP_RULES`) under i.i.d. drafting."""
    if verifier not in DP_RULES:
        raise InvalidParameterError("verifier", f"the DP covers {DP_RULES}, not {verifier!r}")
    rule = VERIFIERS[verifier].exact_dp
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
        p, q = rows.p[ids], rows.q[ids]
        children = kids[v][:1] if rule == "sps" else kids[v]
        # 1 + E(w, c·x) for every context c of this level and token x: [size, V] per child
        below = [1 + value[w].reshape(size, vocab) for w in children]
        k = len(children)
        if rule == "gr":
            value[v] = _gr_value(rows, ids, below, k)
            continue
        total = np.zeros(size)
        reach = np.ones(size)
        target = q
        rho = rows.kseq_table(k)[0][ids][:, None] if rule == "kseq" else None
        for i in range(k):
            accept = ratio(q, rho * p) if rho is not None else ratio(target, p)
            total = total + reach * (p * accept * below[i]).sum(axis=1)
            reach = reach * (p * (1 - accept)).sum(axis=1)
            if rule == "rrs":
                target = positive_residual(target - p, target)
        value[v] = total
    return float(value[0][0])


#: contexts whose GR step tables ``[V^k, k + 1]`` :func:`_gr_value` reads at once
GR_VALUE_CHUNK = 256


def _gr_value(rows: ContextRows, ids: np.ndarray, below: list[np.ndarray], k: int) -> np.ndarray:
    """``Σ_X Σ_i f(X → x_i) (1 + E(w_i, c·x_i))`` at each context ``c`` of ``ids``: the tuple's flow to each
    position (its step table) times the value below that child, summed over the tuples per position, then over
    the positions in order. Contexts are read a chunk at a time (the tables are ``V^k`` rows each)."""
    size = rows.vocab**k
    tuples = np.array(np.unravel_index(np.arange(size), (rows.vocab,) * k)).T  # [tuple, position] tokens
    out = np.zeros(len(ids))
    rows.gr_tables(k, ids)  # the level's contexts solved as stacks
    for start in range(0, len(ids), GR_VALUE_CHUNK):
        at = np.arange(start, min(start + GR_VALUE_CHUNK, len(ids)))
        weights = rows.gr_step(k, np.repeat(ids[at], size), np.tile(np.arange(size), len(at)))
        weights = weights.reshape(len(at), size, k + 1)
        total = 0
        for i in range(k):
            total = total + (weights[:, :, i] * below[i][at][:, tuples[:, i]]).sum(axis=1)
        out[at] = total
    return out
