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
  ``θ_y ≤ 0`` for outside tokens (L-BFGS-B); its gradient is expected flow minus ``q``, so at the optimum
  inside tokens are saturated and outside tokens are within capacity, saturated where ``θ_y < 0`` (without
  the sign bound the outside part is unbounded below whenever outside capacity exceeds outside mass). Any residual overshoot is clipped (flows into an over-full token are
  scaled down, the excess rejected), so capacities hold exactly and GR is lossless exactly; only its
  acceptance is approximate. Stated tolerance: acceptance ≥ ``α* − 1e-6`` (checked in the tests).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import reduce
from typing import Sequence

import networkx as nx
import numpy as np
from scipy.optimize import minimize

from ..errors import InvalidParameterError
from ..numeric import Number, row_cache, normalise, positive_part, total

Row = tuple[Number, ...]
Tuple_ = tuple[int, ...]
TUPLE_LAWS = ("iid", "without-replacement")
GR_BOUND = 30.0
GR_TOLERANCE = 1e-6


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
    """An exact maximum flow of the tuple → token network (networkx preflow-push on integer capacities)."""
    exact = isinstance(p[0], Fraction)
    laws = tuple_law(p, k, law)
    caps = {tup: Fraction(pr) for tup, pr in laws.items()}
    qcap = [Fraction(x) for x in q]
    scale = _lcm([c.denominator for c in caps.values()] + [c.denominator for c in qcap])
    graph = nx.DiGraph()
    for tup, cap in caps.items():
        graph.add_edge("s", ("X", tup), capacity=int(cap * scale))
        for x in sorted(set(tup)):
            graph.add_edge(("X", tup), ("y", x), capacity=int(cap * scale))
    for x, cap in enumerate(qcap):
        if cap > 0:
            graph.add_edge(("y", x), "t", capacity=int(cap * scale))
    graph.add_node("t")
    _, flow = nx.maximum_flow(graph, "s", "t")
    conv = (lambda v: Fraction(v, scale)) if exact else (lambda v: v / scale)
    flows = {tup: {y: conv(f) for (_, y), f in flow[("X", tup)].items() if f > 0} for tup in laws}
    return _solution(flows, q)


@row_cache(2048)
def gr_flow(p: Row, q: Row, k: int, law: str) -> FlowSolution:
    """The GR reconstruction described in the module docstring."""
    exact = isinstance(p[0], Fraction)
    laws = tuple_law(p, k, law)
    _, inner = alpha_star(p, q, k, law)
    vocab = len(q)
    tuples = list(laws)
    probs = np.array([float(laws[t]) for t in tuples])
    member = np.zeros((len(tuples), vocab))
    reject = np.zeros(len(tuples))
    for r, tup in enumerate(tuples):
        tokens = set(tup)
        if tokens <= inner:
            reject[r] = 1.0
            member[r, list(tokens)] = 1.0
        else:
            member[r, list(tokens - inner)] = 1.0
    qf = np.array([float(x) for x in q])

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        weights = np.exp(theta)
        z = reject + member @ weights
        value = float(probs @ np.log(z) - qf @ theta)
        grad = (member * weights).T @ (probs / z) - qf
        return value, grad

    # Outside tokens carry the dual of "flow ≤ q" with no reject option: θ ≤ 0 (0 where unsaturated).
    bounds = [(-GR_BOUND, GR_BOUND if y in inner else 0.0) for y in range(vocab)]
    result = minimize(objective, np.zeros(vocab), jac=True, method="L-BFGS-B", bounds=bounds,
                      options={"gtol": 1e-13, "ftol": 1e-15, "maxiter": 20000})
    conv = Fraction if exact else float
    weights = [conv(float(w)) for w in np.exp(result.x)]
    flows: dict[Tuple_, dict[int, Number]] = {}
    for r, tup in enumerate(tuples):
        tokens = [x for x in sorted(set(tup)) if member[r, x]]
        z = (conv(1) if reject[r] else conv(0)) + total([weights[x] for x in tokens] or [conv(0)])
        flows[tup] = {x: laws[tup] * weights[x] / z for x in tokens}
    inflow = [conv(0)] * vocab
    for per in flows.values():
        for x, f in per.items():
            inflow[x] += f
    for x in range(vocab):
        if inflow[x] > q[x] and inflow[x] > 0:  # clip the optimiser's overshoot: capacities hold exactly
            # (a capacity a rounding below 0 — LV's dummy 1 − A_t in floats — with no inflow needs nothing)
            factor = q[x] / inflow[x]
            for per in flows.values():
                if x in per:
                    per[x] = per[x] * factor
    return _solution(flows, q)
