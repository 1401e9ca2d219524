"""Layer Verification over GR, batched: the GR problems of many nodes solved as one stack.

LV hands each non-leaf node a transformed problem — draft ``(p_v, 0)``, target ``(A_t q_v, 1 − A_t)`` with
``A_t`` the score mass of the node's depth (:mod:`simulator.verifiers.layer`) — and ``A_t`` depends on the whole
drafted tree, so every node of every trial brings a GR problem of its own. The reference path builds GR's
flow dictionaries over all ``V^k`` tuples per problem (:func:`simulator.verifiers.flows.gr_flow`); here the
problems of a level's nodes across a batch of trials are stacked and solved by the same dual solver
(:func:`simulator.verifiers.gr_solver.gr_dual_batch`), and LV reads off the two things it needs in closed
form: the acceptance of the drafted tuple's tokens and the outgoing flow.

Each problem is GR's as :func:`~simulator.verifiers.flows.gr_flow` states it — ``H*`` from the same
sequential scan as :func:`~simulator.verifiers.flows.alpha_star`, tuples merged by token set (``P(set X = S)``,
here in closed form per set; the reference sums the tuples of a set), over-full tokens clipped — so a trial's
outcome equals the reference path's to rounding (the solver sees rows in another order and sums differ in
their last bits).
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

from simulator.array_ops import distinct_rows
from simulator.verifiers.gr_solver import Rows, gr_dual_batch, routed_flow, routed_sums

#: Elements ``M·R·(V+1)`` per solver call: about a thousand instances at ``V = 15, k = 2``, where the solver's
#: working set stays in cache (larger stacks ran 15–35% slower per instance).
STACK_ELEMENTS = 2_000_000


@lru_cache(maxsize=8)
def token_sets(vocab: int, k: int) -> tuple[Rows, tuple[tuple[np.ndarray, tuple], ...]]:
    """The token sets of ``k`` i.i.d. draws from ``vocab`` tokens as solver rows (by size, then tokens), and per
    set size ``m`` a block: the sets' tokens ``[R_m, m]`` and the terms of ``P(set X = S)`` — the draws hit the
    ``m`` tokens ``c_1..c_m ≥ 1`` times, ``Σ_c k!/Π c_j! · Π p_j^{c_j}`` over the compositions ``c`` of ``k``
    (:func:`set_probabilities`)."""
    sets = sorted({tuple(sorted(set(t))) for t in itertools.product(range(vocab), repeat=k)},
                  key=lambda s: (len(s), s))
    member = np.zeros((len(sets), vocab))
    for i, s in enumerate(sets):
        member[i, list(s)] = 1.0
    blocks = []
    for size in sorted({len(s) for s in sets}):
        tokens = np.array([s for s in sets if len(s) == size], dtype=np.int64)
        terms = tuple((math.factorial(k) // math.prod(math.factorial(c) for c in counts), counts)
                      for counts in itertools.product(range(1, k + 1), repeat=size) if sum(counts) == k)
        blocks.append((tokens, terms))
    return Rows.of(member), tuple(blocks)


def set_probabilities(p: np.ndarray, k: int) -> np.ndarray:
    """``P(set X = S)`` for ``k`` i.i.d. draws from each row of ``p`` ``[M, V]``, per row of
    :func:`token_sets` ``[M, R]``: a few products per set (the sum over the ``V^k`` tuples, which the reference
    merges, costs ``V^k`` per instance and agrees to rounding)."""
    rows, blocks = token_sets(p.shape[1], k)
    out = np.empty((len(p), len(rows.member)))
    start = 0
    for tokens, terms in blocks:
        factors = [np.take(p, tokens[:, j], axis=1) for j in range(tokens.shape[1])]
        total = None
        for coefficient, counts in terms:
            term = np.full(factors[0].shape, float(coefficient))
            for factor, count in zip(factors, counts):
                for _ in range(count):
                    term = term * factor
            total = term if total is None else total + term
        out[:, start: start + len(tokens)] = total
        start += len(tokens)
    return out


def _inner_sets(p: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """``H*`` of each problem as a mask: :func:`~simulator.verifiers.flows.alpha_star`'s i.i.d. scan (tokens by
    ``p/q`` descending, ``q = 0 < p`` first, undrafted last, ties by id; the first prefix minimising
    ``q(H) + 1 − p(H)^k``, if it beats ``H = ∅``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(p > 0, np.where(q == 0, -np.inf, -(p / q)), 1.0)
    ids = np.broadcast_to(np.arange(p.shape[1]), p.shape)
    order = np.lexsort((ids, key), axis=1)
    qh = np.cumsum(np.take_along_axis(q, order, axis=1), axis=1)
    ph = np.cumsum(np.take_along_axis(p, order, axis=1), axis=1)
    value = qh + 1 - ph**k
    best = np.argmin(value, axis=1)
    length = np.where(value[np.arange(len(p)), best] < 1, best + 1, 0)
    inner = np.zeros(p.shape, dtype=bool)
    np.put_along_axis(inner, order, np.arange(p.shape[1])[None, :] < length[:, None], axis=1)
    return inner


