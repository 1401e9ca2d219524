"""Batched Monte Carlo rounds in numpy: many trials of one configuration at once.

Each batched path reproduces the shared implementation step for step — the same uniforms (each trial's
counter stream, :func:`simulator.randomness.counter_uniform`, computed as the trial reads them), consumed in
the same order, through the same float64 operations in the same order (row sums left to right; a draw is the
first running sum above ``u·Σw``) — so for every trial it returns exactly what
:func:`simulator.montecarlo.run_trials` returns on the reference path; the tests check this on every
supported verifier and topology.

Supported: i.i.d. drafting on any topology; token verification lifting SpS, RRS, K-SEQ and GR (``tv-sps``,
``tv-rrs``, ``tv-kseq``, ``tv-gr``), Layer Verification lifting SpS, RRS, K-SEQ and GR (``lv-sps``, ``lv-rrs``,
``lv-kseq``, ``lv-gr``), Traversal (``trv``, ``trv-iid``), and GBV on chains and multi-chains. Everything else
(the ``bug-*`` controls, other drafting schemes) runs on the reference path.
Two computations differ in form: LV's outgoing flow is summed in closed form here (see :func:`_outflow`) where
the reference sums over every candidate tuple, and GR's problems (per context for ``tv-gr``, per node and trial
for ``lv-gr``) are solved as stacks (:mod:`simulator.batched_gr`) on rows in another order; each agrees with
the reference to rounding (~1e-16 for the sums; GR's ``θ`` to its solver's tolerance), so a decision could
differ only if a uniform fell that close to its threshold — never observed in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InvalidParameterError
from .array_ops import categorical, ipow, kseq_rho, positive_residual, ratio, row_sum
from .models import ModelPair
from .randomness import counter_uniform
from .trees import Topology
from .batched_gr import lv_gr_node
from .context_rows import ContextRows

BATCHED = ("tv-sps", "tv-rrs", "tv-kseq", "tv-gr", "lv-sps", "lv-rrs", "lv-kseq", "lv-gr", "trv", "trv-iid", "gbv")


def has_batched_path(name: str, drafting: str, vocab: int, topology: Topology | None = None) -> bool:
    if name == "gbv" and (topology is None or topology.name not in ("multi-chain", "chain")):
        return False
    return name in BATCHED and drafting == "iid" and vocab >= 2


class _Stream:
    """Each trial's uniforms, read at a per-trial position and computed as they are read."""

    def __init__(self, seed: int, trials: np.ndarray) -> None:
        self.seed, self.trials = seed, np.asarray(trials, dtype=np.uint64)
        self.pos = np.zeros(len(trials), dtype=np.uint64)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The next uniform of each trial in ``rows`` (indices into the batch)."""
        out = counter_uniform(self.seed, self.trials[rows], self.pos[rows])
        self.pos[rows] += np.uint64(1)
        return out


def _kseq_lookup(rows: ContextRows, ctx: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rho = np.empty((len(ctx), 1))
    residual = np.empty((len(ctx), rows.vocab))
    for count in np.unique(k):
        at = k == count
        table_rho, table_res = rows.kseq(int(count))
        rho[at], residual[at] = table_rho[ctx[at]], table_res[ctx[at]]
    return rho, residual


def _draft_iid(topology: Topology, rows: ContextRows, stream: _Stream) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and context ids of every node (``simulator.drafting`` order: children in BFS order)."""
    batch, n = len(stream.pos), len(topology.parents)
    everyone = np.arange(batch)
    tokens = np.zeros((batch, n), dtype=np.int64)
    ctx = np.zeros((batch, n), dtype=np.int64)
    for v in range(1, n):
        par = topology.parents[v]
        tokens[:, v] = rows.sample("p", ctx[:, par], stream.take(everyone))
        ctx[:, v] = ctx[:, par] * rows.vocab + tokens[:, v] + 1
    return tokens, ctx


