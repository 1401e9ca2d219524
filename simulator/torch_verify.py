"""Batched verifiers in torch (docs/engines.md): a batch of trees of one topology, on any device.

Inputs are tensors — ``p[B, n, V]`` and ``q[B, n, V]`` (the rows of every node; a leaf's ``p`` is never read),
``tokens[B, n]`` (``tokens[:, 0]`` is ignored) — and the random numbers, passed in: ``uniforms[B, U]``, read
left to right, one per Bernoulli or categorical, exactly as :class:`simulator.randomness.ReplayRandomness`
feeds the shared rule. Each batched rule reproduces its shared implementation's decisions: the same
acceptance probabilities and residuals (``ratio``, ``residual``, ``normalise`` of :mod:`simulator.numeric`),
the Bernoulli ``u < a`` (a sure event never fails) and the categorical "first index whose running sum exceeds
``u·Σw``". Row sums are ``cumsum`` (left to right on the CPU, as :func:`simulator.numeric.total`); on a GPU the
scan may round differently in the last bit, so a decision can differ only where a uniform lies within
rounding of its threshold. In float32 the probabilities themselves round differently: decisions differ only
where a uniform lies within about 1e-6 of a threshold (the tests count and explain each).

Supported: token verification with SpS, RRS, RRSw, deterministic RRS and K-SEQ (``tv-sps``, ``tv-rrs``,
``tv-rrsw``, ``dyspec``, ``tv-det``, ``tv-kseq``), sample-and-match (``match``), block verification (``bv``
and ``greedy-bv``, chains; greedy BV's distribution modification of later tokens is the caller's) and
Traversal Verification (``trv-iid``; ``trv`` on trees without duplicate siblings — it merges duplicates, which
would give every tree of the batch its own shape, so a batch holding one is refused) and Layer Verification
lifting SpS, RRS and K-SEQ under the i.i.d. tuple law (``lv-sps``, ``lv-rrs``, ``lv-kseq``). LV's outgoing
flow is summed over every candidate tuple, in the shared rule's order, while ``V^k ≤`` :data:`TUPLE_SUM_LIMIT`;
beyond (a real vocabulary) in closed form (as :mod:`simulator.batched`), which agrees to rounding — a
decision can then differ only where a weight the shared rule rounds to 0 meets a uniform of exactly 0.
Controls: ``bug-residual-q``, ``bug-accept-all``, ``bug-dyspec-printed`` (its normal CDF by ``torch.erf``),
``bug-match-per-row``, ``bug-greedy-bv-nomod`` (greedy BV's decisions; the bug is in the later tokens) and
``bug-trv-insertion-order``; GBV on multi-chains (``gbv``) and its ``bug-gbv-clipped`` control. The
flow-defined rules (``tv-opt``, ``tv-gr``, ``lv-opt``, ``lv-gr``) solve their flow problem per tree and node
with the shared solver (a max-flow or a convex dual: no batched form), cached by rows; their sampling and the
rest of the walk are batched. They compute in float64 whatever the input dtype: the solver is a float64 CPU
routine anyway, and GR's flows are not continuous in its inputs (its inner set ``H*`` jumps), so float32
rounding of the rows Layer Verification feeds it could move a decision by far more than rounding.
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import torch

from .array_ops import categorical, ipow, kseq_rho, positive_residual, ratio, row_sum
from .errors import InvalidParameterError, UnsupportedDraftError
from .trees import check_parents
from .numeric import total
from .verifiers.multipath import ZERO_DRAFT_GBV
from .verifiers.rules import GR, OPT

TORCH_VERIFIERS = ("tv-sps", "tv-rrs", "tv-rrsw", "dyspec", "tv-det", "tv-kseq", "match", "bv", "greedy-bv",
                   "trv", "trv-iid", "lv-sps", "lv-rrs", "lv-kseq", "bug-residual-q", "bug-accept-all",
                   "bug-dyspec-printed", "bug-match-per-row", "bug-greedy-bv-nomod", "bug-trv-insertion-order",
                   "gbv", "bug-gbv-clipped", "tv-opt", "tv-gr", "lv-opt", "lv-gr")
_FLOW_RULES = {"opt": OPT, "gr": GR}
FLOW_DEFINED = ("tv-opt", "tv-gr", "lv-opt", "lv-gr")  # solved per tree and node, in float64
TUPLE_SUM_LIMIT = 256  # LV's outflow: summed tuple by tuple (as the shared rule) up to this many tuples
_PLANS = {"tv-sps": "sps", "tv-rrs": "rrs", "tv-rrsw": "rrsw", "dyspec": "rrsw", "tv-det": "det", "tv-kseq": "kseq",
          "bug-residual-q": "sps-q", "bug-accept-all": "first", "bug-dyspec-printed": "rrsw-phi"}


def _normalise(w: torch.Tensor) -> torch.Tensor:
    return w / row_sum(w)[..., None]


def _residual(target: torch.Tensor, draft: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
    """``norm((scale·target − draft)_+)``, or ``target`` where that has no mass (:func:`numeric.residual`)."""
    return positive_residual((target if scale is None else scale[:, None] * target) - draft, target)


def _bernoulli(prob: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    return (prob == 1) | (u < prob)


class _Stream:
    """Each row's read position in ``uniforms``."""

    def __init__(self, uniforms: torch.Tensor) -> None:
        self.uniforms = uniforms
        self.pos = torch.zeros(uniforms.shape[0], dtype=torch.long, device=uniforms.device)

    def take(self, rows: torch.Tensor) -> torch.Tensor:
        """One uniform for each row in ``rows`` (a boolean mask); the other rows' positions stay."""
        if bool((self.pos[rows] >= self.uniforms.shape[1]).any()):
            raise InvalidParameterError("uniforms", f"a row needs more than {self.uniforms.shape[1]} uniforms")
        u = self.uniforms.gather(1, self.pos.clamp(max=self.uniforms.shape[1] - 1)[:, None])[:, 0]
        self.pos = self.pos + rows.long()
        return u


