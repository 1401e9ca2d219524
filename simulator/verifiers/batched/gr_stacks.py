"""GR's problems of many nodes solved as one stack for the batched lifts: Layer Verification over GR
(:func:`lv_gr_node`) and token verification's GR step tables (:func:`tv_gr_tables`), equal to the reference's
outcome to rounding."""

from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import Callable

import numpy as np

from simulator.array_ops import distinct_rows
from simulator.verifiers.gr_solver import Rows, gr_dual_batch, theta_slope

#: Elements ``M·R·(V+1)`` per solver call: about a thousand instances at ``V = 15, k = 2``, where the solver's
#: working set stays in cache (larger stacks ran 15–35% slower per instance).
STACK_ELEMENTS = 2_000_000
#: The finest grid of score masses (:class:`MassGrid`): steps per unit of mass, a power of two, so that ``A·G`` and
#: ``j/G`` are exact; a coarser grid's points are some of its points.
GRID_STEPS = 128
#: A context's grid has about one step per this many problems expected there over the run (:func:`grid_steps`)
GRID_VISITS = 4
#: The coarsest grid used: a context expected to bring fewer than ``GRID_COARSEST·GRID_VISITS`` problems starts
#: cold
GRID_COARSEST = 8


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


def _solve(p: np.ndarray, q: np.ndarray, k: int, guess: Callable[[np.ndarray], np.ndarray] | None = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """GR for each problem ``(p[m], q[m])`` with ``k`` i.i.d. candidates: ``θ``, ``H*``, the outgoing flow and the
    clipping factors per token (``q/inflow`` where the inflow overshoots ``q``, else 1). ``guess(H*)``, where
    given, is where Newton starts (:func:`~simulator.verifiers.gr_solver.gr_dual_batch`'s ``start``)."""
    count, size = p.shape
    rows, _ = token_sets(size, k)
    inner = _inner_sets(p, q, k)
    start = None if guess is None else guess(inner)
    theta, inflow = np.empty((count, size)), np.empty((count, size))
    chunk = max(1, STACK_ELEMENTS // (len(rows.member) * size))
    for first in range(0, count, chunk):  # everything [M, R] a chunk at a time: the stack stays in cache
        at = slice(first, first + chunk)
        probs = set_probabilities(p[at], k)
        reject = rows.row_sums((~inner[at]).astype(float)) == 0  # S ⊆ H*: no token outside H*
        theta[at], inflow[at] = gr_dual_batch(rows, probs, reject, q[at], inner[at],
                                              None if start is None else start[at])
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where((inflow > q) & (inflow > 0), q / inflow, 1.0)
    return theta, inner, factor * inflow, factor


def grid_steps(visits: np.ndarray) -> np.ndarray:
    """The grid a context's problems start from (:class:`MassGrid`), by the problems expected there over the run:
    ``G`` steps per unit of mass, the power of two at most ``visits/GRID_VISITS``, from :data:`GRID_COARSEST` to
    :data:`GRID_STEPS`; 0 (no grid: cold starts) below the coarsest. A grid costs about ``G + 1`` cold solves and
    a finer grid saves more Newton steps a problem (about 1.8 of 4.7 at ``G = 8``, 3.5 at ``G = 128``, measured
    on the ablation's complete(b = 2) cell), so the grid grows with the problems that share its cost."""
    steps = np.zeros(visits.shape, dtype=np.int64)
    size = GRID_COARSEST
    while size <= GRID_STEPS:
        steps[visits >= size * GRID_VISITS] = size
        size *= 2
    return steps


class MassGrid:
    """Where Layer Verification's GR problems start Newton: GR solved at score masses ``A = j/G`` of each context
    reached, with the slope ``dθ/dA`` there (:func:`theta_slope`); ``G`` per context by the problems a run brings
    there (:func:`grid_steps`), every grid's points among the finest grid's (:data:`GRID_STEPS`).

    LV's problem at a node is GR's at ``(p_c, A·q_c)``: the context's rows and the depth's score mass, which
    depends on the whole drafted tree, so nearly every node of every trial brings its own ``A`` — but a context's
    ``θ(A)`` is smooth between the masses where ``H*`` or a bound changes. A problem whose grid neighbours
    ``⌊A·G⌋/G`` and ``⌈A·G⌉/G`` have its ``H*`` starts at their cubic Hermite interpolant, one neighbour with its
    ``H*`` at its tangent, neither at the cold guess: Newton then needs 1.3 steps at ``G = 128``, 2.9 at
    ``G = 8``, against 4.7 cold (where a bound changes inside a step, the interpolant is rougher). Newton solves
    to the same tolerance from any start, so the outcome is GR's to that tolerance either way
    (docs/engines.md). A grid point is solved cold, once, from its context's rows alone, and the solver gives an
    instance the same ``θ`` in any stack; ``G`` depends on the context's draft probability and the run's size: a
    problem's start, hence its ``θ``, depends on its context, ``A`` and the run's configuration only — not on
    the batch, its size, or the order contexts were reached in.
    """

    def __init__(self, p: np.ndarray, q: np.ndarray, reach: np.ndarray) -> None:
        self.p, self.q, self.reach = p, q, reach
        self._points: dict[tuple[int, tuple[int, ...]], _GridPoints] = {}

    @property
    def solved(self) -> int:
        """Grid points solved so far (every ``k`` and token set)."""
        return sum(points.count for points in self._points.values())

    def guess(self, k: int, drafted: np.ndarray, ids: np.ndarray, mass: np.ndarray,
              scale: float) -> Callable[[np.ndarray], np.ndarray]:
        """The start for the problems of contexts ``ids`` at masses ``mass`` ``[M]`` on the tokens ``drafted``, as
        :func:`_solve` asks for it (a function of the problems' ``H*``; NaN where there is no warm start), from
        each context's grid (:func:`grid_steps` of the problems expected there: ``scale``, the run's trials times
        the tree's nodes these problems come from, times the draft's probability of the context)."""
        points = self._points.setdefault((k, tuple(drafted.tolist())), _GridPoints(len(self.p), drafted.size))
        steps = grid_steps(scale * self.reach[ids])
        visited = steps > 0
        stride = GRID_STEPS // np.maximum(steps, 1)  # a coarse grid's step j is the finest grid's j·stride
        scaled = mass * steps  # exact: the steps are powers of two
        below = np.floor(scaled)
        low = below.astype(np.int64) * stride
        high = np.minimum(low + stride, GRID_STEPS)
        codes = np.concatenate([ids * (GRID_STEPS + 1) + low, ids * (GRID_STEPS + 1) + high])
        missing = np.unique(codes[np.tile(visited, 2) & (points.slot[codes] < 0)])
        missing = missing[missing % (GRID_STEPS + 1) > 0]  # A = 0 is never asked for
        if len(missing):
            ctx, step = np.divmod(missing, GRID_STEPS + 1)
            p = self.p[ctx][:, drafted]
            q = (step / GRID_STEPS)[:, None] * self.q[ctx][:, drafted]
            theta, inner, _, _ = _solve(p, q, k)
            points.add(missing, theta, inner, _slopes(p, q, k, inner, theta) / (step / GRID_STEPS)[:, None])
        t = (scaled - below)[:, None]
        span = 1.0 / np.maximum(steps, 1)[:, None]

        def start(inner: np.ndarray) -> np.ndarray:
            lo, hi = points.slot[codes[: len(ids)]], points.slot[codes[len(ids):]]
            # only where visited: points another run solved are not read, so the start is this run's own
            has_lo = visited & (lo >= 0) & (points.inner[lo] == inner).all(axis=1)
            has_hi = visited & (hi >= 0) & (points.inner[hi] == inner).all(axis=1)
            a, da, b, db = points.theta[lo], span * points.slope[lo], points.theta[hi], span * points.slope[hi]
            t2, t3 = t * t, t * t * t
            hermite = (2 * t3 - 3 * t2 + 1) * a + (t3 - 2 * t2 + t) * da + (3 * t2 - 2 * t3) * b + (t3 - t2) * db
            return np.where((has_lo & has_hi)[:, None], hermite,
                            np.where(has_lo[:, None], a + t * da,
                                     np.where(has_hi[:, None], b - (1 - t) * db, np.nan)))

        return start


class _GridPoints:
    """The grid points solved so far for one ``(k, drafted tokens)``: ``θ``, ``H*`` and ``dθ/dA`` in arrays grown
    by doubling; ``slot[c·(G+1) + j]`` the row of context ``c`` at ``A = j/G`` (−1 before it is solved). Row −1 is
    a sentinel (never read as a neighbour: the start tests the slot)."""

    def __init__(self, contexts: int, size: int) -> None:
        self.slot = np.full(contexts * (GRID_STEPS + 1), -1, dtype=np.int32)
        self.theta, self.slope = np.zeros((1, size)), np.zeros((1, size))
        self.inner = np.zeros((1, size), dtype=bool)
        self.count = 0

    def add(self, codes: np.ndarray, theta: np.ndarray, inner: np.ndarray, slope: np.ndarray) -> None:
        need = self.count + len(codes) + 1  # + the sentinel, kept last
        if need > len(self.theta):
            grow = max(need, 2 * len(self.theta))
            for name in ("theta", "slope", "inner"):
                old = getattr(self, name)
                new = np.zeros((grow, old.shape[1]), dtype=old.dtype)
                new[: self.count] = old[: self.count]
                setattr(self, name, new)
        rows = slice(self.count, self.count + len(codes))
        self.theta[rows], self.inner[rows], self.slope[rows] = theta, inner, slope
        self.slot[codes] = np.arange(self.count, self.count + len(codes), dtype=np.int32)
        self.count += len(codes)


def _slopes(p: np.ndarray, q: np.ndarray, k: int, inner: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """``dθ/ds`` for capacities ``s·q`` at ``s = 1`` (:func:`theta_slope`), a stack at a time."""
    rows, _ = token_sets(p.shape[1], k)
    out = np.empty_like(theta)
    chunk = max(1, STACK_ELEMENTS // (len(rows.member) * p.shape[1]))
    for first in range(0, len(p), chunk):
        at = slice(first, first + chunk)
        reject = rows.row_sums((~inner[at]).astype(float)) == 0
        out[at] = theta_slope(rows, set_probabilities(p[at], k), reject, q[at], inner[at], theta[at])
    return out


def lv_gr_node(p: np.ndarray, q: np.ndarray, cands: np.ndarray, problem: np.ndarray,
               grid: MassGrid | None = None, scale: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """GR at one LV node for a batch of trials: the transformed draft rows ``p`` ``[m, V+1]`` and target rows
    ``q`` (:func:`simulator.verifiers.layer.score_nodes`: draft ``(p_v, 0)``, target ``(A_t q_v, 1 − A_t)``, with
    ``A_t`` the score mass of the node's depth), the drafted candidates ``[m, k]`` and ``problem``
    ``[m, 2]``, the row id and ``A_t`` (equal rows for equal ``problem``). With ``grid`` (rows per context: the
    row id is the context's), Newton starts from the grid's guess at the contexts ``scale`` makes worth a grid
    (:meth:`MassGrid.guess`). Returns, per candidate position, GR's
    acceptance of its token given the tuple (``f(X → x)/P(X)``; 0 for a token GR does not route to) and the
    outgoing flow ``Σ_X f(X → x)`` ``[m, V+1]``, both in closed form.

    ``A_t`` depends on the whole drafted tree, so every node of every trial brings a GR problem of its own; where
    the reference builds GR's flow dictionaries over all ``V^k`` tuples per problem
    (:func:`simulator.verifiers.flows.gr_flow`), the problems of a level's nodes across the batch are stacked."""
    count, k = cands.shape
    # A token no trial can draft (LV's dummy Δ) has no rows and no flow: GR is solved without it, on V^k rather
    # than (V+1)^k tuples (its θ would sit at its bound and its outflow is 0).
    drafted = np.flatnonzero((p > 0).any(axis=0))
    # Trials whose node has the same rows share a problem (every trial at the root).
    unique, inverse = distinct_rows(problem)
    # With one candidate a row holds one token, and Newton's cold start (gr_solver._first_guess) is the solution.
    warm = grid is not None and k > 1
    guess = grid.guess(k, drafted, problem[unique, 0].astype(np.int64), problem[unique, 1], scale) if warm else None
    theta, *solved = _solve(p[unique][:, drafted], q[unique][:, drafted], k, guess)
    weights, inner, outflow, factor = (np.zeros((len(unique), p.shape[1]), dtype=a.dtype)
                                       for a in (theta, *solved))
    for full, part in zip((weights, inner, outflow, factor), (np.exp(theta), *solved)):
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
    ``[M, V]`` (``q`` where that has no mass). The contexts are solved as one stack.

    Each problem is GR's as :func:`~simulator.verifiers.flows.gr_flow` states it (``H*`` from the same scan as
    :func:`~simulator.verifiers.flows.alpha_star`, tuples merged by token set, over-full tokens clipped), solved by
    :func:`simulator.verifiers.gr_solver.gr_dual_batch`; the solver sees rows in another order, so sums differ from the
    reference's in their last bits.
    """
    count, vocab = p.shape
    theta, inner, outflow, factor = _solve(p, q, k)
    weights = np.exp(theta)
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
