"""Single-step rules as flow networks (docs/rules.md; Cha et al., AdaptFM at ICML 2026, §3, App. C, E.2): the tuple
laws, the optimum ``α*``, and the flow-defined rules OPT (:func:`opt_flow`) and GR (:func:`gr_flow`)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import reduce
from typing import Sequence

import numpy as np

from ..drafting.shapes import top_tokens
from ..errors import InvalidParameterError
from ..numeric import Number, is_rational, normalise, positive_part, rational, row_cache, total
from .gr_solver import GR_BOUND, gr_dual  # noqa: F401  (GR_BOUND: part of GR's definition)
from .spechub import hub_pairs

Row = tuple[Number, ...]
Tuple_ = tuple[int, ...]
TUPLE_LAWS = ("iid", "without-replacement", "greedy-k", "almost-greedy", "hub")
GREEDY_LAWS = ("greedy-k", "almost-greedy")  # one scheme, two names (docs/drafting.md)
GR_TOLERANCE = 1e-6


def _zero(row: Row) -> Number:
    return row[0] * 0


@row_cache(4096)
def tuple_law(p: Row, k: int, law: str) -> dict[Tuple_, Number]:
    """``P(X)`` for every candidate tuple of positive probability. Without replacement and under greedy drafting
    (``greedy-k`` = ``almost-greedy``), a node whose draft supports fewer than ``k`` tokens gets that many candidates
    (the short-support rule of docs/drafting.md)."""
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
    if law in GREEDY_LAWS:  # Hu et al.'s greedy drafting: the top k − 1 tokens, then one from the rest
        fixed = tuple(top_tokens(p, k - 1))
        rest = [x for x in support if x not in fixed]
        if not rest:
            return {fixed: p[support[0]] * 0 + 1}
        left = total([p[x] for x in rest])
        return {fixed + (x,): p[x] / left for x in rest}
    if law == "hub":  # SpecHub's pairs (simulator/verifiers/spechub.py): two drafts, one under short support
        pairs = hub_pairs(p)
        drafted = len(next(iter(pairs)))
        if k != drafted:
            raise InvalidParameterError("branching", f"hub drafting drafts {drafted} children from this row, not {k}")
        return pairs
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
    """A feasible flow: per tuple, ``{token: f(X → token)}``; the outgoing flow; the residual.

    At a node with ``k`` candidates the network is source → tuple ``X`` (capacity ``P(X)``, the tuple law) → token
    ``x ∈ set(X)`` → sink (capacity ``q(x)``). A rule's flow ``f(X → x)`` is ``P(X)·P(accept a candidate holding x |
    X)``; the rule is lossless iff its outflow ``Σ_X f(X → x)`` never exceeds ``q``, and its residual is
    ``norm(q − outflow)``.
    """

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
    return int(reduce(lambda a, b: a * b // math.gcd(a, b), values, 1))  # an int: gmpy2's mpz / mpz is an mpfr


@row_cache(2048)
def opt_flow(p: Row, q: Row, k: int, law: str) -> FlowSolution:
    """An exact maximum flow of the tuple → token network on integer capacities (rationals, or floats as the
    binary fractions they are, scaled by a common denominator), by networkx: OPT. Rationals in give rationals out,
    and its acceptance equals ``α*``.

    A maximum flow is not unique and the rule's law depends on which one it is, so the choice is pinned:
    Edmonds–Karp (shortest augmenting paths, found in a fixed node order) on integer node labels, whose
    iteration order does not depend on Python's string hashing. Its choices follow which residual capacities
    are positive and their minima, so a float instance takes the path its exact twin takes wherever no
    rounding-level residual appears, and such a residual carries a rounding-level flow."""
    import networkx as nx  # here: only this rule needs it, and it costs every CLI start 0.2 s otherwise
    from networkx.algorithms.flow import edmonds_karp

    exact = is_rational(p[0])
    laws = tuple_law(p, k, law)
    caps = {tup: rational(pr) for tup, pr in laws.items()}
    qcap = [rational(x) for x in q]
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
    conv = (lambda v: rational(v, scale)) if exact else (lambda v: v / scale)
    flows = {tup: {x: conv(flow[2 + i][token_node[x]]) for x in sorted(set(tup)) if flow[2 + i][token_node[x]] > 0}
             for i, tup in enumerate(tuples)}
    return _solution(flows, q)


@row_cache(256)  # a k = 3 solution holds V^3 tuples: a larger cache costs gigabytes
def gr_flow(p: Row, q: Row, k: int, law: str) -> FlowSolution:
    """GR (Global Resolution, Thomas & Pal, ICLR 2026, arXiv:2511.15898): the paper's criterion, the optimal transport
    for i.i.d. drafts from one draft model, through a convex program of specproof's own in ``V`` variables (where it
    differs from the paper: docs/rules.md, "GR: the paper and tv-gr"). ``H*`` is the smallest minimiser of ``α*``
    (:func:`alpha_star`); tuples inside ``H*`` route ``P(X)·e^{θ_j}/(1 + Σ_{i∈set X} e^{θ_i})`` to token ``j`` (reject
    weight 1), tuples with a token outside ``H*`` route ``P(X)·e^{θ_j}/Σ_{i∈set X∖H*} e^{θ_i}`` to their outside tokens
    (no reject).

    ``θ`` minimises the convex ``Σ_X P(X) log Z_X(θ) − Σ_y q(y) θ_y`` over ``|θ| ≤ 30`` with ``θ_y ≤ 0`` for outside
    tokens; its gradient is expected flow minus ``q``, so at the optimum inside tokens are saturated and outside tokens
    are within capacity, saturated where ``θ_y < 0`` (without the sign bound the outside part is unbounded below
    whenever outside capacity exceeds outside mass). It is solved by :func:`.gr_solver.gr_dual`: projected Newton with
    the analytic Hessian, on tuples merged by token set, to a projected gradient of 1e-12 (scipy's L-BFGS-B as the
    fallback should Newton stop short). Any residual overshoot is clipped (flows into an over-full token are scaled
    down, the excess rejected), so capacities hold exactly and GR is lossless exactly; only its acceptance is
    approximate: at least ``α* − 1e-6`` (:data:`GR_TOLERANCE`, checked in the tests)."""
    exact = is_rational(p[0])
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
    conv = rational if exact else float
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
