"""Layer Verification, batched (reference: :mod:`simulator.verifiers.layer`, Algs. 1–2, Eqs. 1–2, App. E.2):
:func:`lv` lifts a single-step rule given as its array step (:class:`~simulator.verifiers.single_step_arrays.ArrayStep`,
from the registry: SpS, RRS, K-SEQ, OPT, GR), scoring forward depth by depth (Alg. 1), then sampling backward from
the deepest depth up (Alg. 2, :func:`_backward`).
"""

from __future__ import annotations

from typing import Any

from ...array_ops import categorical, positive_residual, row_sum, take_rows
from ..single_step_arrays import ArrayStep
from .frame import Batch


def lv(batch: Batch, step: ArrayStep) -> tuple[Any, Any]:
    """The accepted node and emitted token of every tree, ``([B], [B])``, lifting the single-step rule ``step``.

    Forward (Alg. 1), depth by depth: ``A_t`` the score mass of the depth's non-leaf nodes, ``λ_v = a_v/A_t``; the
    step solves each node's transformed problem, draft ``(p_v, 0)``, target ``(A_t q_v, 1 − A_t)``
    (:meth:`~simulator.verifiers.single_step_arrays.ArrayStep.acceptance_and_outflow`), and children get
    ``a_w = λ_v f(X → x_w)/P(X)/#[x_w ∈ X]``, the node its outgoing flow ``λ_v Σ_X f(X → x)``. Nodes of a depth with
    the same number of candidates are solved as one stack."""
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
        jobs = [(v, batch.where_true((mass > 0) & (scores[:, v] != 0)), shape.children[v][:step.max_candidates])
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
            total_accept, outflow = step.acceptance_and_outflow(batch, p_ext, q_ext, cands, problem, len(group))
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
    sums, summed when the flows were set (0 where none was). From the deepest depth up, one categorical over the
    depth's nodes (``a_v − Σ flow_v``) and ⊥ (``1 − Σ a_v``); on a node, ``y`` from ``norm(a_v q_v − flow_v)``."""
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
