"""Greedy multi-path block verification, batched (reference: :mod:`simulator.verifiers.multipath`): of the
``K`` i.i.d. chains below the root select the lexicographically best by each token's ranking place (``q/p``
descending; ``clipped``: by ``min(1, q/p)``, the control ``bug-gbv-clipped``), then block verification along
it with the selected path's law ``p̃`` — the law of the best of ``K`` i.i.d. paths."""

from __future__ import annotations

from typing import Any

from ...array_ops import take_rows
from ...numeric import power_gap
from ...errors import InvalidParameterError, UnsupportedDraftError
from ..multipath import ZERO_DRAFT_GBV
from .block import block_rows
from .frame import Batch


def gbv(batch: Batch, clipped: bool = False) -> tuple[Any, Any]:
    """The accepted node and emitted token of every multi-chain, ``([B], [B])``."""
    xp, shape, rows = batch.xp, batch.shape, batch.rows
    chains = []
    for head in shape.children[0]:
        chain = [0, head]
        while shape.children[chain[-1]]:
            if len(shape.children[chain[-1]]) != 1:
                raise InvalidParameterError("parents", "gbv verifies multi-chain drafts (one child below the root)")
            chain.append(shape.children[chain[-1]][0])
        chains.append(chain)
    every = batch.arange(batch.size)
    if not chains:  # depth 0: nothing to verify
        return batch.full(batch.size, 0), rows.sample("q", batch.ids[:, 0], batch.stream.take(every))
    k, height = len(chains), len(chains[0]) - 1
    if any(len(c) != height + 1 for c in chains):
        raise InvalidParameterError("parents", "gbv needs chains of equal depth")
    keys = []  # [K] of [B, H]: each chain's tokens' ranking places
    for chain in chains:
        places = []
        for v, child in zip(chain, chain[1:]):
            x = batch.tokens[:, child]
            zero = ~(rows.p[batch.ids[:, v], x] > 0)
            if bool(xp.any(zero)):
                b = int(batch.where_true(zero)[0])
                raise UnsupportedDraftError("tokens", f"tree {b}, node {child}: token {int(x[b])} has zero draft "
                                                      f"probability; {ZERO_DRAFT_GBV}")
            places.append(rows.place(batch.ids[:, v], x, clipped))
        keys.append(xp.stack(places, axis=1))
    best = batch.full(batch.size, 0)
    incumbent = keys[0]
    for j in range(1, k):  # the first chain among equal paths
        differ = keys[j] != incumbent
        first = xp.argmax(xp.astype(differ, xp.int8), axis=1)
        better = xp.any(differ, axis=1) & (keys[j][every, first] < incumbent[every, first])
        best = xp.where(better, xp.full_like(best, j), best)
        incumbent = xp.where(better[:, None], keys[j], incumbent)
    nodes = xp.asarray(chains, dtype=xp.int64, device=batch.device)[best]  # [B, H+1]
    ids = batch.ids[every[:, None], nodes]
    path_tokens = batch.tokens[every[:, None], nodes]
    zero = xp.zeros(batch.size, dtype=rows.q.dtype, device=batch.device)
    below, mass = zero, zero + 1  # A(c), X(c) of selected_law
    law = xp.empty((batch.size, height, rows.vocab), dtype=rows.q.dtype, device=batch.device)  # p̃ at 0..H−1
    for i in range(height):
        p = take_rows(rows.p, ids[:, i])
        lower = rows.lower(ids[:, i])
        norm = power_gap(below, below + mass, k)  # the reference's quotient of power gaps (selected_law)
        start = below[:, None] + mass[:, None] * lower
        law[:, i] = p * power_gap(start, start + mass[:, None] * p, k) / norm[:, None]
        x = path_tokens[:, i + 1]
        below, mass = below + mass * lower[every, x], mass * p[every, x]
    tau, y = block_rows(batch, every, path_tokens, law, ids, greedy=False)
    return nodes[every, tau], y