def _tv_step(rule: str, cands: np.ndarray, ncand: np.ndarray, p: np.ndarray, q: np.ndarray, stream: _Stream,
             rows: np.ndarray, kseq: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One single-step rule (SpS, RRS or K-SEQ plan) at the current node of each trial in ``rows``; K-SEQ's
    ``ρ*`` and residual come precomputed per context (``kseq``).

    Returns the accepted candidate position (−1 for none) and the residual to correct from.
    """
    m = len(rows)
    if rule == "sps":
        ncand = np.minimum(ncand, 1)
    accepted = np.full(m, -1)
    target = q.copy()
    if rule == "kseq":
        rho, residual = kseq[0][:, 0], kseq[1]
    for i in range(cands.shape[1]):
        live = (accepted < 0) & (i < ncand)
        if not live.any():
            break
        idx = np.flatnonzero(live)
        x = cands[idx, i]
        if rule == "kseq":
            prob = ratio(q[idx, x], rho[idx] * p[idx, x])
        else:
            prob = ratio(target[idx, x], p[idx, x])
        u = stream.take(rows[idx])
        ok = (prob == 1) | (u < prob)
        accepted[idx[ok]] = i
        if rule == "rrs":
            rej = idx[~ok]
            target[rej] = positive_residual(target[rej] - p[rej], target[rej])
    if rule == "sps":
        target = positive_residual(q - p, q)
    elif rule == "kseq":
        target = residual
    return accepted, target


@dataclass(frozen=True)
class _Shape:
    """The static structure of a topology, as arrays: children (padded), child counts, depths, levels."""

    kids: list[list[int]]
    kid_table: np.ndarray
    kid_count: np.ndarray
    depth: np.ndarray

    @classmethod
    def of(cls, topology: Topology) -> "_Shape":
        n = len(topology.parents)
        kids = [[w for w in range(n) if topology.parents[w] == v] for v in range(n)]
        width = max(1, max(len(k) for k in kids))
        depth = np.zeros(n, dtype=np.int64)
        for v in range(1, n):
            depth[v] = depth[topology.parents[v]] + 1
        return cls(kids, np.array([k + [0] * (width - len(k)) for k in kids], dtype=np.int64),
                   np.array([len(k) for k in kids]), depth)

    def levels(self) -> list[list[int]]:
        return [[v for v in range(len(self.kids)) if self.depth[v] == t] for t in range(int(self.depth.max()) + 1)]


def _token_verify(rule: str, shape: _Shape, rows: ContextRows, stream: _Stream, tokens: np.ndarray,
                  ctx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token verification (``simulator.verifiers.token_tree``): accepted node and the context id of
    ``path + (y,)`` for every trial."""
    batch, vocab = len(tokens), rows.vocab
    node = np.zeros(batch, dtype=np.int64)
    final_ctx = np.zeros(batch, dtype=np.int64)
    pending = np.ones(batch, dtype=bool)
    while pending.any():
        idx = np.flatnonzero(pending)
        v = node[idx]
        c = ctx[idx, v]
        count = shape.kid_count[v]
        leaf = count == 0
        if leaf.any():
            at = idx[leaf]
            y = rows.sample("q", c[leaf], stream.take(at))
            final_ctx[at] = c[leaf] * vocab + y + 1
            pending[at] = False
        inner = idx[~leaf]
        if len(inner) == 0:
            continue
        ci = c[~leaf]
        cand_nodes = shape.kid_table[v[~leaf]]
        cands = np.take_along_axis(tokens[inner], cand_nodes, axis=1)
        if rule == "gr":
            accepted, residual = _gr_step(rows, ci, cands, count[~leaf], stream, inner)
        else:
            per_context = _kseq_lookup(rows, ci, count[~leaf]) if rule == "kseq" else None
            accepted, residual = _tv_step(rule, cands, count[~leaf], rows.p[ci], rows.q[ci], stream, inner,
                                          per_context)
        moved = accepted >= 0
        node[inner[moved]] = cand_nodes[moved, accepted[moved]]
        stop = inner[~moved]
        if len(stop):
            y = categorical(residual[~moved], stream.take(stop))
            final_ctx[stop] = ci[~moved] * vocab + y + 1
            pending[stop] = False
    return node, final_ctx


def _gr_step(rows: ContextRows, ctx: np.ndarray, cands: np.ndarray, ncand: np.ndarray, stream: _Stream,
             batch_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GR at the current node: one categorical over the flows and the reject weight."""
    accepted = np.full(len(ctx), -1)
    residual = np.empty((len(ctx), rows.vocab))
    for k in np.unique(ncand):
        at = np.flatnonzero(ncand == k)
        code = np.zeros(len(at), dtype=np.int64)
        for i in range(int(k)):
            code = code * rows.vocab + cands[at, i]
        weights, residual[at] = rows.gr_step(int(k), ctx[at], code)
        choice = categorical(weights, stream.take(batch_rows[at]))
        accepted[at] = np.where(choice < k, choice, -1)
    return accepted, residual


def _plan_acceptance(rule: str, cands: np.ndarray, p: np.ndarray, q: np.ndarray,
                     rho: np.ndarray | None) -> np.ndarray:
    """``P(accept position i | X)`` of the RRS or K-SEQ plan (``single_step.plan_acceptance``), ``[m, k]``."""
    m, k = cands.shape
    rows_ = np.arange(m)
    out = np.empty((m, k))
    target = q
    reach = np.ones(m)
    for i in range(k):
        x = cands[:, i]
        if rule == "kseq":
            prob = ratio(q[rows_, x], rho * p[rows_, x])
        else:
            prob = ratio(target[rows_, x], p[rows_, x])
            target = positive_residual(target - p, target)
        out[:, i] = prob if i == 0 else reach * prob
        reach = (1 - prob) if i == 0 else reach * (1 - prob)
    return out


def _outflow(rule: str, p: np.ndarray, q: np.ndarray, k: int, rho: np.ndarray | None) -> np.ndarray:
    """Σ_X f(X → x) in closed form under i.i.d. tuples (the reference sums the same over every tuple):
    RRS ``Σ_{i<k} reach_i min(p, r_i)`` with ``r_{i+1} = norm((r_i − p)_+)``, ``reach_{i+1} = reach_i (1 − Σ
    min(p, r_i))``; K-SEQ ``Σ_{i<k} (1 − β)^i min(p, q/ρ)`` with ``β = Σ min(p, q/ρ)``."""
    out = np.zeros_like(q)
    if rule == "kseq":
        capped = np.minimum(p, q / rho[:, None])
        miss = 1 - row_sum(capped)
        reach = np.ones(len(p))
        for _ in range(k):
            out = out + reach[:, None] * capped
            reach = reach * miss
        return out
    target, reach = q, np.ones(len(p))
    for _ in range(k):
        capped = np.minimum(p, target)
        out = out + reach[:, None] * capped
        reach = reach * (1 - row_sum(capped))
        target = positive_residual(target - p, target)
    return out


def _node_acceptance(rule: str, p: np.ndarray, q: np.ndarray, cands: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The single-step rule at LV nodes with transformed rows ``p``, ``q`` and candidates ``cands`` ``[m, k]``:
    per candidate position, the rule's acceptance of its token (summed over the positions holding it, as
    ``token_acceptance``'s dict: first occurrence, then in order), and the outgoing flow ``[m, V+1]``."""
    k = cands.shape[1]
    if rule == "gr":
        return lv_gr_node(p, q, cands)
    rho = kseq_rho(p, q, np.full(len(p), k)) if rule == "kseq" else None
    accept = _plan_acceptance(rule, cands, p, q, rho)
    total_accept = np.empty_like(accept)
    for i in range(k):
        same = cands == cands[:, [i]]
        total = np.where(same[:, 0], accept[:, 0], 0.0)
        for j in range(1, k):
            total = np.where(same[:, j], total + accept[:, j], total)
        total_accept[:, i] = total
    return total_accept, _outflow(rule, p, q, k, rho)


def _layer_verify(rule: str, shape: _Shape, rows: ContextRows, stream: _Stream, tokens: np.ndarray,
                  ctx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Layer Verification (``simulator.verifiers.layer``): forward scores, backward sampling."""
    batch, vocab, n = len(tokens), rows.vocab, len(shape.kids)
    scores = np.zeros((batch, n))
    scores[:, 0] = 1.0
    flows = np.zeros((batch, n, vocab))
    levels = shape.levels()
    for level in levels:
        inner = [v for v in level if shape.kids[v]]
        if not inner:
            continue
        mass = np.zeros(batch)
        for v in inner:
            mass = mass + scores[:, v]
        # The level's nodes with the same number of candidates are solved together: one stack per level and k
        # (for GR, a node's problem may then be merged with a sibling's drafted with the same token).
        jobs = [(v, np.flatnonzero((mass > 0) & (scores[:, v] != 0)), shape.kids[v][:1 if rule == "sps" else None])
                for v in inner]
        jobs = [job for job in jobs if len(job[1])]
        for k in sorted({len(kids) for _, _, kids in jobs}):
            group = [job for job in jobs if len(job[2]) == k]
            live = np.concatenate([at for _, at, _ in group])
            node = np.concatenate([np.full(len(at), v) for v, at, _ in group])
            a = mass[live]
            lam = scores[live, node] / a
            c = ctx[live, node]
            p_ext = np.concatenate([rows.p[c], np.zeros((len(live), 1))], axis=1)
            q_ext = np.concatenate([a[:, None] * rows.q[c], (1 - a)[:, None]], axis=1)
            cands = np.concatenate([tokens[np.ix_(at, kids)] for _, at, kids in group])
            total_accept, outflow = _node_acceptance(rule, p_ext, q_ext, cands)
            same = cands[:, :, None] == cands[:, None, :]
            share = lam[:, None] * total_accept / same.sum(axis=2)  # a duplicated token's acceptance, split
            start = 0
            for v, at, kids in group:
                part = slice(start, start + len(at))
                for i, w in enumerate(kids):
                    scores[at, w] = share[part, i]
                flows[at, v] = lam[part, None] * outflow[part, :vocab]
                start += len(at)
    node = np.full(batch, -1, dtype=np.int64)
    final_ctx = np.zeros(batch, dtype=np.int64)
    for level in reversed(levels):
        open_ = np.flatnonzero(node < 0)
        if len(open_) == 0:
            break
        weights = np.empty((len(open_), len(level) + 1))
        for j, v in enumerate(level):
            weights[:, j] = np.maximum(scores[open_, v] - row_sum(flows[open_, v]), 0.0)
        level_mass = np.zeros(len(open_))
        for v in level:
            level_mass = level_mass + scores[open_, v]
        weights[:, -1] = np.maximum(1 - level_mass, 0.0)
        has_mass = row_sum(weights) > 0
        if level[0] != 0:
            open_, weights = open_[has_mass], weights[has_mass]
            choice = categorical(weights, stream.take(open_))
        else:
            choice = np.zeros(len(open_), dtype=np.int64)
            if has_mass.any():
                choice[has_mass] = categorical(weights[has_mass], stream.take(open_[has_mass]))
        picked = choice < len(level)
        at = open_[picked]
        v = np.array(level)[choice[picked]]
        c = ctx[at, v]
        a = scores[at, v]
        res = positive_residual(a[:, None] * rows.q[c] - flows[at, v], rows.q[c])
        y = categorical(res, stream.take(at))
        node[at] = v
        final_ctx[at] = c * vocab + y + 1
    return node, final_ctx


def _merge(shape: _Shape, tokens: np.ndarray, merge: bool) -> np.ndarray:
    """``rep[b, v]``: the node that represents ``v`` in the tree TRV traverses — with ``merge``, the first
    node (in BFS order) under the same merged parent with the same token (``traversal._trie``: its groups
    appear in that order, and the rows of a group are its first member's, all members sharing the path)."""
    batch, n = tokens.shape
    rep = np.tile(np.arange(n), (batch, 1))
    if not merge:
        return rep
    parents = [-1] + [next(u for u in range(n) if w in shape.kids[u]) for w in range(1, n)]
    for w in range(1, n):
        for earlier in range(1, w):
            same = (rep[:, parents[earlier]] == rep[:, parents[w]]) & (tokens[:, earlier] == tokens[:, w]) & \
                (rep[:, earlier] == earlier) & (rep[:, w] == w)
            rep[same, w] = earlier
    return rep


class _RowStore:
    """Rows written as they are first needed, next to each other (writes into a dense ``[B, n, V]`` array would
    touch a fresh page almost every time). ``capacity`` rows are reserved, untouched until written."""

    def __init__(self, vocab: int, capacity: int) -> None:
        self.target, self.draft = np.empty((capacity, vocab)), np.empty((capacity, vocab))
        self.used = 0

    def allocate(self, count: int) -> np.ndarray:
        """Indices of ``count`` new rows."""
        self.used += count
        return np.arange(self.used - count, self.used)


def _traversal_verify(merge: bool, shape: _Shape, rows: ContextRows, stream: _Stream, tokens: np.ndarray,
                      ctx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Traversal Verification (``simulator.verifiers.traversal``, DFS post-order), duplicates merged (``trv``)
    or kept apart with the draft unchanged (``trv-iid``)."""
    batch, n, vocab = tokens.shape[0], tokens.shape[1], rows.vocab
    parents = np.array([-1] + [next(u for u in range(n) if w in shape.kids[u]) for w in range(1, n)])
    rep = _merge(shape, tokens, merge)
    alive = rep == np.arange(n)  # only representatives take part
    tparent = np.where(alive, rep[:, np.maximum(parents, 0)], -1)  # the trie parent (a representative)
    tparent[:, 0] = -1
    everyone = np.arange(batch)
    # A merged node's rows are its first member's with children; members share the path, hence the rows.
    # A node's target and draft rows are the model's until a child of it is rejected; they are copied then into
    # a compact store (``slot[b, u]`` its row there, −1 before), so most nodes are read only an entry at a time.
    slot = np.full((batch, n), -1, dtype=np.int64)
    stored = _RowStore(vocab, batch * max(1, int((shape.kid_count > 0).sum())))  # a row per trial and parent
    rate = np.zeros((batch, n))
    rate[:, 0] = 1.0

    def current(b: np.ndarray, u: np.ndarray, store: np.ndarray, model: np.ndarray) -> np.ndarray:
        """The target (``stored.target``, ``rows.q``) or draft rows of nodes ``u`` of trials ``b``: ``[m, V]``."""
        at = slot[b, u]
        return np.where((at >= 0)[:, None], store[at], model[ctx[b, u]])

    def refresh(todo: np.ndarray, below: np.ndarray) -> None:
        """Rates of the strict descendants (``below[b]``'s subtree) of the trials in ``todo``, parents first."""
        inside = np.zeros((len(todo), n), dtype=bool)
        for w in range(1, n):
            par = tparent[todo, w]
            ok = alive[todo, w] & (par >= 0)
            inside[:, w] = ok & ((par == below) | inside[np.arange(len(todo)), np.maximum(par, 0)])
            at = np.flatnonzero(inside[:, w])
            if len(at):
                b, u, x = todo[at], par[at], tokens[todo[at], w]
                row, c = slot[b, u], ctx[b, u]
                q_x = np.where(row >= 0, stored.target[row, x], rows.q[c, x])
                p_x = np.where(row >= 0, stored.draft[row, x], rows.p[c, x])
                rate[b, w] = ratio(rate[b, u] * q_x, p_x)

    refresh(everyone, np.zeros(batch, dtype=np.int64))
    node = np.full(batch, -1, dtype=np.int64)
    final_ctx = np.zeros(batch, dtype=np.int64)
    live = everyone
    while len(live):
        leaf = np.zeros(len(live), dtype=np.int64)
        for _ in range(shape.depth.max()):
            kids = alive[live] & (tparent[live] == leaf[:, None])
            has = kids.any(axis=1)
            leaf = np.where(has, np.argmax(kids, axis=1), leaf)
        prob = rate[live, leaf]
        u = stream.take(live)
        ok = (prob == 1) | (u < prob)
        parent = tparent[live, leaf]
        finish = ok | (parent < 0)
        if finish.any():
            b, v = live[finish], leaf[finish]
            y = categorical(current(b, v, stored.target, rows.q), stream.take(b))
            node[b] = v
            final_ctx[b] = ctx[b, v] * vocab + y + 1
        go = ~finish
        b, v, p_ = live[go], leaf[go], parent[go]
        alive[b, v] = False
        r = rate[b, p_]
        t, d = current(b, p_, stored.target, rows.q), current(b, p_, stored.draft, rows.p)
        slack = r[:, None] * t - d
        slack = np.where(slack > 0, slack, 0.0)
        mass = row_sum(slack)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where((mass > 0)[:, None], slack / mass[:, None], t)
            if merge:
                d[np.arange(len(b)), tokens[b, v]] = 0.0
                left = row_sum(d)
                d = np.where((left > 0)[:, None], d / left[:, None], d)
            fresh = slot[b, p_] < 0
            slot[b[fresh], p_[fresh]] = stored.allocate(int(fresh.sum()))
            at = slot[b, p_]
            stored.target[at], stored.draft[at] = t, d
            rate[b, p_] = np.where(mass > 0, mass / (mass + (1 - r)), mass)
        if len(b):
            refresh(b, p_)
        live = b
    return node, final_ctx


def _gbv_verify(shape: _Shape, rows: ContextRows, stream: _Stream, tokens: np.ndarray,
                ctx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GBV (``simulator.verifiers.multipath``): select the lexicographically best of the ``K`` chains, then
    block verification along it with the selected path's law ``p̃``."""
    batch, vocab = len(tokens), rows.vocab
    chains = []
    for head in shape.kids[0]:
        chain = [0, head]
        while shape.kids[chain[-1]]:
            chain.append(shape.kids[chain[-1]][0])
        chains.append(chain)
    k, height = len(chains), len(chains[0]) - 1
    b_ = np.arange(batch)
    rank, lower_table = rows.ranks()
    keys = np.stack([np.stack([rank[ctx[:, c[i]], tokens[:, c[i + 1]]] for i in range(height)], axis=1)
                     for c in chains], axis=1)  # [B, K, H]
    best = np.zeros(batch, dtype=np.int64)
    for j in range(1, k):
        diff = keys[:, j] != keys[b_, best]
        first = np.argmax(diff, axis=1)
        better = diff.any(axis=1) & (keys[b_, j, first] < keys[b_, best, first])
        best = np.where(better, j, best)
    nodes = np.array(chains)[best]  # [B, H+1]
    below, mass = np.zeros(batch), np.ones(batch)
    law = np.zeros((batch, height, vocab))  # p̃ at the path's nodes 0..H−1
    for i in range(height):
        c = ctx[b_, nodes[:, i]]
        low, p = lower_table[c], rows.p[c]
        norm = ipow(below + mass, k) - ipow(below, k)
        start = below[:, None] + mass[:, None] * low
        law[:, i] = (ipow(start + mass[:, None] * p, k) - ipow(start, k)) / norm[:, None]
        x = tokens[b_, nodes[:, i + 1]]
        below, mass = below + mass * low[b_, x], mass * p[b_, x]
    weight = np.ones(batch)
    weights = [weight]
    tau = np.zeros(batch, dtype=np.int64)
    for i in range(1, height + 1):
        x = tokens[b_, nodes[:, i]]
        q_parent = rows.q[ctx[b_, nodes[:, i - 1]]]
        weight = ratio(weight * q_parent[b_, x], law[b_, i - 1, x])
        weights.append(weight)
        if i < height:
            slack = weight[:, None] * rows.q[ctx[b_, nodes[:, i]]] - law[:, i]
            slack = row_sum(np.where(slack > 0, slack, 0.0))
            with np.errstate(divide="ignore", invalid="ignore"):
                h = np.where(slack > 0, slack / (slack + (1 - weight)), 0.0)
        else:
            h = weight
        u = stream.take(b_)
        tau = np.where((h == 1) | (u < h), i, tau)
    node = nodes[b_, tau]
    c = ctx[b_, node]
    q_node = rows.q[c]
    scale = np.stack(weights, axis=1)[b_, tau]
    law_at = law[b_, np.minimum(tau, height - 1)]
    residual = positive_residual(scale[:, None] * q_node - law_at, q_node)
    y = categorical(np.where((tau == height)[:, None], q_node, residual), stream.take(b_))
    return node, c * vocab + y + 1


def batched_rounds(model: ModelPair, topology: Topology, drafting: str, name: str, seed: int,
                   trials: np.ndarray, rows: ContextRows | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Accepted lengths and completed-sequence codes (as :func:`simulator.montecarlo.encode`) of ``trials``."""
    if not has_batched_path(name, drafting, model.vocab, topology):
        raise InvalidParameterError("verifier", f"no batched path for {name} with {drafting} drafting")
    rule = name.split("-", 1)[-1]
    rows = rows or ContextRows(model, topology.height)
    vocab, height, n = model.vocab, topology.height, len(topology.parents)
    stream = _Stream(seed, trials)
    tokens, ctx = _draft_iid(topology, rows, stream)
    shape = _Shape.of(topology)
    if name == "gbv":
        node, final_ctx = _gbv_verify(shape, rows, stream, tokens, ctx)
    elif name in ("trv", "trv-iid"):
        node, final_ctx = _traversal_verify(name == "trv", shape, rows, stream, tokens, ctx)
    else:
        verify = _layer_verify if name.startswith("lv-") else _token_verify
        node, final_ctx = verify(rule, shape, rows, stream, tokens, ctx)
    accepted_len = shape.depth[node]
    # Completion with the target up to H+1 tokens; final_ctx is the id of path + (y,), of length τ+1.
    length = accepted_len + 1
    ids = final_ctx.copy()
    for _ in range(height):
        grow = np.flatnonzero(length < height + 1)
        if len(grow) == 0:
            break
        x = rows.sample("q", ids[grow], stream.take(grow))
        ids[grow] = ids[grow] * vocab + x + 1
        length[grow] += 1
    return accepted_len, ids - rows.offsets[height + 1]
