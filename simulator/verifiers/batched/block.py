"""Block verification on chains, batched (reference: :mod:`simulator.verifiers.block`, Sun et al. 2025):
Alg. 2 (``bv``) and, with ``greedy``, Alg. 4's decisions (``greedy-bv``; the distribution modification of the
later tokens, Alg. 5, is the caller's). Also GBV's second stage, block verification along the selected path
with its law ``p̃`` (:mod:`simulator.verifiers.batched.multipath`)."""

from __future__ import annotations

from typing import Any

from ...array_ops import categorical, positive_residual, ratio, row_sum
from ...errors import InvalidParameterError
from .frame import Batch


def bv(batch: Batch, greedy: bool = False) -> tuple[Any, Any]:
    """The accepted node and emitted token of every chain, ``([B], [B])``."""
    parents = batch.shape.parents
    if any(parents[i] != i - 1 for i in range(1, len(parents))):
        raise InvalidParameterError("parents", "block verification takes a chain draft (one child per node)")
    everyone = batch.arange(batch.size)
    draft = [batch.rows.p[batch.ids[:, i]] for i in range(len(parents) - 1)]
    target = [batch.rows.q[batch.ids[:, i]] for i in range(len(parents))]
    tau, y, _ = block_rows(batch, everyone, batch.tokens, draft, target, greedy)
    return tau, y


def block_rows(batch: Batch, trees: Any, tokens: Any, draft: list, target: list, greedy: bool) -> tuple[Any, Any, Any]:
    """Block verification of chains given as rows: ``tokens [m, γ+1]``, ``draft[i]`` and ``target[i]`` the
    rows ``[m, V]`` at position ``i`` (``draft`` up to ``γ − 1``); ``trees`` the chains' places in the batch
    (their uniform streams). Returns ``τ [m]``, ``y [m]`` and the weights ``p_i`` ``[m, γ+1]``."""
    xp = batch.xp
    m, gamma = tokens.shape[0], tokens.shape[1] - 1
    every = batch.arange(m)
    weights = [xp.ones(m, dtype=target[0].dtype, device=batch.device)]
    tau = batch.full(m, 0)
    for i in range(1, gamma + 1):
        x = tokens[:, i]
        px, qx = draft[i - 1][every, x], target[i - 1][every, x]
        if greedy:  # Alg. 4 line 4: no min
            if bool(xp.any(px == 0)):
                raise InvalidParameterError(f"tokens[:, {i}]", "greedy-bv needs drafted tokens of positive draft "
                                                               "probability")
            weights.append(weights[i - 1] * qx / px)
        else:  # Alg. 2 line 4
            weights.append(ratio(weights[i - 1] * qx, px))
        if i < gamma:
            gap = weights[i][:, None] * target[i] - draft[i]
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
    stacked = xp.stack(weights, axis=1)  # [m, γ+1]
    scale = stacked[every, tau]
    q_tau = xp.stack(target, axis=1)[every, tau]
    p_tau = xp.stack(draft + [target[gamma]], axis=1)[every, tau]  # the last level's draft is never read
    residual = positive_residual(scale[:, None] * q_tau - p_tau, q_tau)  # Eq. 4 (Eq. 30 for greedy)
    y = categorical(xp.where((tau == gamma)[:, None], q_tau, residual), batch.stream.take(trees))
    return tau, y, stacked