def _solve(p: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """GR for each problem ``(p[m], q[m])`` with ``k`` i.i.d. candidates: ``e^θ``, ``H*``, the outgoing flow and
    the clipping factors per token (``q/inflow`` where the inflow overshoots ``q``, else 1)."""
    count, size = p.shape
    rows, _ = token_sets(size, k)
    weights, inner, inflow = np.empty((count, size)), np.empty((count, size), dtype=bool), np.empty((count, size))
    chunk = max(1, STACK_ELEMENTS // (len(rows.member) * size))
    for start in range(0, count, chunk):  # everything [M, R] a chunk at a time: the stack stays in cache
        at = slice(start, start + chunk)
        probs = set_probabilities(p[at], k)
        inner[at] = _inner_sets(p[at], q[at], k)
        reject = rows.row_sums((~inner[at]).astype(float)) == 0  # S ⊆ H*: no token outside H*
        weights[at] = np.exp(gr_dual_batch(rows, probs, reject, q[at], inner[at]))
        share = probs / routed_sums(rows, weights[at], reject, inner[at], 1.0)
        inflow[at] = routed_flow(rows, share, weights[at], reject, inner[at])
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where((inflow > q) & (inflow > 0), q / inflow, 1.0)
    return weights, inner, factor * inflow, factor


def lv_gr_node(p: np.ndarray, q: np.ndarray, cands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GR at one LV node for a batch of trials: the transformed draft rows ``p`` ``[m, V+1]`` and target rows
    ``q`` (:func:`simulator.verifiers.layer.score_nodes`) and the drafted candidates ``[m, k]``. Returns, per
    candidate position, GR's acceptance of its token given the tuple (``f(X → x)/P(X)``; 0 for a token GR does
    not route to) and the outgoing flow ``Σ_X f(X → x)`` ``[m, V+1]``."""
    count, k = cands.shape
    # A token no trial can draft (LV's dummy Δ) has no rows and no flow: GR is solved without it, on V^k rather
    # than (V+1)^k tuples (its θ would sit at its bound and its outflow is 0).
    drafted = np.flatnonzero((p > 0).any(axis=0))
    # Trials whose node has the same rows share a problem (every trial at the root).
    problems = np.concatenate([p[:, drafted], q[:, drafted]], axis=1)
    first, inverse = distinct_rows(problems)
    unique = problems[first]
    size = len(drafted)
    solved = _solve(unique[:, :size], unique[:, size:], k)
    weights, inner, outflow, factor = (np.zeros((len(unique), p.shape[1]), dtype=a.dtype) for a in solved)
    for full, part in zip((weights, inner, outflow, factor), solved):
        full[:, drafted] = part
    weights, inner, factor = weights[inverse], inner[inverse], factor[inverse]
    b = np.arange(count)[:, None]
    inside = inner[b, cands].all(axis=1)
    routed = inside[:, None] | ~inner[b, cands]  # the tokens the tuple routes to
    first = _first_positions(k, cands)
    w = weights[b, cands]
    z = inside + (np.where(routed & first, w, 0.0)).sum(axis=1)
    accept = np.where(routed, w / z[:, None] * factor[b, cands], 0.0)
    return accept, outflow[inverse]


def _first_positions(k: int, tuples: np.ndarray) -> np.ndarray:
    """``[T, k]``: whether each position holds the first occurrence of its token in the tuple."""
    first = np.ones(tuples.shape, dtype=bool)
    for i in range(1, k):
        first[:, i] = (tuples[:, :i] != tuples[:, [i]]).all(axis=1)
    return first


def tv_gr_tables(p: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """GR's step at each context ``(p[m], q[m])`` for ``k`` i.i.d. candidates, as token verification samples it
    (:meth:`simulator.verifiers.rules.SingleStepRule.step`): ``[M, V^k, k + 1]`` weights per tuple code — the
    flow ``f(X → x)`` at the position where each token first appears (0 for a repeat, and for a token the tuple
    does not route to), then the reject weight ``P(X) − Σ flows`` — and the residual ``norm((q − outflow)_+)``
    ``[M, V]`` (``q`` where that has no mass). The contexts are solved as one stack."""
    count, vocab = p.shape
    weights, inner, outflow, factor = _solve(p, q, k)
    tuples = np.array(list(itertools.product(range(vocab), repeat=k)), dtype=np.int64)  # code order
    first = _first_positions(k, tuples)
    table = np.empty((count, len(tuples), k + 1))
    for start in range(0, count, max(1, STACK_ELEMENTS // (len(tuples) * k))):
        at = slice(start, start + max(1, STACK_ELEMENTS // (len(tuples) * k)))
        w, held, scale = weights[at][:, tuples], inner[at][:, tuples], factor[at][:, tuples]
        chance = p[at][:, tuples[:, 0]]
        for i in range(1, k):
            chance = chance * p[at][:, tuples[:, i]]
        inside = held.all(axis=2)
        routed = (inside[:, :, None] | ~held) & first
        z = inside + np.where(routed, w, 0.0).sum(axis=2)
        flow = np.where(routed, chance[:, :, None] * w / z[:, :, None] * scale, 0.0)
        table[at, :, :k] = flow
        table[at, :, k] = np.maximum(chance - flow.sum(axis=2), 0.0)
    rest = np.maximum(q - outflow, 0.0)
    mass = rest.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        residual = np.where(mass > 0, rest / mass, q)
    return table, residual
