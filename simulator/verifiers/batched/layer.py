"""Layer Verification, batched (reference: :mod:`simulator.verifiers.layer`, Algs. 1–2, Eqs. 1–2, App. E.2).

Forward (Alg. 1), depth by depth: ``A_t`` the score mass of the depth's non-leaf nodes, ``λ_v = a_v/A_t``; the
single-step rule ``rule`` (``sps``, ``rrs``, ``kseq``, ``opt``, ``gr``) solves each node's transformed problem —
draft ``(p_v, 0)``, target ``(A_t q_v, 1 − A_t)`` — and children get ``a_w = λ_v f(X → x_w)/P(X)/#[x_w ∈ X]``,
the node its outgoing flow ``λ_v Σ_X f(X → x)``. Nodes of a depth with the same number of candidates are
solved as one stack. Backward (Alg. 2): from the deepest depth up, one categorical over the depth's nodes
(``a_v − Σ flow_v``) and ⊥ (``1 − Σ a_v``); on a node, ``y`` from ``norm(a_v q_v − flow_v)`` (Eq. 2).

The outgoing flow: with ``rows.exact_order`` and ``V^k ≤`` :data:`TUPLE_SUM_LIMIT`, summed tuple by tuple in
the reference's order; otherwise in closed form under i.i.d. tuples (:func:`_outflow`), which agrees to
rounding (~1e-16). GR's problems: with ``exact_order`` by the reference solver per node, otherwise stacked
(:func:`simulator.verifiers.batched.gr_stacks.lv_gr_node`, numpy, to the solver's tolerance); OPT's by the reference
solver.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from array_api_compat import array_namespace, device, to_device

from simulator.verifiers.batched.gr_stacks import lv_gr_node
from ...array_ops import categorical, distinct_rows, kseq_rho, positive_residual, ratio, row_sum, take_rows
from ..rules import GR, OPT
from .frame import Batch

TUPLE_SUM_LIMIT = 256  # LV's outflow: summed tuple by tuple (as the reference) up to this many tuples
_FLOW_RULES = {"opt": OPT, "gr": GR}


def lv(batch: Batch, rule: str) -> tuple[Any, Any]:
    """The accepted node and emitted token of every tree, ``([B], [B])``."""
    xp, shape, rows = batch.xp, batch.shape, batch.rows
    size, n, vocab = batch.size, shape.n, rows.vocab
    dtype = rows.q.dtype
    scores = xp.zeros((size, n), dtype=dtype, device=batch.device)
    scores[:, 0] = 1
    flows = xp.zeros((n, size, vocab), dtype=dtype, device=batch.device)  # node-major: a node's rows contiguous
    outgoing = xp.zeros((size, n), dtype=dtype, device=batch.device)  # Σ flows[b, v], as Alg. 2 reads it
    for level in shape.levels:
        inner = [v for v in level if shape.children[v]]
        if not inner:
            continue
        mass = scores[:, inner[0]]
        for v in inner[1:]:
            mass = mass + scores[:, v]  # A_t
        jobs = [(v, batch.where_true((mass > 0) & (scores[:, v] != 0)), shape.children[v][:1 if rule == "sps" else None])
                for v in inner]
        jobs = [job for job in jobs if job[1].shape[0]]
        for k in sorted({len(kids) for _, _, kids in jobs}):
            group = [job for job in jobs if len(job[2]) == k]
            live = xp.concat([at for _, at, _ in group])  # [m]
            node = xp.concat([batch.full(at.shape[0], v) for v, at, _ in group])
            a = mass[live]
            lam = scores[live, node] / a
            ids = batch.ids[live, node]
            zero = xp.zeros((live.shape[0], 1), dtype=dtype, device=batch.device)
            p_ext = xp.concat([take_rows(rows.p, ids), zero], axis=1)  # [m, V+1]
            q_ext = xp.concat([a[:, None] * take_rows(rows.q, ids), (1 - a)[:, None]], axis=1)
            cands = xp.concat([batch.tokens[at[:, None], xp.asarray(kids, device=batch.device)[None, :]]
                               for _, at, kids in group])  # [m, k]
            problem = xp.stack([xp.astype(ids, dtype), a], axis=1)  # equal (context, A_t): equal rows
            total_accept, outflow = _node_acceptance(batch, rule, p_ext, q_ext, cands, problem, len(group))
            same = cands[:, :, None] == cands[:, None, :]
            share = lam[:, None] * total_accept / xp.astype(xp.sum(xp.astype(same, xp.int64), axis=2), dtype)
            start = 0
            for v, at, kids in group:
                part = slice(start, start + at.shape[0])
                for i, w in enumerate(kids):
                    scores[at, w] = share[part, i]
                flow = lam[part, None] * outflow[part, :vocab]
                flows[v, at], outgoing[at, v] = flow, row_sum(flow)
                start += at.shape[0]
    return _backward(batch, scores, flows, outgoing)


def _backward(batch: Batch, scores: Any, flows: Any, outgoing: Any) -> tuple[Any, Any]:
    """Alg. 2: the accepted node and the emitted token (Eq. 2); ``flows [n, B, V]``, ``outgoing [B, n]`` their row
    sums, summed when the flows were set (0 where none was)."""
    xp, rows = batch.xp, batch.rows
    node, y = batch.full(batch.size, -1), batch.full(batch.size, 0)
    for level in reversed(batch.shape.levels):
        open_ = batch.where_true(node < 0)
        if open_.shape[0] == 0:
            break
        cols = [xp.clip(scores[open_, v] - outgoing[open_, v], min=0.0) for v in level]
        level_mass = scores[open_, level[0]]
        for v in level[1:]:
            level_mass = level_mass + scores[open_, v]
        weights = xp.stack(cols + [xp.clip(1 - level_mass, min=0.0)], axis=1)
        has_mass = row_sum(weights) > 0
        if level[0] != 0:
            open_, weights = open_[has_mass], weights[has_mass]
            choice = categorical(weights, batch.stream.take(open_))
        else:  # the root is taken when every weight vanished (a rounding-level branch, see the reference)
            choice = batch.full(open_.shape[0], 0)
            choice[has_mass] = categorical(weights[has_mass], batch.stream.take(open_[has_mass]))
        picked = choice < len(level)
        at = open_[picked]
        v = xp.asarray(level, dtype=xp.int64, device=batch.device)[choice[picked]]
        q = take_rows(rows.q, batch.ids[at, v])
        res = positive_residual(scores[at, v][:, None] * q - flows[v, at], q)
        y[at] = categorical(res, batch.stream.take(at))
        node[at] = v
    return node, y


def _node_acceptance(batch: Batch, rule: str, p: Any, q: Any, cands: Any, problem: Any,
                     nodes: int) -> tuple[Any, Any]:
    """Per candidate position the rule's acceptance of its token (summed over the positions holding it, as
    ``token_acceptance``'s dictionary: first occurrence, then in order) ``[m, k]``, and the outgoing flow
    ``[m, V+1]``, at transformed rows ``p``, ``q`` ``[m, V+1]``; rows with equal ``problem`` rows (``[m, 2]``:
    context id and ``A_t``) are equal. ``nodes``: the tree's nodes these rows come from (each trial brings one
    problem a node)."""
    xp = batch.xp
    k = cands.shape[1]
    if rule == "opt" or (rule == "gr" and batch.rows.exact_order):
        return _reference_flows(_FLOW_RULES[rule], p, q, cands)
    if rule == "gr":
        accept, out = lv_gr_node(*(np.asarray(to_device(a, "cpu"), dtype=float) for a in (p, q)),
                                 np.asarray(to_device(cands, "cpu")), np.asarray(to_device(problem, "cpu"), dtype=float),
                                 batch.rows.mass_grid, (batch.trials or 0) * nodes)
        return (xp.asarray(accept, dtype=p.dtype, device=batch.device),
                xp.asarray(out, dtype=p.dtype, device=batch.device))
    rho = _distinct_kseq_rho(p, q, k, problem) if rule == "kseq" else None
    accept = _plan_acceptance(rule, cands, p, q, rho)
    total_accept = []
    for i in range(k):
        same = cands == cands[:, i:i + 1]
        summed = xp.where(same[:, 0], accept[:, 0], xp.zeros_like(accept[:, 0]))
        for j in range(1, k):
            summed = xp.where(same[:, j], summed + accept[:, j], summed)
        total_accept.append(summed)
    vocab = p.shape[1] - 1
    if batch.rows.exact_order and vocab**k <= TUPLE_SUM_LIMIT:
        return xp.stack(total_accept, axis=1), _outflow_by_tuples(rule, p, q, k, rho)
    return xp.stack(total_accept, axis=1), _outflow(rule, p, q, k, rho)


def _distinct_kseq_rho(p: Any, q: Any, k: int, problem: Any) -> Any:
    """K-SEQ's ``ρ*`` per row, bisected once per distinct ``problem`` (context id and ``A_t``): the nodes of a depth
    share them in every trial at the root, in most at depth 1 and a fifth at depth 2 on complete trees."""
    first, inverse = distinct_rows(problem)
    return kseq_rho(p[first], q[first], k)[inverse]


def _plan_acceptance(rule: str, cands: Any, p: Any, q: Any, rho: Any) -> Any:
    """``P(accept position i | X)`` of the SpS, RRS or K-SEQ plan (``single_step.plan_acceptance``), ``[m, k]``."""
    xp = array_namespace(p)
    every = xp.arange(p.shape[0], device=device(p))
    out, target, reach = [], q, None
    for i in range(cands.shape[1]):
        x = cands[:, i]
        if rule == "kseq":
            prob = ratio(q[every, x], rho * p[every, x])
        else:
            prob = ratio(target[every, x], p[every, x])
            if i + 1 < cands.shape[1]:  # the residual the next position is checked against
                target = positive_residual(target - p, target)
        out.append(prob if reach is None else reach * prob)
        reach = (1 - prob) if reach is None else reach * (1 - prob)
    return xp.stack(out, axis=1)


def _outflow(rule: str, p: Any, q: Any, k: int, rho: Any) -> Any:
    """``Σ_X f(X → x)`` in closed form under i.i.d. tuples: RRS ``Σ_{i<k} reach_i min(p, r_i)`` with ``r_{i+1} =
    norm((r_i − p)_+)``, ``reach_{i+1} = reach_i (1 − Σ min(p, r_i))``; K-SEQ ``Σ_{i<k} (1 − β)^i min(p, q/ρ)``
    with ``β = Σ min(p, q/ρ)``."""
    xp = array_namespace(p)
    out = xp.zeros_like(q)
    reach = xp.ones_like(q[:, 0])
    if rule == "kseq":
        capped = xp.minimum(p, q / rho[:, None])
        miss = 1 - row_sum(capped)
        for _ in range(k):
            out = out + reach[:, None] * capped
            reach = reach * miss
        return out
    target = q
    for i in range(k):
        capped = xp.minimum(p, target)
        out = out + reach[:, None] * capped
        if i + 1 < k:
            reach = reach * (1 - row_sum(capped))
            target = positive_residual(target - p, target)
    return out


def _outflow_by_tuples(rule: str, p: Any, q: Any, k: int, rho: Any) -> Any:
    """``Σ_X P(X) Σ_{i: X_i = x} P(accept i | X)`` tuple by tuple, as ``rules._outflow`` adds it up: tuples in
    product order (over the real tokens: the dummy is never drafted), each token's acceptance summed over its
    positions first."""
    xp = array_namespace(p)
    m, vocab = p.shape[0], p.shape[1] - 1
    out = xp.zeros_like(q)
    for tup in itertools.product(range(vocab), repeat=k):
        prob = p[:, tup[0]]
        for x in tup[1:]:
            prob = prob * p[:, x]
        cands = xp.broadcast_to(xp.asarray(tup, dtype=xp.int64, device=device(p))[None, :], (m, k))
        accept = _plan_acceptance(rule, cands, p, q, rho)
        for x in dict.fromkeys(tup):
            at = [i for i, t in enumerate(tup) if t == x]
            summed = accept[:, at[0]]
            for i in at[1:]:
                summed = summed + accept[:, i]
            out[:, x] = out[:, x] + prob * summed
    return out


def _reference_flows(rule: Any, p: Any, q: Any, cands: Any) -> tuple[Any, Any]:
    """A flow-defined rule's acceptance and outgoing flow, row by row with the reference solver."""
    xp = array_namespace(p)
    accept, out = [], []
    for pr, qr, row in zip(p.tolist(), q.tolist(), cands.tolist()):
        got = rule.token_acceptance(tuple(row), tuple(pr), tuple(qr), "iid")
        accept.append([got.get(x, 0.0) for x in row])
        out.append(list(rule.outflow(tuple(pr), tuple(qr), len(row), "iid")))
    return (xp.asarray(accept, dtype=p.dtype, device=device(p)), xp.asarray(out, dtype=p.dtype, device=device(p)))
