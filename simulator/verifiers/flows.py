"""Single-step rules as flow networks (SPEC §4; layer_verification.txt §3, App. C, E.2).

At one node with ``k`` candidates the network is source → tuple ``X`` (capacity ``P(X)``, the tuple law of the
drafting scheme) → token ``x ∈ set(X)`` → sink (capacity ``q(x)``). A rule's *flow* ``f(X → x)`` is
``P(X) · P(the rule accepts a candidate holding x | X)``; its *outgoing flow* at ``x`` is ``Σ_X f(X → x)``.
A rule is lossless iff its outgoing flow never exceeds ``q`` and its residual is ``norm(q − outflow)``.

This module holds the tuple laws, the optimum ``α*`` (O(V log V) for i.i.d. tuples), and the two rules that
are defined by their flows rather than by a sequential procedure:

* OPT — an exact maximum flow (networkx; rational capacities are scaled to integers, so rationals in give
  rationals out). Its acceptance equals ``α*``.
* GR (Global Resolution, Thomas & Pal, ICLR 2026) — a *reconstruction*: the paper is not in papers/ and its
  code is not public. Following the structure SPEC §4 records, ``H*`` is the smallest minimiser of ``α*``;
  tuples inside ``H*`` route ``P(X)·e^{θ_j}/(1 + Σ_{i∈set X} e^{θ_i})`` to token ``j`` (reject weight 1),
  tuples with a token outside ``H*`` route ``P(X)·e^{θ_j}/Σ_{i∈set X∖H*} e^{θ_i}`` to their outside tokens
  (no reject). ``θ`` minimises the convex ``Σ_X P(X) log Z_X(θ) − Σ_y q(y) θ_y`` over ``|θ| ≤ 30`` with
  ``θ_y ≤ 0`` for outside tokens; its gradient is expected flow minus ``q``, so at the optimum
  inside tokens are saturated and outside tokens are within capacity, saturated where ``θ_y < 0`` (without
  the sign bound the outside part is unbounded below whenever outside capacity exceeds outside mass).
  Solver (:func:`gr_dual`): projected Newton with the analytic Hessian, on tuples merged by token set,
  to a projected gradient of 1e-12 in a handful of iterations. It replaced scipy's L-BFGS-B (still the
  fallback should Newton stop short), which was several times slower — GR is solved at every node of a
  Monte Carlo sweep — and stopped with projected gradients up to ~1e-6. Any residual overshoot is clipped
  (flows into an over-full token are scaled down, the excess rejected), so capacities hold exactly and GR
  is lossless exactly; only its acceptance is approximate. Stated tolerance: acceptance ≥ ``α* − 1e-6``
  (checked in the tests).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import reduce
from typing import Sequence

import networkx as nx
from networkx.algorithms.flow import edmonds_karp
import numpy as np
from scipy.linalg.lapack import dposv
from scipy.optimize import minimize

from ..errors import InvalidParameterError
from ..numeric import Number, row_cache, normalise, positive_part, total

Row = tuple[Number, ...]
Tuple_ = tuple[int, ...]
TUPLE_LAWS = ("iid", "without-replacement")
GR_BOUND = 30.0
GR_TOLERANCE = 1e-6
GR_NEWTON_TOLERANCE = 1e-12  # sup norm of the projected gradient (flow units) at which Newton stops
GR_NEWTON_ITERATIONS = 100
GR_LINE_SEARCH_STEPS = 60


def _zero(row: Row) -> Number:
    return row[0] * 0


@row_cache(4096)
def tuple_law(p: Row, k: int, law: str) -> dict[Tuple_, Number]:
    """``P(X)`` for every candidate tuple of positive probability. Without replacement, a node whose draft
    supports fewer than ``k`` tokens gets that many candidates (the short-support rule of SPEC §3)."""
    support = [x for x in range(len(p)) if p[x] > 0]
    if law == "iid":
        out = {}
        for tup in itertools.product(support, repeat=k):
            prob = p[tup[0]]
            for x in tup[1:]:
                prob = prob * p[x]
            out[tup] = prob
        return out
    if law == "without-replacement":
        out = {}
        for tup in itertools.permutations(support, min(k, len(support))):
            prob, left = p[tup[0]] * 0 + 1, total(p)
            for x in tup:
                prob = prob * p[x] / left
                left = left - p[x]
            out[tup] = prob
        return out
    raise InvalidParameterError("tuple_law", f"unknown tuple law {law!r}; choose from {TUPLE_LAWS}")


def alpha_star(p: Row, q: Row, k: int, law: str = "iid") -> tuple[Number, frozenset[int]]:
    """``α* = min_H [q(H) + P(set(X) ⊄ H)]`` and ``H*``, its smallest minimiser.

    For i.i.d. tuples ``P(set(X) ⊄ H) = 1 − p(H)^k`` and the minimiser is a prefix of the tokens sorted by
    ``p/q`` descending (``q = 0 < p`` first, ties by token id): O(V log V). Other laws: every subset.
    """
    vocab = len(p)
    if law == "iid":
        order = sorted(range(vocab), key=lambda x: (-(math.inf if q[x] == 0 else p[x] / q[x])
                                                   if p[x] > 0 else 1, x))
        best, best_len = 1 + _zero(p), 0  # H = ∅: q(∅) + 1 − 0
        qh, ph = _zero(q), _zero(p)
        for j, x in enumerate(order, start=1):
            qh, ph = qh + q[x], ph + p[x]
            value = qh + 1 - ph**k
            if value < best:
                best, best_len = value, j
        return best, frozenset(order[:best_len])
    laws = tuple_law(tuple(p), k, law)
    best, best_set = None, frozenset()
    for size in range(vocab + 1):
        for subset in itertools.combinations(range(vocab), size):
            h = frozenset(subset)
            value = total([q[x] for x in h] or [_zero(q)]) + total(
                [pr for tup, pr in laws.items() if not set(tup) <= h] or [_zero(p)])
            if best is None or value < best:
                best, best_set = value, h
    return best, best_set


@dataclass(frozen=True)
class FlowSolution:
    """A feasible flow: per tuple, ``{token: f(X → token)}``; the outgoing flow; the residual."""

    flows: dict[Tuple_, dict[int, Number]]
    outflow: Row
    residual: Row

    @property
    def acceptance(self) -> Number:
        return total(self.outflow)


def _solution(flows: dict[Tuple_, dict[int, Number]], q: Row) -> FlowSolution:
    out = [_zero(q)] * len(q)
    for per in flows.values():
        for x, f in per.items():
            out[x] = out[x] + f
    rest = positive_part(qx - ox for qx, ox in zip(q, out))  # float rounding only; exact: q ≥ outflow
    return FlowSolution(flows, tuple(out), normalise(rest) if total(rest) > 0 else tuple(q))


def _lcm(values: Sequence[int]) -> int:
    return reduce(lambda a, b: a * b // math.gcd(a, b), values, 1)


@row_cache(2048)
def opt_flow(p: Row, q: Row, k: int, law: str) -> FlowSolution:
    """An exact maximum flow of the tuple → token network on integer capacities (rationals, or floats as the
    binary fractions they are, scaled by a common denominator).

    A maximum flow is not unique and the rule's law depends on which one it is, so the choice is pinned:
    Edmonds–Karp (shortest augmenting paths, found in a fixed node order) on integer node labels, whose
    iteration order does not depend on Python's string hashing. Its choices follow which residual capacities
    are positive and their minima, so a float instance takes the path its exact twin takes wherever no
    rounding-level residual appears, and such a residual carries a rounding-level flow."""
    exact = isinstance(p[0], Fraction)
    laws = tuple_law(p, k, law)
    caps = {tup: Fraction(pr) for tup, pr in laws.items()}
    qcap = [Fraction(x) for x in q]
    scale = _lcm([c.denominator for c in caps.values()] + [c.denominator for c in qcap])
    tuples = list(caps)
    source, sink = 0, 1
    token_node = {x: 2 + len(tuples) + x for x in range(len(q))}  # tuple i is node 2 + i
    graph = nx.DiGraph()
    graph.add_nodes_from(range(2 + len(tuples) + len(q)))
    for i, tup in enumerate(tuples):
        cap = int(caps[tup] * scale)
        graph.add_edge(source, 2 + i, capacity=cap)
        for x in sorted(set(tup)):
            graph.add_edge(2 + i, token_node[x], capacity=cap)
    for x, cap in enumerate(qcap):
        if cap > 0:
            graph.add_edge(token_node[x], sink, capacity=int(cap * scale))
    _, flow = nx.maximum_flow(graph, source, sink, flow_func=edmonds_karp)
    conv = (lambda v: Fraction(v, scale)) if exact else (lambda v: v / scale)
    flows = {tup: {x: conv(flow[2 + i][token_node[x]]) for x in sorted(set(tup)) if flow[2 + i][token_node[x]] > 0}
             for i, tup in enumerate(tuples)}
    return _solution(flows, q)


def _merge_rows(member: np.ndarray, reject: np.ndarray,
                probs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tuples with equal rows (``member`` and ``reject``) merged into one, their probabilities added. The dual
    sees a tuple only through its row, and i.i.d. tuples repeat rows (one per order): 225 rows become 120 at
    V = 15, k = 2, and 3,375 become 680 at k = 3. Rows are sorted on exact binary codes of 52 columns each,
    ``reject`` (0 or 1) as bit 52 of the first: codes stay below 2^53."""
    keys = [member[:, i:i + 52] @ 2.0 ** np.arange(min(52, member.shape[1] - i))
            for i in range(0, member.shape[1], 52)]
    keys[0] = keys[0] + reject * 2.0 ** 52
    order = np.lexsort(keys)
    ordered = np.stack(keys)[:, order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (ordered[:, 1:] != ordered[:, :-1]).any(axis=0)
    rows = order[first]
    return member[rows], reject[rows], np.bincount(np.cumsum(first) - 1, weights=probs[order])


def _projected_newton(probs: np.ndarray, member: np.ndarray, const: np.ndarray, q: np.ndarray,
                      upper: np.ndarray) -> np.ndarray | None:
    """``argmin Σ_r probs_r log(const_r + member_r·e^θ) − q·θ`` over ``−GR_BOUND ≤ θ ≤ upper``, from
    ``θ = 0``; ``None`` if the projected gradient does not reach :data:`GR_NEWTON_TOLERANCE` within the
    iteration cap.

    Bertsekas' projected Newton. Coordinates within ``ε`` of a bound whose gradient points outwards take a
    gradient step, the others a Newton step on the analytic Hessian ``diag(flow) − Σ_r probs_r v_r v_rᵀ/Z_r²``
    (``v_r = member_r ∘ e^θ``) plus a relative Levenberg term: the Hessian is singular along some directions
    (a constant added to all outside ``θ``; ``θ`` running off towards a bound). A free coordinate at a bound
    that the Newton step pushes outwards is pinned and the step solved again. Armijo backtracking follows
    the projected arc, trying the first breakpoint before halving; a full step that beats its quadratic model
    (an exponential tail) is doubled while that pays. Changes of the objective are evaluated directly
    (``expm1``, ``log1p``), not as differences of two sums of size ``log Z``, so that the line search still
    resolves them near the tolerance.
    """
    size = len(q)
    lower = -GR_BOUND
    theta, weights = np.zeros(size), np.ones(size)
    z = const + member.sum(axis=1)
    member_t = np.ascontiguousarray(member.T)

    def move(alpha: float) -> tuple[np.ndarray, np.ndarray, float]:
        """The point ``alpha`` along the projected arc, the step to it, and the objective's change."""
        trial = np.minimum(np.maximum(theta + alpha * direction, lower), upper)
        step = trial - theta
        dz = member @ (weights * np.expm1(step))
        return trial, step, float(probs @ np.log1p(dz / z) - q @ step)

    for _ in range(GR_NEWTON_ITERATIONS):
        share = probs / z
        flow = weights * (member_t @ share)
        grad = flow - q
        gap = float(np.abs(np.minimum(np.maximum(theta - grad, lower), upper) - theta).max())
        if gap <= GR_NEWTON_TOLERANCE:
            return theta
        hess = (member_t * (share / z)) @ member
        hess *= -weights[:, None] * weights
        hess.flat[::size + 1] += flow * (1 + 1e-12)  # diag(flow) and the Levenberg term
        band = min(1e-3, gap)
        near_lower, near_upper = theta <= lower + band, theta >= upper - band
        pinned = (near_lower & (grad > 0)) | (near_upper & (grad < 0))
        target = -grad
        while True:
            system = hess * np.outer(~pinned, ~pinned)
            system.flat[::size + 1] += pinned
            _, direction, info = dposv(system, target)
            if info:
                return None
            out = ~pinned & ((near_lower & (direction < 0)) | (near_upper & (direction > 0)))
            if not out.any():
                break
            pinned |= out
            target[out] = 0.0
        alpha = 1.0
        for _ in range(GR_LINE_SEARCH_STEPS):
            trial, step, change = move(alpha)
            descent = float(grad @ step)
            if change <= 1e-4 * descent:
                break
            if alpha == 1.0:
                with np.errstate(divide="ignore", invalid="ignore"):
                    reach = (np.where(direction > 0, upper, lower) - theta) / direction
                first = float(reach[~pinned & (reach > 0)].min(initial=1.0))
                alpha = first if first < 1 else 0.5
            else:
                alpha /= 2
        else:
            return None
        if alpha == 1.0 and change < 0.6 * descent:
            while alpha < 64:
                longer, _, longer_change = move(2 * alpha)
                if not longer_change < change:
                    break
                trial, change, alpha = longer, longer_change, 2 * alpha
        theta = trial
        weights = np.exp(theta)
        z = const + member @ weights
    return None


def _lbfgsb_dual(probs: np.ndarray, member: np.ndarray, reject: np.ndarray, q: np.ndarray,
                 upper: np.ndarray) -> np.ndarray:
    """The dual by scipy's L-BFGS-B from ``θ = 0``: :func:`gr_dual`'s fallback."""
    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        weights = np.exp(theta)
        z = reject + member @ weights
        value = float(probs @ np.log(z) - q @ theta)
        grad = (member * weights).T @ (probs / z) - q
        return value, grad

    bounds = [(-GR_BOUND, float(u)) for u in upper]
    result = minimize(objective, np.zeros(len(q)), jac=True, method="L-BFGS-B", bounds=bounds,
                      options={"gtol": 1e-13, "ftol": 1e-15, "maxiter": 20000})
    return result.x


def gr_dual(probs: np.ndarray, member: np.ndarray, reject: np.ndarray, q: np.ndarray,
            inner: np.ndarray) -> np.ndarray:
    """GR's ``θ``: the minimiser of ``Σ_X P(X) log(reject_X + member_X·e^θ) − q·θ`` over ``|θ| ≤ GR_BOUND``
    with ``θ ≤ 0`` off ``inner`` (one row per tuple: ``member`` 0/1, ``reject`` 1 inside ``H*``, else 0).

    Coordinates the objective is monotone in are put at their bound: undrafted tokens (term ``−q_y θ_y``)
    and drafted ones with ``q_y ≤ 0`` (gradient = flow − q > 0). :func:`_projected_newton` solves for the
    others on merged rows; rows inside ``H*`` touch only inner tokens and the others only outside ones, so
    its Hessian is block diagonal. Should Newton stop short, L-BFGS-B solves the whole problem instead.
    """
    upper = np.where(inner, GR_BOUND, 0.0)  # outside: the dual of "flow ≤ q" with no reject option, θ ≤ 0
    member, reject, probs = _merge_rows(member, reject, probs)
    drafted = member.any(axis=0)
    theta = np.where(q > 0, upper, np.where(drafted | (q < 0), -GR_BOUND, 0.0))
    free = drafted & (q > 0)
    if free.any():
        const = reject + member[:, ~free] @ np.exp(theta[~free])
        solved = _projected_newton(probs, member[:, free], const, q[free], upper[free])
        if solved is None:
            return _lbfgsb_dual(probs, member, reject, q, upper)
        theta[free] = solved
    return theta


@row_cache(256)  # a k = 3 solution holds V^3 tuples: a larger cache costs gigabytes
def gr_flow(p: Row, q: Row, k: int, law: str) -> FlowSolution:
    """The GR reconstruction described in the module docstring."""
    exact = isinstance(p[0], Fraction)
    laws = tuple_law(p, k, law)
    _, inner = alpha_star(p, q, k, law)
    vocab = len(q)
    index = np.array(list(laws))
    inside = np.zeros(vocab, dtype=bool)
    inside[list(inner)] = True
    member = np.zeros((len(index), vocab))
    member[np.arange(len(index))[:, None], index] = 1.0
    reject = inside[index].all(axis=1)
    member[np.ix_(~reject, inside)] = 0.0  # a tuple with an outside token routes to those only
    theta = gr_dual(np.array([float(pr) for pr in laws.values()]), member, reject.astype(float),
                    np.array([float(x) for x in q]), inside)
    conv = Fraction if exact else float
    weights = [conv(float(w)) for w in np.exp(theta)]
    flows: dict[Tuple_, dict[int, Number]] = {}
    for tup, prob in laws.items():
        tokens = sorted(set(tup))
        rejects = inner.issuperset(tokens)
        if not rejects:
            tokens = [x for x in tokens if x not in inner]
        z = (conv(1) if rejects else conv(0)) + total([weights[x] for x in tokens])
        flows[tup] = {x: prob * weights[x] / z for x in tokens}
    inflow = [conv(0)] * vocab
    for per in flows.values():
        for x, f in per.items():
            inflow[x] += f
    # Clip the optimiser's overshoot, so that capacities hold exactly (a capacity a rounding below 0 — LV's
    # dummy 1 − A_t in floats — with no inflow needs nothing).
    factors = {x: q[x] / inflow[x] for x in range(vocab) if inflow[x] > q[x] and inflow[x] > 0}
    for per in flows.values():
        for x in per:
            if x in factors:
                per[x] = per[x] * factors[x]
    return _solution(flows, q)
