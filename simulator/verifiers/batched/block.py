"""Block verification on chains, batched (reference: :mod:`simulator.verifiers.block`, Sun et al. 2025):
Alg. 2 (``bv``) and, with ``greedy``, Alg. 4's decisions (``greedy-bv``; the distribution modification of the
later tokens, Alg. 5, is the caller's). Also GBV's second stage, block verification along the selected path
with its law ``p̃`` (:mod:`simulator.verifiers.batched.multipath`)."""

from __future__ import annotations

from typing import Any

from ...array_ops import categorical, positive_residual, ratio, row_sum, take_rows
from ...errors import InvalidParameterError
from .frame import Batch


def bv(batch: Batch, greedy: bool = False) -> tuple[Any, Any]:
    """The accepted node and emitted token of every chain, ``([B], [B])``."""
    parents = batch.shape.parents
    if any(parents[i] != i - 1 for i in range(1, len(parents))):
        raise InvalidParameterError("parents", "block verification takes a chain draft (one child per node)")
    draft = batch.rows.p[batch.ids[:, :-1]]  # [B, γ, V]
    tau, y = block_rows(batch, batch.arange(batch.size), batch.tokens, draft, batch.ids, greedy)
    return tau, y


def block_rows(batch: Batch, trees: Any, tokens: Any, draft: Any, target_ids: Any, greedy: bool) -> tuple[Any, Any]:
    """Block verification of chains: ``tokens [m, γ+1]``, the draft law at positions ``0..γ−1`` ``draft [m, γ,
    V]``, the target rows' ids ``target_ids [m, γ+1]``; ``trees`` the chains' places in the batch (their uniform
    streams). Returns ``τ [m]`` and ``y [m]``."""
    xp, q = batch.xp, batch.rows.q
    m, gamma = tokens.shape[0], tokens.shape[1] - 1
    every = batch.arange(m)
    weights = [xp.ones(m, dtype=q.dtype, device=batch.device)]
    tau = batch.full(m, 0)
    for i in range(1, gamma + 1):
        x = tokens[:, i]
        px, qx = draft[every, i - 1, x], q[target_ids[:, i - 1], x]
        if greedy:  # Alg. 4 line 4: no min
            if bool(xp.any(px == 0)):
                raise InvalidParameterError(f"tokens[:, {i}]", "greedy-bv needs drafted tokens of positive draft "
                                                               "probability")
            weights.append(weights[i - 1] * qx / px)
        else:  # Alg. 2 line 4
            weights.append(ratio(weights[i - 1] * qx, px))
        if i < gamma:
            gap = weights[i][:, None] * take_rows(q, target_ids[:, i]) - draft[:, i]
            over = row_sum(xp.where(gap > 0, gap, xp.zeros_like(gap)))
            if greedy:  # min(1, over/under), 0 where nothing is over
                under = row_sum(xp.where(-gap > 0, -gap, xp.zeros_like(gap)))
                h = xp.where(over > 0, ratio(over, under), xp.zeros_like(over))
            else:  # Eq. 5, h = S/(S + 1 − p_i), 0 where S = 0
                h = xp.where(over > 0, over / xp.where(over > 0, over + (1 - weights[i]), xp.ones_like(over)),
                             xp.zeros_like(over))
        else:
            h = ratio(weights[gamma], xp.ones_like(weights[gamma])) if greedy else weights[gamma]
        u = batch.stream.take(trees)
        tau = xp.where((h == 1) | (u < h), xp.full_like(tau, i), tau)
    u = batch.stream.take(trees)
    y = batch.full(m, 0)
    top = batch.where_true(tau == gamma)  # every token accepted: y from the target, by the row source's draw
    y[top] = batch.rows.sample("q", target_ids[top, gamma], u[top])
    rest = batch.where_true(tau < gamma)
    if rest.shape[0]:
        at = tau[rest]
        q_tau = take_rows(q, target_ids[rest, at])
        scale = xp.stack(weights, axis=1)[rest, at]
        residual = positive_residual(scale[:, None] * q_tau - draft[rest, at], q_tau)  # Eq. 4 (Eq. 30 for greedy)
        y[rest] = categorical(residual, u[rest])
    return tau, y