def _check(parents: Sequence[int], tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
           uniforms: torch.Tensor) -> tuple[int, ...]:
    parents = check_parents(list(parents))
    n = len(parents)
    if p.dim() != 3 or q.shape != p.shape or p.shape[1] != n:
        raise InvalidParameterError("p", f"p and q must both be [B, {n}, V], got {tuple(p.shape)} and {tuple(q.shape)}")
    if tokens.shape != p.shape[:2]:
        raise InvalidParameterError("tokens", f"must be [B, n] = {tuple(p.shape[:2])}, got {tuple(tokens.shape)}")
    if uniforms.dim() != 2 or uniforms.shape[0] != p.shape[0]:
        raise InvalidParameterError("uniforms", f"must be [B, U] with B = {p.shape[0]}, got {tuple(uniforms.shape)}")
    if not (p.dtype == q.dtype == uniforms.dtype) or not p.is_floating_point():
        raise InvalidParameterError("dtype", "p, q and uniforms must share one floating dtype")
    return parents


def torch_verify(name: str, parents: Sequence[int], tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
                 uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The accepted node and emitted token of every tree in the batch, ``([B], [B])``."""
    if name not in TORCH_VERIFIERS:
        raise InvalidParameterError("verifier", f"no torch path for {name!r}; choose from {TORCH_VERIFIERS}")
    parents = _check(parents, tokens, p, q, uniforms)
    if name in FLOW_DEFINED and p.dtype != torch.float64:
        return torch_verify(name, parents, tokens, p.double(), q.double(), uniforms.double())
    stream = _Stream(uniforms)
    if name in ("bv", "greedy-bv", "bug-greedy-bv-nomod"):
        return _block(parents, tokens, p, q, stream, greedy=name != "bv")
    if name.startswith("lv-"):
        return _layer(name[3:], parents, tokens, p, q, stream)
    if name in ("gbv", "bug-gbv-clipped"):
        return _multipath(parents, tokens, p, q, stream, clipped=name == "bug-gbv-clipped")
    if name in ("trv", "trv-iid", "bug-trv-insertion-order"):
        if name != "trv-iid":
            _refuse_duplicates(parents, tokens)
        return _traversal(parents, tokens, p, q, stream, zero_draft=name != "trv-iid",
                          post_order=name != "bug-trv-insertion-order")
    return _walk(name, parents, tokens, p, q, stream)


def _kids(parents: tuple[int, ...], device) -> tuple[torch.Tensor, torch.Tensor]:
    n = len(parents)
    children: list[list[int]] = [[] for _ in range(n)]
    for v in range(1, n):
        children[parents[v]].append(v)
    width = max(1, max(len(c) for c in children))
    table = torch.full((n, width), -1, dtype=torch.long)
    for v, c in enumerate(children):
        table[v, : len(c)] = torch.tensor(c, dtype=torch.long) if c else table[v, :0]
    return table.to(device), torch.tensor([len(c) for c in children], device=device)


def _walk(name: str, parents: tuple[int, ...], tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
          stream: _Stream) -> tuple[torch.Tensor, torch.Tensor]:
    """Token verification (or sample-and-match) from the root down, all rows at once."""
    batch, device = p.shape[0], p.device
    rows = torch.arange(batch, device=device)
    kids, count = _kids(parents, device)
    v = torch.zeros(batch, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    node, y = v.clone(), v.clone()
    while not bool(done.all()):
        active = ~done
        pv, qv = p[rows, v], q[rows, v]
        if name == "bug-match-per-row":
            node, y, done, v = _match_per_row_step(kids, count, tokens, v, qv, active, stream, node, y, done)
            continue
        if name == "match":
            draw = categorical(qv, stream.take(active))
            child_tokens = torch.where(kids[v] >= 0, tokens[rows[:, None], kids[v].clamp(min=0)], -1)
            hit = child_tokens == draw[:, None]
            moved = active & hit.any(dim=1)
            nxt = kids[v].gather(1, torch.argmax(hit.to(torch.int8), dim=1)[:, None])[:, 0]
            stop = active & ~moved
            node, y = torch.where(stop, v, node), torch.where(stop, draw, y)
            done, v = done | stop, torch.where(moved, nxt, v)
            continue
        if name in ("tv-opt", "tv-gr"):
            accepted, residual = _flow_step(_FLOW_RULES[name[3:]], kids[v], count[v], tokens, pv, qv, active, stream)
        else:
            accepted, residual = _plan_step(_PLANS[name], kids[v], count[v], tokens, pv, qv, active, stream)
        leaf = active & (count[v] == 0)
        rejected = active & (accepted < 0)
        draw = categorical(torch.where(leaf[:, None], qv, residual), stream.take(rejected))
        node, y = torch.where(rejected, v, node), torch.where(rejected, draw, y)
        done = done | rejected
        moved = active & (accepted >= 0)
        v = torch.where(moved, kids[v].gather(1, accepted.clamp(min=0)[:, None])[:, 0], v)
    return node, y


def _match_per_row_step(kids, count, tokens, v, qv, active, stream, node, y, done):
    """The control: one target draw per child (row), in order; move to the first child whose own draw matches;
    else emit the last draw (at a leaf: one draw)."""
    rows = torch.arange(v.shape[0], device=v.device)
    open_ = active.clone()
    moved_to = torch.full_like(v, -1)
    last = torch.zeros_like(v)
    for i in range(max(kids.shape[1], 1)):
        here = open_ & ((i < count[v]) | ((i == 0) & (count[v] == 0)))
        if not bool(here.any()):
            break
        draw = categorical(qv, stream.take(here))
        last = torch.where(here, draw, last)
        child = kids[v, i] if kids.shape[1] > i else torch.full_like(v, -1)
        hit = here & (child >= 0) & (tokens[rows, child.clamp(min=0)] == draw)
        moved_to = torch.where(hit, child, moved_to)
        open_ = open_ & ~hit
    stop = active & (moved_to < 0)
    return (torch.where(stop, v, node), torch.where(stop, last, y), done | stop,
            torch.where(moved_to >= 0, moved_to, v))


def _flow_step(rule, kids: torch.Tensor, count: torch.Tensor, tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
               active: torch.Tensor, stream: _Stream) -> tuple[torch.Tensor, torch.Tensor]:
    """A flow-defined rule's step (:meth:`SingleStepRule.step`): one categorical over the flows to the distinct
    candidate tokens (first appearance) and the reject weight ``P(X) − Σ flows``; the flows per tree from the
    shared solver."""
    batch, width = p.shape[0], kids.shape[1]
    weights = torch.zeros((batch, width + 1), dtype=p.dtype, device=p.device)
    first_position = torch.zeros((batch, width + 1), dtype=torch.long, device=p.device)
    residual = q.clone()
    has = active & (count > 0)
    for b in torch.nonzero(has).flatten().tolist():
        k = int(count[b])
        cands = tuple(int(tokens[b, kids[b, i]]) for i in range(k))
        pr, qr = tuple(p[b].tolist()), tuple(q[b].tolist())
        solution = rule.solver(pr, qr, k, "iid")
        prob_tuple = rule.tuple_probability(cands, pr, "iid")
        per = solution.flows[cands]
        distinct = list(dict.fromkeys(cands))
        flows = [per.get(x, 0.0) for x in distinct]
        weights[b, : len(distinct)] = torch.tensor(flows, dtype=p.dtype)
        weights[b, width] = max(prob_tuple - total(flows), 0.0)
        first_position[b, : len(distinct)] = torch.tensor([cands.index(x) for x in distinct])
        first_position[b, width] = -1
        residual[b] = torch.tensor(solution.residual, dtype=p.dtype)
    choice = categorical(torch.where(has[:, None], weights, torch.ones_like(weights)), stream.take(has))
    accepted = torch.where(has, first_position.gather(1, choice[:, None])[:, 0], torch.full_like(count, -1))
    return accepted, residual


def _plan_step(plan: str, kids: torch.Tensor, count: torch.Tensor, tokens: torch.Tensor, p: torch.Tensor,
               q: torch.Tensor, active: torch.Tensor, stream: _Stream) -> tuple[torch.Tensor, torch.Tensor]:
    """One node's plan (:mod:`simulator.verifiers.single_step`): the accepted child position (−1: none) and
    the residual to draw from when none is accepted (rows at a leaf: unused)."""
    batch = p.shape[0]
    rows = torch.arange(batch, device=p.device)
    used = count.clamp(max=1) if plan in ("sps", "sps-q", "first") else count
    accepted = torch.full((batch,), -1, dtype=torch.long, device=p.device)
    target, draft = q.clone(), p.clone()
    open_ = active & (used > 0)  # still trying candidates at this node
    fallback = torch.zeros(batch, dtype=torch.bool, device=p.device)  # det: all mass accepted, residual q
    seen = torch.zeros_like(q, dtype=torch.bool)
    rho = kseq_rho(p, q, used.clamp(min=1)) if plan == "kseq" else None
    for i in range(kids.shape[1]):
        here = open_ & (i < used)
        if not bool(here.any()):
            break
        x = tokens[rows, kids[:, i].clamp(min=0)]
        if plan == "det":
            here = here & ~seen[rows, x]
            prob = ratio(target[rows, x], torch.ones_like(target[rows, x]))
        elif plan == "kseq":
            prob = ratio(q[rows, x], rho * p[rows, x])
        elif plan == "first":
            prob = torch.ones_like(q[rows, x])
        elif plan == "rrsw-phi":  # DySpec Alg. 3 as printed: c ~ N(0, 1), accept if c ≤ R/D
            num, den = target[rows, x], draft[rows, x]
            z = num / torch.where(den == 0, torch.ones_like(den), den)
            phi = 0.5 * (1 + torch.erf(z / math.sqrt(2)))
            prob = torch.where(den == 0, torch.where(num > 0, torch.ones_like(num), torch.full_like(num, 0.5)), phi)
        else:
            prob = ratio(target[rows, x], draft[rows, x])
        hit = here & _bernoulli(prob, stream.take(here))
        accepted = torch.where(hit, torch.full_like(accepted, i), accepted)
        open_ = open_ & ~hit
        miss = here & ~hit
        if plan == "det":
            seen[rows, x] = seen[rows, x] | miss
            zeroed = target.clone()
            zeroed[rows, x] = torch.where(miss, torch.zeros_like(zeroed[rows, x]), zeroed[rows, x])
            empty = miss & ~(row_sum(zeroed) > 0)
            fallback = fallback | empty
            open_ = open_ & ~empty
            normed = zeroed / torch.where(empty, torch.ones_like(empty, dtype=q.dtype), row_sum(zeroed))[:, None]
            target = torch.where((miss & ~empty)[:, None], normed, target)
            continue
        if plan in ("kseq", "sps-q", "first"):
            continue
        new_target = _residual(target, draft)
        target = torch.where(miss[:, None], new_target, target)
        if plan in ("rrsw", "rrsw-phi"):
            zeroed = draft.clone()
            zeroed[rows, x] = torch.where(miss, torch.zeros_like(zeroed[rows, x]), zeroed[rows, x])
            empty = miss & ~(row_sum(zeroed) > 0)
            open_ = open_ & ~empty
            normed = zeroed / torch.where(empty, torch.ones_like(empty, dtype=p.dtype), row_sum(zeroed))[:, None]
            draft = torch.where((miss & ~empty)[:, None], normed, torch.where(empty[:, None], zeroed, draft))
    if plan == "sps":
        return accepted, _residual(q, p)
    if plan in ("sps-q", "first"):  # the controls' residual: q itself
        return accepted, q
    if plan == "kseq":  # norm((q − γ min(p, q/ρ*))_+), γ = p_acc/β; q where β = 0 or nothing is left
        capped = torch.minimum(p, q / rho[:, None])
        beta = row_sum(capped)
        safe = torch.where(beta == 0, torch.ones_like(beta), beta)
        gamma = (1 - ipow(1 - beta, used.clamp(min=1))) / safe
        rest = q - gamma[:, None] * capped
        rest = torch.where(rest > 0, rest, torch.zeros_like(rest))
        mass = row_sum(rest)
        normed = rest / torch.where(mass > 0, mass, torch.ones_like(mass))[:, None]
        return accepted, torch.where(((beta == 0) | ~(mass > 0))[:, None], q, normed)
    return accepted, torch.where(fallback[:, None], q, target)


def _block(parents: tuple[int, ...], tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
           stream: _Stream, greedy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification on the chain ``0, 1, …, γ``: Alg. 2 (:func:`simulator.verifiers.block.block_verify`)
    or, with ``greedy``, Alg. 4 (:func:`simulator.verifiers.block.greedy_block_decision`)."""
    if any(parents[i] != i - 1 for i in range(1, len(parents))):
        raise InvalidParameterError("parents", "block verification takes a chain draft (one child per node)")
    batch, gamma = p.shape[0], len(parents) - 1
    rows = torch.arange(batch, device=p.device)
    everyone = torch.ones(batch, dtype=torch.bool, device=p.device)
    weights = [torch.ones(batch, dtype=p.dtype, device=p.device)]
    tau = torch.zeros(batch, dtype=torch.long, device=p.device)
    positive = lambda t: torch.where(t > 0, t, torch.zeros_like(t))  # noqa: E731
    for i in range(1, gamma + 1):
        x = tokens[:, i]
        if greedy:
            if bool((p[rows, i - 1, x] == 0).any()):
                raise InvalidParameterError(f"tokens[:, {i}]", "greedy-bv needs drafted tokens of positive draft "
                                                               "probability")
            weights.append(weights[i - 1] * q[rows, i - 1, x] / p[rows, i - 1, x])
        else:
            weights.append(ratio(weights[i - 1] * q[rows, i - 1, x], p[rows, i - 1, x]))
        if i < gamma and greedy:
            over = row_sum(positive(weights[i][:, None] * q[:, i] - p[:, i]))
            under = row_sum(positive(p[:, i] - weights[i][:, None] * q[:, i]))
            h = torch.where(over > 0, ratio(over, under), torch.zeros_like(over))
        elif i < gamma:
            slack = row_sum(positive(weights[i][:, None] * q[:, i] - p[:, i]))
            safe = torch.where(slack > 0, slack + (1 - weights[i]), torch.ones_like(slack))
            h = torch.where(slack > 0, slack / safe, torch.zeros_like(slack))
        else:
            h = ratio(weights[gamma], torch.ones_like(weights[gamma])) if greedy else weights[gamma]
        tau = torch.where(_bernoulli(h, stream.take(everyone)), torch.full_like(tau, i), tau)
    scale = torch.stack(weights, dim=1)[rows, tau]
    last = tau == gamma
    residual = _residual(q[rows, tau], p[rows, tau], scale)
    y = categorical(torch.where(last[:, None], q[rows, tau], residual), stream.take(everyone))
    return tau, y


def _refuse_duplicates(parents: tuple[int, ...], tokens: torch.Tensor) -> None:
    for a in range(1, len(parents)):
        for b in range(a + 1, len(parents)):
            if parents[a] == parents[b] and bool((tokens[:, a] == tokens[:, b]).any()):
                raise InvalidParameterError("tokens", f"nodes {a} and {b} are siblings with the same token in some "
                                                      "tree: trv merges them (a per-tree shape); use trv-iid, or "
                                                      "draft without replacement")


def _traversal(parents: tuple[int, ...], tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor, stream: _Stream,
               zero_draft: bool, post_order: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Alg. 3 (:func:`simulator.verifiers.traversal.traversal_verify` without merging): leaves in DFS
    post-order, one Bernoulli each; a rejection updates the parent (Eqs. 1–3) and refreshes the rates of its
    remaining subtree (line 13), in BFS order so each node sees its parent's new rate."""
    batch, n = p.shape[0], len(parents)
    rows = torch.arange(batch, device=p.device)
    kids, _ = _kids(parents, p.device)
    below = torch.zeros((n, n), dtype=torch.bool, device=p.device)  # below[u, c]: c strictly under u
    for c in range(1, n):
        a = parents[c]
        while a >= 0:
            below[a, c] = True
            a = parents[a]
    alive = torch.ones((batch, n), dtype=torch.bool, device=p.device)
    target, draft = q.clone(), p.clone()
    rate = torch.zeros((batch, n), dtype=p.dtype, device=p.device)
    rate[:, 0] = 1

    def refresh(under: torch.Tensor) -> None:  # under[b, c]: recompute c's rate in row b
        for c in range(1, n):
            u, x = parents[c], tokens[:, c]
            fresh = ratio(rate[:, u] * target[rows, u, x], draft[rows, u, x])
            rate[:, c] = torch.where(under[:, c], fresh, rate[:, c])

    refresh(torch.ones((batch, n), dtype=torch.bool, device=p.device))
    done = torch.zeros(batch, dtype=torch.bool, device=p.device)
    node, y = torch.zeros(batch, dtype=torch.long, device=p.device), torch.zeros(batch, dtype=torch.long,
                                                                                  device=p.device)
    while not bool(done.all()):
        active = ~done
        leaf = torch.zeros(batch, dtype=torch.long, device=p.device)
        if post_order:
            for _ in range(n):  # root → first alive child → … → a leaf
                options = kids[leaf]
                live = (options >= 0) & alive[rows[:, None], options.clamp(min=0)]
                has = live.any(dim=1)
                first = options.gather(1, torch.argmax(live.to(torch.int8), dim=1)[:, None])[:, 0]
                leaf = torch.where(has, first, leaf)
        else:  # the control: the alive leaf of smallest index (insertion order)
            live_kids = (kids[None] >= 0) & alive[:, kids.clamp(min=0)]
            is_leaf = alive & ~live_kids.any(dim=2)
            leaf = torch.argmax(is_leaf.to(torch.int8), dim=1)
        accept = active & _bernoulli(rate[rows, leaf], stream.take(active))
        at_root = active & ~accept & (leaf == 0)
        finish = accept | at_root
        draw = categorical(target[rows, leaf], stream.take(finish))
        node, y = torch.where(finish, leaf, node), torch.where(finish, draw, y)
        done = done | finish
        rejected = active & ~finish
        if not bool(rejected.any()):
            continue
        u = torch.tensor(parents, device=p.device)[leaf].clamp(min=0)
        r_u, t_u, d_u, x = rate[rows, u], target[rows, u], draft[rows, u], tokens[rows, leaf]
        slack = r_u[:, None] * t_u - d_u
        slack = torch.where(slack > 0, slack, torch.zeros_like(slack))
        mass = row_sum(slack)
        safe = torch.where(mass > 0, mass, torch.ones_like(mass))
        new_target = torch.where((mass > 0)[:, None], slack / safe[:, None], t_u)
        new_draft = d_u
        if zero_draft:
            zeroed = d_u.clone()
            zeroed[rows, x] = 0
            zmass = row_sum(zeroed)
            new_draft = torch.where((zmass > 0)[:, None], zeroed / torch.where(zmass > 0, zmass,
                                                                               torch.ones_like(zmass))[:, None], zeroed)
        new_rate = torch.where(mass > 0, mass / torch.where(mass > 0, mass + (1 - r_u), torch.ones_like(mass)), mass)
        pick = rejected[:, None]
        rate[rows, u] = torch.where(rejected, new_rate, r_u)
        target[rows, u] = torch.where(pick, new_target, t_u)
        draft[rows, u] = torch.where(pick, new_draft, d_u)
        alive[rows, leaf] = alive[rows, leaf] & ~rejected
        refresh(rejected[:, None] & below[u] & alive)
    return node, y


def _plan_acceptance(rule: str, cands: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
                     rho: torch.Tensor | None) -> torch.Tensor:
    """``P(accept position i | X)`` of the SpS, RRS or K-SEQ plan (``single_step.plan_acceptance``)."""
    rows = torch.arange(p.shape[0], device=p.device)
    out, target, reach = [], q, None
    for i in range(cands.shape[1]):
        x = cands[:, i]
        if rule == "kseq":
            prob = ratio(q[rows, x], rho * p[rows, x])
        else:
            prob = ratio(target[rows, x], p[rows, x])
            target = _residual(target, p)
        out.append(prob if reach is None else reach * prob)
        reach = (1 - prob) if reach is None else reach * (1 - prob)
    return torch.stack(out, dim=1)


def _outflow(rule: str, p: torch.Tensor, q: torch.Tensor, k: int, rho: torch.Tensor | None) -> torch.Tensor:
    """``Σ_X f(X → x)`` under i.i.d. tuples in closed form (:func:`simulator.batched._outflow`)."""
    out = torch.zeros_like(q)
    reach = torch.ones(p.shape[0], dtype=p.dtype, device=p.device)
    if rule == "kseq":
        capped = torch.minimum(p, q / rho[:, None])
        miss = 1 - row_sum(capped)
        for _ in range(k):
            out = out + reach[:, None] * capped
            reach = reach * miss
        return out
    target = q
    for _ in range(k):
        capped = torch.minimum(p, target)
        out = out + reach[:, None] * capped
        reach = reach * (1 - row_sum(capped))
        target = _residual(target, p)
    return out


def _outflow_by_tuples(rule: str, p: torch.Tensor, q: torch.Tensor, k: int, rho: torch.Tensor | None,
                       vocab: int) -> torch.Tensor:
    """``Σ_X P(X) Σ_{i: X_i = x} P(accept i | X)`` tuple by tuple, as ``rules._outflow`` adds it up: tuples in
    product order, each token's acceptance summed over its positions first (a tuple with a token of zero
    draft mass adds exact zeros)."""
    batch = p.shape[0]
    out = torch.zeros_like(q)
    for tup in itertools.product(range(vocab), repeat=k):
        prob = p[:, tup[0]]
        for x in tup[1:]:
            prob = prob * p[:, x]
        cands = torch.tensor(tup, device=p.device).expand(batch, k)
        accept = _plan_acceptance(rule, cands, p, q, rho)
        for x in dict.fromkeys(tup):
            at = [i for i, t in enumerate(tup) if t == x]
            summed = accept[:, at[0]]
            for i in at[1:]:
                summed = summed + accept[:, i]
            out[:, x] = out[:, x] + prob * summed
    return out


def _flow_scores(rule, kids: list[int], live: torch.Tensor, lam: torch.Tensor, tokens: torch.Tensor,
                 p_ext: torch.Tensor, q_ext: torch.Tensor, scores: torch.Tensor, flows: torch.Tensor, v: int) -> None:
    """Alg. 1 at node ``v`` for a flow-defined rule, tree by tree (:func:`simulator.verifiers.layer.score_nodes`)."""
    vocab = flows.shape[-1]
    for b in torch.nonzero(live).flatten().tolist():
        pe, qe = tuple(p_ext[b].tolist()), tuple(q_ext[b].tolist())
        cands = tuple(int(tokens[b, c]) for c in kids)
        accept = rule.token_acceptance(cands, pe, qe, "iid")
        lam_b = float(lam[b])
        for w, x in zip(kids, cands):
            scores[b, w] = lam_b * accept.get(x, 0.0) / cands.count(x)
        flows[b, v] = torch.tensor([lam_b * f for f in rule.outflow(pe, qe, len(kids), "iid")[:vocab]],
                                   dtype=flows.dtype)


def _layer(rule: str, parents: tuple[int, ...], tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
           stream: _Stream) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer Verification (:mod:`simulator.verifiers.layer`): forward node scores, backward sampling."""
    batch, n, vocab = p.shape
    rows = torch.arange(batch, device=p.device)
    kids = [[c for c in range(1, n) if parents[c] == v] for v in range(n)]
    depth = [0] * n
    for v in range(1, n):
        depth[v] = depth[parents[v]] + 1
    levels = [[v for v in range(n) if depth[v] == d] for d in range(max(depth) + 1)]
    zero = torch.zeros(batch, dtype=p.dtype, device=p.device)
    scores = torch.zeros((batch, n), dtype=p.dtype, device=p.device)
    scores[:, 0] = 1
    flows = torch.zeros_like(p)
    for level in levels:
        inner = [v for v in level if kids[v]]
        mass = zero
        for v in inner:
            mass = mass + scores[:, v]
        for v in inner:
            live = (mass > 0) & (scores[:, v] != 0)
            a = torch.where(live, mass, torch.ones_like(mass))
            lam = scores[:, v] / a
            p_ext = torch.cat([p[:, v], zero[:, None]], dim=1)
            q_ext = torch.cat([a[:, None] * q[:, v], (1 - a)[:, None]], dim=1)
            k = 1 if rule == "sps" else len(kids[v])
            if rule in _FLOW_RULES:
                _flow_scores(_FLOW_RULES[rule], kids[v], live, lam, tokens, p_ext, q_ext, scores, flows, v)
                continue
            rho = kseq_rho(p_ext, q_ext, k) if rule == "kseq" else None
            cands = tokens[:, kids[v][:k]]
            accept = _plan_acceptance(rule, cands, p_ext, q_ext, rho)
            for i, w in enumerate(kids[v][:k]):
                same = cands == cands[:, i:i + 1]
                summed = torch.where(same[:, 0], accept[:, 0], zero)
                for j in range(1, k):  # token_acceptance's dict: first occurrence, then in order
                    summed = torch.where(same[:, j], summed + accept[:, j], summed)
                scores[:, w] = torch.where(live, lam * summed / same.sum(dim=1), scores[:, w])
            if vocab**k <= TUPLE_SUM_LIMIT:
                out = _outflow_by_tuples(rule, p_ext, q_ext, k, rho, vocab)[:, :vocab]
            else:
                out = _outflow(rule, p_ext, q_ext, k, rho)[:, :vocab]
            flows[:, v] = torch.where(live[:, None], lam[:, None] * out, flows[:, v])
    node = torch.full((batch,), -1, dtype=torch.long, device=p.device)
    y = torch.zeros(batch, dtype=torch.long, device=p.device)
    for level in reversed(levels):
        open_ = node < 0
        if not bool(open_.any()):
            break
        weights = [torch.clamp(scores[:, v] - row_sum(flows[:, v]), min=0) for v in level]
        level_mass = zero
        for v in level:
            level_mass = level_mass + scores[:, v]
        weights = torch.stack(weights + [torch.clamp(1 - level_mass, min=0)], dim=1)
        has_mass = row_sum(weights) > 0
        draw = open_ & has_mass
        choice = categorical(torch.where(has_mass[:, None], weights, torch.ones_like(weights)), stream.take(draw))
        if level[0] == 0:
            choice = torch.where(has_mass, choice, torch.zeros_like(choice))
            picked = open_
        else:
            picked = draw & (choice < len(level))
        v = torch.tensor(level, device=p.device)[choice.clamp(max=len(level) - 1)]
        a = scores[rows, v]
        res = _residual(q[rows, v], flows[rows, v], a)
        token = categorical(res, stream.take(picked))
        node, y = torch.where(picked, v, node), torch.where(picked, token, y)
    return node, y


def _ranks(p: torch.Tensor, q: torch.Tensor, clipped: bool) -> torch.Tensor:
    """Each token's place in :func:`simulator.verifiers.multipath.ranking` (0 best): ``q/p`` descending
    (``p = 0`` first; clipped: ``min(1, q/p)``), ties by token id."""
    ratio = q / torch.where(p == 0, torch.ones_like(p), p)
    score = torch.where(p == 0, torch.full_like(p, math.inf), ratio)
    if clipped:
        score = torch.where((p == 0) | (q >= p), torch.ones_like(p), ratio)
    order = torch.argsort(-score, dim=-1, stable=True)
    places = torch.arange(p.shape[-1], device=p.device).expand_as(order)
    return torch.empty_like(order).scatter(-1, order, places)


def _multipath(parents: tuple[int, ...], tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor, stream: _Stream,
               clipped: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """GBV (:func:`simulator.verifiers.multipath.greedy_multipath_verify`): the lexicographically best of the
    ``K`` chains (by the clipped ratio for the control), then block verification along it with ``p̃``."""
    n = len(parents)
    kids = [[c for c in range(1, n) if parents[c] == v] for v in range(n)]
    chains = []
    for head in kids[0]:
        chain = [0, head]
        while kids[chain[-1]]:
            if len(kids[chain[-1]]) != 1:
                raise InvalidParameterError("parents", "gbv verifies multi-chain drafts (one child below the root)")
            chain.append(kids[chain[-1]][0])
        chains.append(chain)
    batch = p.shape[0]
    rows = torch.arange(batch, device=p.device)
    if not chains:
        everyone = torch.ones(batch, dtype=torch.bool, device=p.device)
        return torch.zeros(batch, dtype=torch.long, device=p.device), categorical(q[:, 0], stream.take(everyone))
    height, k = len(chains[0]) - 1, len(chains)
    if any(len(c) != height + 1 for c in chains):
        raise InvalidParameterError("parents", "gbv needs chains of equal depth")
    for c in chains:
        for v, child in zip(c, c[1:]):
            bad = torch.nonzero(p[rows, v, tokens[:, child]] <= 0).flatten()
            if len(bad):
                b = int(bad[0])
                raise UnsupportedDraftError("tokens", f"tree {b}, node {child}: token {int(tokens[b, child])} has "
                                                      f"zero draft probability; {ZERO_DRAFT_GBV}")
    keys = torch.stack([torch.stack([_ranks(p[:, c[i]], q[:, c[i]], clipped)[rows, tokens[:, c[i + 1]]]
                                     for i in range(height)], dim=1) for c in chains], dim=1)  # [B, K, H]
    best = torch.zeros(batch, dtype=torch.long, device=p.device)
    for j in range(1, k):
        diff = keys[:, j] != keys[rows, best]
        first = torch.argmax(diff.to(torch.int8), dim=1)
        better = diff.any(dim=1) & (keys[rows, j, first] < keys[rows, best, first])
        best = torch.where(better, torch.full_like(best, j), best)
    nodes = torch.tensor(chains, device=p.device)[best]  # [B, H+1]
    zero = torch.zeros(batch, dtype=p.dtype, device=p.device)
    below, mass = zero, zero + 1
    law = torch.zeros((batch, height + 1, p.shape[-1]), dtype=p.dtype, device=p.device)
    for i in range(height):
        pv, qv = p[rows, nodes[:, i]], q[rows, nodes[:, i]]
        order = torch.argsort(-torch.where(pv == 0, torch.full_like(pv, math.inf),
                                           qv / torch.where(pv == 0, torch.ones_like(pv), pv)), dim=-1, stable=True)
        worst_first = order.flip(-1)
        ranked = pv.gather(-1, worst_first)
        running = torch.cumsum(ranked, dim=-1) - ranked  # mass ranked below, summed from the worst up
        lower = torch.empty_like(pv).scatter(-1, worst_first, running)
        norm = ipow(below + mass, k) - ipow(below, k)
        start = below[:, None] + mass[:, None] * lower
        law[:, i] = (ipow(start + mass[:, None] * pv, k) - ipow(start, k)) / norm[:, None]
        x = tokens[rows, nodes[:, i + 1]]
        below, mass = below + mass * lower[rows, x], mass * pv[rows, x]
    path_q = q[rows[:, None], nodes]
    path_tokens = tokens[rows[:, None], nodes]
    tau, y = _block(tuple(range(-1, height)), path_tokens, law, path_q, stream, greedy=False)
    return nodes[rows, tau], y
