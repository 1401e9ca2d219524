"""The array step of every single-step rule, beside its reference (docs/rules.md): the plans and flows for many nodes
at once, numpy and torch alike, with the reference's float operations in the same order. Shapes: ``m`` nodes,
``V`` tokens, ``k`` candidates, ``W`` the most children of a node."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Optional

import numpy as np
import scipy  # scipy.special loads on first use (not at every CLI start)
from array_api_compat import array_namespace, device, to_device

from ..array_ops import categorical, column_sum, distinct_rows, ipow, positive_residual, ratio, row_sum, take_rows
from ..errors import InvalidParameterError
from . import rules
from .batched.frame import Derived, residual_draw
from .batched.gr_stacks import lv_gr_node, tv_gr_tables
from .rules import SingleStepRule
from .single_step import KSEQ_BISECTION_STEPS

#: LV's outgoing flow is summed tuple by tuple, as the reference sums it, up to this many tuples ``V^k`` (where the
#: row source asks for the reference's order); in closed form beyond
TUPLE_SUM_LIMIT = 256
#: Rows per block of :func:`kseq_rho` on the CPU (numpy and torch): the bisection's ``[V, m]`` temporaries stay in cache (whole
#: batches of 10^5 rows ran 3-4x slower per row).
KSEQ_BLOCK_ROWS = 16384
#: contexts whose step tables ``[V^k, k + 1]`` :meth:`FlowStep.accepted_mean` reads at once
FLOW_MEAN_CHUNK = 256


class ArrayStep:
    """A single-step rule in array form: it holds its reference :class:`~.rules.SingleStepRule` and does, for many
    nodes at once, what a lift asks of it — :meth:`step` for token verification (the array form of
    :meth:`SingleStepRule.step`, lifted by :mod:`simulator.verifiers.batched.token_tree`),
    :meth:`acceptance_and_outflow` for Layer Verification (:meth:`SingleStepRule.token_acceptance` and
    :meth:`SingleStepRule.outflow`, lifted by :mod:`simulator.verifiers.batched.layer`), :meth:`accepted_mean` for
    the exact dynamic programme (:mod:`exact.recursions.token_dp`). A step does what the lifts of its rule in the
    registry ask of it; the others refuse.

    The registry hands each array rule, and the exact programme, its rule's step as an object (the options of a
    :class:`~simulator.verifiers.registry.VerifierSpec`'s ``array_rule``, its ``exact_dp``): none of them chooses a
    rule by a name. Rows a step derives from a node's rows alone (RRS's target after ``i`` rejections, K-SEQ's ``ρ*``
    and residual) are named by :class:`~simulator.verifiers.batched.frame.Derived` keys, which a row source computes
    once per context where its rows are per context."""

    def __init__(self, rule: SingleStepRule) -> None:
        self.rule = rule

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.rule.name})"

    @property
    def max_candidates(self) -> Optional[int]:
        """The candidates the rule looks at (SpS: the first; ``None``: all), as :meth:`SingleStepRule.used`."""
        return self.rule.max_candidates

    def step(self, batch: Any, trees: Any, ids: Any, kids: Any, count: Any) -> tuple[Any, Any]:
        """Token verification's step at one node of each tree ``trees [m]`` — rows ``ids [m]``, the candidates'
        nodes ``kids [m, W]`` (−1 padded), the first ``count [m]`` of them used — reading the rule's uniforms from
        ``batch.stream`` in the reference's order: the accepted candidate position ``[m]`` (−1: none) and
        ``emit(at, u)``, the draw of the rejection's token for the rows ``at`` (indices into the ``m``) with
        uniforms ``u``."""
        raise NotImplementedError(f"no token verification step of {self.rule.name}")

    def acceptance_and_outflow(self, batch: Any, p: Any, q: Any, cands: Any, problem: Any,
                               nodes: int) -> tuple[Any, Any]:
        """Layer Verification's node problem at transformed rows ``p``, ``q`` ``[m, V+1]`` with candidate tokens
        ``cands [m, k]``: per candidate position the acceptance of its token, summed over the positions holding it
        (as ``token_acceptance``'s dictionary), ``[m, k]``; and the outgoing flow ``[m, V+1]``. Rows with equal
        ``problem`` rows (``[m, 2]``: context id and ``A_t``) are equal; ``nodes``: the tree's nodes the rows come
        from (each trial brings one problem a node)."""
        raise NotImplementedError(f"no Layer Verification step of {self.rule.name}")

    def token_law(self, rows: Any, ids: Any, k: int) -> tuple[Any, Any]:
        """The step's law over ``k`` i.i.d. candidates at the contexts ``ids`` ``[m]`` of a
        :class:`~simulator.montecarlo.context_rows.ContextRows`: ``P(candidate i accepted, holding token x)``
        ``[m, k, V]`` and ``P(every candidate rejected, correction x)`` ``[m, V]``. What the exact recursions over
        contexts read (:mod:`exact.recursions.token_law`, :mod:`exact.recursions.token_dp`)."""
        raise NotImplementedError(f"no exact recursion step of {self.rule.name}")

    def accepted_mean(self, rows: Any, ids: Any, below: list[Any]) -> Any:
        """``E[Σ_i 1{candidate i accepted} b_i(X_i)]`` over ``k = len(below)`` i.i.d. candidates at the contexts
        ``ids`` ``[m]``, ``b_i = below[i]`` ``[m, V]`` by token, from :meth:`token_law`: what
        :mod:`exact.recursions.token_dp` sums."""
        accepted, _ = self.token_law(rows, ids, len(below))
        xp = array_namespace(accepted)
        total = xp.zeros(accepted.shape[0], dtype=accepted.dtype, device=device(accepted))
        for i, value in enumerate(below):
            total = total + xp.sum(accepted[:, i, :] * value, axis=1)
        return total


# ---- sequential rules whose acceptances do not depend on the tokens rejected: SpS, RRS, K-SEQ -------------------
class SequentialStep(ArrayStep):
    """A plan that accepts candidate ``i`` with ``a_i(X_i)`` after ``i`` rejections, whatever the tokens rejected,
    and whose residual after ``k`` rejections depends on the node's rows and ``k`` alone (SpS, RRS, K-SEQ and the
    controls built on SpS). ``a_i(x)`` is :meth:`accept` of row :meth:`targets` ``i`` (by name in a row source,
    :meth:`target_rows`); the residual's rows are :meth:`residual_rows`. Token verification reads a candidate only
    once those before it were rejected, so a draft drawn on demand never draws the rest."""

    def targets(self, p: Any, q: Any) -> Iterator[Any]:
        """The rows ``[m, V]`` candidate ``i = 0, 1, …`` is checked against."""
        raise NotImplementedError

    def target_rows(self, i: int) -> object:
        """The row source's name of :meth:`targets` ``i``."""
        raise NotImplementedError

    def residual_rows(self, k: int) -> object:
        """The row source's name of the residual after ``k`` rejections."""
        raise NotImplementedError

    def accept(self, target: Any, p: Any, scale: Any) -> Any:
        """The acceptance of a token, elementwise, from its ``target`` and draft entries (whole rows or single
        entries) and the ``scale`` of the draft that :meth:`tv_scale`, :meth:`layer_scale` or :meth:`dp_scale` gave
        (shaped to broadcast with them)."""
        raise NotImplementedError

    def capped(self, target: Any, p: Any, scale: Any) -> Any:
        """``p(x)·a_i(x)`` ``[m, V]`` from the rows ``target`` and ``p``, as the closed-form outflow sums it."""
        raise NotImplementedError

    def tv_scale(self, rows: Any, ids: Any, count: Any) -> Any:
        """The factor the draft is scaled by in :meth:`accept` (K-SEQ's ``ρ*``), per node ``[m]`` of token
        verification with ``count`` candidates; ``None``: none."""
        return None

    def layer_scale(self, p: Any, q: Any, k: int, problem: Any) -> Any:
        """The same per row ``[m]`` of Layer Verification's problems (``None``: none)."""
        return None

    def dp_scale(self, rows: Any, ids: Any, k: int) -> Any:
        """The same per context ``[m, 1]`` of the exact dynamic programme (``None``: none)."""
        return None

    #: whether the acceptance depends on the node's count of candidates (K-SEQ's ``ρ*``), not only on the position
    by_count = False

    def entry_acceptance(self, rows: Any, ids: Any, i: int, x: Any, scale: Any) -> Any:
        """Candidate ``i``'s acceptance ``[m]``, token ``x`` at rows ``ids`` of the row source ``rows``."""
        return self.accept(rows.entry(self.target_rows(i), ids, x), rows.entry("p", ids, x), scale)

    def acceptance_rows(self, i: int, k: int | None) -> "Acceptance":
        """The row source's name of candidate ``i``'s acceptance of every token at a node of ``k`` candidates
        (``k`` unused unless :attr:`by_count`): :meth:`accept` over whole rows, computed once per context where the
        rows are per context — one read a candidate, where :meth:`entry_acceptance` reads two entries and divides."""
        return Acceptance(self, i, k if self.by_count else None)

    def table_scale(self, derived: Callable[[Derived], Any], k: int) -> Any:
        """The scale :meth:`accept` takes over whole rows ``[C, 1]`` at nodes of ``k`` candidates, from the row
        source's tables ``derived`` (``None``: none)."""
        return None

    def scale_rows(self, k: int) -> object:
        """The row source's name of :meth:`tv_scale`'s values at nodes of ``k`` candidates (``None``: no scale)."""
        return None

    def step(self, batch: Any, trees: Any, ids: Any, kids: Any, count: Any) -> tuple[Any, Any]:
        xp, rows, stream = batch.xp, batch.rows, batch.stream
        tables = rows.by_context  # acceptance tables per context: one read a candidate
        scale = None if tables else self.tv_scale(rows, ids, count)
        counts = xp.unique_values(count).tolist() if tables and self.by_count else None
        # ``at``: the rows still open that have a candidate ``i`` (``None``: every row, as at ``i = 0``, since every
        # node here has a candidate)
        at, count_at, hit = None, count, None
        for i in range(kids.shape[1]):
            if i:
                keep = ~hit & (count_at > i)
                at = batch.where_true(keep) if at is None else at[keep]
                if at.shape[0] == 0:
                    break
                count_at = count[at]
            trees_at, ids_at = (trees, ids) if at is None else (trees[at], ids[at])
            x = batch.draft.read(trees_at, kids[:, i] if at is None else kids[:, i][at], ids_at)
            if not tables:
                prob = self.entry_acceptance(rows, ids_at, i, x, None if scale is None else
                                             (scale if at is None else scale[at]))
            elif counts is None or len(counts) == 1:
                prob = rows.entry(self.acceptance_rows(i, counts[0] if counts else None), ids_at, x)
            else:
                prob = xp.zeros(x.shape, dtype=rows.q.dtype, device=batch.device)
                for k in counts:
                    part = batch.where_true(count_at == k)
                    prob[part] = rows.entry(self.acceptance_rows(i, k), ids_at[part], x[part])
            u = stream.take(trees_at)
            hit = (prob == 1) | (u < prob)
            chosen = xp.astype(hit, xp.int64) * (i + 1) - 1  # i where accepted, else −1
            if at is None:
                accepted = chosen
            else:
                accepted[at] = chosen  # the rows ``at`` were open: none accepted yet

        def draw(k: int, at: Any, u: Any) -> Any:
            """The residual's token for ``k`` candidates at the rows ``at``. Rows given per node (no tables) compute the
            residual for these rows; the scale found above for them (K-SEQ's ``ρ*``: the same bisection, row by row)
            is handed to it rather than found again."""
            name, scale_name = self.residual_rows(k), self.scale_rows(k)
            if tables or scale is None or scale_name is None or not isinstance(name, Derived):
                return rows.sample(name, ids[at], u)
            known, ids_at = scale[at], ids[at]
            residual = name.compute(rows.p[ids_at], rows.q[ids_at],
                                    lambda key: known if key == scale_name else rows.rows_of(key, ids_at))
            return categorical(residual, u)

        def emit(at: Any, u: Any) -> Any:
            """The rejection's token for the trees ``at`` (all their candidates rejected), by candidate count."""
            counts = count[at]
            if at.shape[0] == 0 or bool(xp.all(counts == counts[0])):  # one table for all
                return draw(int(counts[0]) if at.shape[0] else 1, at, u)
            out = xp.zeros(at.shape, dtype=xp.int64, device=batch.device)
            for k in xp.unique_values(counts).tolist():
                part = batch.where_true(counts == k)
                out[part] = draw(k, at[part], u[part])
            return out

        return accepted, emit

    def position_acceptance(self, p: Any, q: Any, cands: Any, scale: Any) -> Any:
        """``P(accept position i | X)`` of the plan (:func:`~.single_step.plan_acceptance`) ``[m, k]``."""
        xp = array_namespace(p)
        every = xp.arange(p.shape[0], device=device(p))
        out, reach = [], None
        for i, target in zip(range(cands.shape[1]), self.targets(p, q)):
            x = cands[:, i]
            prob = self.accept(target[every, x], p[every, x], scale)
            out.append(prob if reach is None else reach * prob)
            reach = (1 - prob) if reach is None else reach * (1 - prob)
        return xp.stack(out, axis=1)

    def acceptance_and_outflow(self, batch: Any, p: Any, q: Any, cands: Any, problem: Any,
                               nodes: int) -> tuple[Any, Any]:
        """With ``batch.rows.exact_order`` and ``V^k ≤`` :data:`TUPLE_SUM_LIMIT` the outgoing flow is summed tuple by
        tuple in the reference's order (:meth:`outflow_by_tuples`), otherwise in closed form (:meth:`outflow`),
        which agrees to rounding (~1e-16)."""
        xp = batch.xp
        k = cands.shape[1]
        scale = self.layer_scale(p, q, k, problem)
        accept = self.position_acceptance(p, q, cands, scale)
        total_accept = []
        for i in range(k):
            same = cands == cands[:, i:i + 1]
            summed = xp.where(same[:, 0], accept[:, 0], xp.zeros_like(accept[:, 0]))
            for j in range(1, k):
                summed = xp.where(same[:, j], summed + accept[:, j], summed)
            total_accept.append(summed)
        vocab = p.shape[1] - 1
        if batch.rows.exact_order and vocab**k <= TUPLE_SUM_LIMIT:
            return xp.stack(total_accept, axis=1), self.outflow_by_tuples(p, q, k, scale)
        return xp.stack(total_accept, axis=1), self.outflow(p, q, k, scale)

    def outflow(self, p: Any, q: Any, k: int, scale: Any) -> Any:
        """``Σ_X f(X → x)`` ``[m, V]`` in closed form under i.i.d. tuples: ``Σ_{i<k} reach_i p a_i`` (:meth:`capped`),
        ``reach_{i+1} = reach_i (1 − Σ_x p a_i)``."""
        xp = array_namespace(p)
        out = xp.zeros_like(q)
        reach = xp.ones_like(q[:, 0])
        for i, target in zip(range(k), self.targets(p, q)):
            capped = self.capped(target, p, scale)
            out = out + reach[:, None] * capped
            if i + 1 < k:
                reach = reach * (1 - row_sum(capped))
        return out

    def outflow_by_tuples(self, p: Any, q: Any, k: int, scale: Any) -> Any:
        """``Σ_X P(X) Σ_{i: X_i = x} P(accept i | X)`` ``[m, V]`` tuple by tuple, as ``rules._outflow`` adds it up:
        tuples in product order (over the real tokens: LV's dummy is never drafted), each token's acceptance summed
        over its positions first."""
        xp = array_namespace(p)
        m, vocab = p.shape[0], p.shape[1] - 1
        out = xp.zeros_like(q)
        for tup in itertools.product(range(vocab), repeat=k):
            prob = p[:, tup[0]]
            for x in tup[1:]:
                prob = prob * p[:, x]
            cands = xp.broadcast_to(xp.asarray(tup, dtype=xp.int64, device=device(p))[None, :], (m, k))
            accept = self.position_acceptance(p, q, cands, scale)
            for x in dict.fromkeys(tup):
                at = [i for i, t in enumerate(tup) if t == x]
                summed = accept[:, at[0]]
                for i in at[1:]:
                    summed = summed + accept[:, i]
                out[:, x] = out[:, x] + prob * summed
        return out

    def token_law(self, rows: Any, ids: Any, k: int) -> tuple[Any, Any]:
        """With i.i.d. candidates: ``reach_i p(x) a_i(x)``, ``reach_{i+1} = reach_i Σ_x p(x)(1 − a_i(x))``; the
        rejection ``reach_k`` times the residual's row."""
        xp = array_namespace(rows.p)
        p, q = rows.p[ids], rows.q[ids]
        scale = self.dp_scale(rows, ids, k)
        reach = xp.ones(p.shape[0], dtype=p.dtype, device=device(p))
        accepted = []
        for _, target in zip(range(k), self.targets(p, q)):
            accept = self.accept(target, p, scale)
            accepted.append(reach[:, None] * p * accept)
            reach = reach * xp.sum(p * (1 - accept), axis=1)
        residual = rows.table(self.residual_rows(k))[ids]
        return xp.stack(accepted, axis=1), reach[:, None] * residual


class RrsStep(SequentialStep):
    """SpS and RRS with replacement (:func:`~.single_step.sps_plan`, :func:`~.single_step.rrs_plan`; SpS is RRS on
    its first candidate): candidate ``i`` accepted with ``min(1, r_i(x)/p(x))``, ``r_0 = q``, ``r_{i+1} = norm((r_i
    − p)_+)`` (:meth:`next_target`); the residual is ``r_k``."""

    @staticmethod
    def next_target(target: Any, p: Any) -> Any:
        """RRS's target after one more rejection, ``norm((r − p)_+)`` row by row, ``r`` where the positive part has
        no mass (:func:`simulator.numeric.residual`)."""
        return positive_residual(target - p, target)

    def targets(self, p: Any, q: Any) -> Iterator[Any]:
        target = q
        while True:
            yield target
            target = self.next_target(target, p)

    def target_rows(self, i: int) -> object:
        return "q" if i == 0 else RrsTarget(i)

    def residual_rows(self, k: int) -> object:
        return RrsTarget(k)

    def accept(self, target: Any, p: Any, scale: Any) -> Any:
        return ratio(target, p)

    def capped(self, target: Any, p: Any, scale: Any) -> Any:
        return array_namespace(p).minimum(p, target)


@dataclass(frozen=True)
class RrsTarget(Derived):
    """RRS's target after ``rejections`` rejected candidates ``[C, V]`` (at least one: before any it is ``q``;
    SpS's residual is the first)."""

    rejections: int

    def __post_init__(self) -> None:
        if type(self.rejections) is not int or self.rejections < 1:
            raise InvalidParameterError("which", f"RRS's target after {self.rejections!r} rejections: a count ≥ 1 "
                                                 "(before any rejection it is the row 'q')")

    def compute(self, p: Any, q: Any, derived: Callable[[Derived], Any]) -> Any:
        return next(itertools.islice(RRS.targets(p, q), self.rejections, None))


@dataclass(frozen=True)
class Acceptance(Derived):
    """A sequential step's acceptance of every token ``[C, V]`` for its candidate at ``position`` (at nodes of
    ``candidates`` candidates where it depends on their count: K-SEQ): :meth:`SequentialStep.accept` over whole rows,
    the same float operations on each entry as over the entries read one at a time."""

    step: SequentialStep
    position: int
    candidates: int | None = None

    def compute(self, p: Any, q: Any, derived: Callable[[Derived], Any]) -> Any:
        name = self.step.target_rows(self.position)
        target = q if name == "q" else derived(name)
        scale = None if self.candidates is None else self.step.table_scale(derived, self.candidates)
        return self.step.accept(target, p, scale)


class KseqStep(SequentialStep):
    """K-SEQ (SpecTr; :func:`~.single_step.kseq_plan`): every candidate accepted with ``min(1, q(x)/(ρ* p(x)))``, the
    residual ``norm((q − γ min(p, q/ρ*))_+)`` (:func:`kseq_residual`), ``ρ*`` bisected row by row as the reference
    bisects it (:func:`kseq_rho`)."""

    def targets(self, p: Any, q: Any) -> Iterator[Any]:
        return itertools.repeat(q)

    def target_rows(self, i: int) -> object:
        return "q"

    def residual_rows(self, k: int) -> object:
        return KseqResidual(k)

    def accept(self, target: Any, p: Any, scale: Any) -> Any:
        return ratio(target, scale * p)

    def capped(self, target: Any, p: Any, scale: Any) -> Any:
        return array_namespace(p).minimum(p, target / scale[:, None])

    by_count = True

    def table_scale(self, derived: Callable[[Derived], Any], k: int) -> Any:
        return derived(KseqRho(k))[:, None]

    def scale_rows(self, k: int) -> object:
        return KseqRho(k)

    def tv_scale(self, rows: Any, ids: Any, count: Any) -> Any:
        """``ρ*`` of each node's count of candidates, from the row source's tables, one count at a time."""
        xp = array_namespace(ids)
        counts = xp.unique_values(count).tolist()
        if len(counts) == 1:  # one candidate count (most levels)
            return rows.value(KseqRho(counts[0]), ids)
        rho = xp.zeros(ids.shape, dtype=rows.q.dtype, device=device(ids))
        for k in counts:
            at = xp.nonzero(count == k)[0]
            rho[at] = rows.value(KseqRho(k), ids[at])
        return rho

    def layer_scale(self, p: Any, q: Any, k: int, problem: Any) -> Any:
        """``ρ*`` bisected once per distinct ``problem`` (context id and ``A_t``): the nodes of a depth share them in
        every trial at the root, in most at depth 1 and a fifth at depth 2 on complete trees."""
        first, inverse = distinct_rows(problem)
        return kseq_rho(p[first], q[first], k)[inverse]

    def dp_scale(self, rows: Any, ids: Any, k: int) -> Any:
        return rows.value(KseqRho(k), ids)[:, None]


@dataclass(frozen=True)
class KseqRho(Derived):
    """K-SEQ's ``ρ*`` ``[C]`` for ``candidates`` candidates."""

    candidates: int

    def __post_init__(self) -> None:
        _check_candidates(self.candidates)

    def compute(self, p: Any, q: Any, derived: Callable[[Derived], Any]) -> Any:
        return kseq_rho(p, q, self.candidates)


@dataclass(frozen=True)
class KseqResidual(Derived):
    """K-SEQ's residual ``[C, V]`` for ``candidates`` candidates."""

    candidates: int

    def __post_init__(self) -> None:
        _check_candidates(self.candidates)

    def compute(self, p: Any, q: Any, derived: Callable[[Derived], Any]) -> Any:
        return kseq_residual(p, q, derived(KseqRho(self.candidates)), self.candidates)


def _check_candidates(k: object) -> None:
    if type(k) is not int or k < 1:
        raise InvalidParameterError("which", f"K-SEQ's rows for {k!r} candidates: a count ≥ 1")


def kseq_rho(p: Any, q: Any, k: Any) -> Any:
    """``[m]``: :func:`simulator.verifiers.single_step.kseq_rho` row by row (the same bisection, the same float
    steps); ``k`` a number or one per row. A row of one candidate has ``ρ* = 1`` without a search; the others are
    bisected :data:`KSEQ_BLOCK_ROWS` rows at a time on numpy (:func:`_kseq_bisection`)."""
    xp = array_namespace(p, q)
    count = p.shape[0]
    ks = xp.broadcast_to(xp.asarray(k, device=device(p)), (count,))
    rho = xp.ones(count, dtype=p.dtype, device=device(p))
    several = xp.nonzero(ks > 1)[0]
    on_cpu = isinstance(p, np.ndarray) or str(device(p)) == "cpu"  # a GPU takes every row at once
    block = KSEQ_BLOCK_ROWS if on_cpu else max(1, several.shape[0])
    for start in range(0, several.shape[0], block):
        at = several[start: start + block]
        rho[at] = _kseq_bisection(p[at], q[at], ks[at])
    return rho


def _kseq_bisection(p: Any, q: Any, k: Any) -> Any:
    """The reference's bisection for rows with ``k > 1``. The rows are held transposed, ``[V, m]``, so that ``β``'s
    sum over tokens adds contiguous rows (:func:`~simulator.array_ops.column_sum`). Once every row's midpoint equals
    its ``lo`` or ``hi`` (after about 53 of the 60 halvings) the rest change nothing, and are skipped: ``hi`` only
    moves to a midpoint, and a midpoint equal to ``lo`` — 1 with ``f(1) > 0``, or a point where ``f`` was ``> 0`` —
    moves nothing (rows with ``f(1) ≤ 0`` return 1 whatever their ``hi``)."""
    xp = array_namespace(p, q)
    if isinstance(p, np.ndarray):
        p_t, q_t = np.ascontiguousarray(p.T), np.ascontiguousarray(q.T)
    else:
        p_t, q_t = xp.permute_dims(p, (1, 0)), xp.permute_dims(q, (1, 0))
        if str(device(p)) == "cpu":  # torch on the CPU: contiguous rows too (the sums add whole rows)
            p_t, q_t = p_t.contiguous(), q_t.contiguous()

    def f(rho: Any) -> Any:
        beta = column_sum(xp.minimum(p_t, q_t / rho[None, :]))
        return 1 - ipow(1 - beta, k) - rho * beta

    one = xp.ones(p.shape[0], dtype=p.dtype, device=device(p))
    lo, hi = one, xp.astype(k, p.dtype)
    at_one = f(lo) <= 0
    for _ in range(KSEQ_BISECTION_STEPS):
        mid = (lo + hi) / 2
        if bool(xp.all((mid == lo) | (mid == hi))):
            break
        low_side = f(mid) <= 0
        hi, lo = xp.where(low_side, mid, hi), xp.where(low_side, lo, mid)
    return xp.where(at_one, one, hi)


def kseq_residual(p: Any, q: Any, rho: Any, k: Any) -> Any:
    """``[m, V]``: K-SEQ's residual ``norm((q − γ min(p, q/ρ*))_+)``, ``γ = (1 − (1 − β)^k)/β``, ``β = Σ min(p,
    q/ρ*)``; ``q`` where ``β = 0`` or nothing is left (:func:`simulator.verifiers.single_step.kseq_plan`)."""
    xp = array_namespace(p, q)
    capped = xp.minimum(p, q / rho[:, None])
    beta = row_sum(capped)
    empty = beta == 0
    gamma = (1 - ipow(1 - beta, k)) / xp.where(empty, xp.ones_like(beta), beta)
    return xp.where(empty[:, None], q, positive_residual(q - gamma[:, None] * capped, q))


# ---- sequential rules whose rows change with the tokens rejected: RRSw, deterministic RRS -----------------------
class RowUpdateStep(ArrayStep):
    """A plan whose rows change with the candidates rejected (RRSw, deterministic RRS): each node's rows ``[m, V]``
    are copied and updated row by row (:meth:`start`, :meth:`candidate`, :meth:`reject`, :meth:`correction_rows`);
    every candidate is read."""

    def start(self, batch: Any, p: Any, q: Any) -> SimpleNamespace:
        """The rows the plan updates, from the nodes' draft and target rows (copies of the source's)."""
        raise NotImplementedError

    def candidate(self, rows: SimpleNamespace, at: Any, x: Any) -> tuple[Any, Any, Any]:
        """The rows ``at`` that draw for their candidate ``x``, those tokens, and the acceptance of each."""
        raise NotImplementedError

    def reject(self, batch: Any, rows: SimpleNamespace, miss: Any, x: Any, open_: Any) -> None:
        """The update after the rows ``miss`` rejected ``x``; a row that can accept nothing more leaves ``open_``."""
        raise NotImplementedError

    def correction_rows(self, rows: SimpleNamespace) -> Any:
        """The rows ``[m, V]`` a rejection's token is drawn from."""
        raise NotImplementedError

    def step(self, batch: Any, trees: Any, ids: Any, kids: Any, count: Any) -> tuple[Any, Any]:
        xp, stream = batch.xp, batch.stream
        cands = batch.draft.children(trees, kids)
        rows = self.start(batch, take_rows(batch.rows.p, ids), take_rows(batch.rows.q, ids))
        m = trees.shape[0]
        accepted = batch.full(m, -1)
        open_ = xp.ones(m, dtype=xp.bool, device=batch.device)
        for i in range(cands.shape[1]):
            at = batch.where_true(open_ & (i < count))
            if at.shape[0] == 0:
                break
            at, x, prob = self.candidate(rows, at, cands[at, i])
            u = stream.take(trees[at])
            hit = (prob == 1) | (u < prob)
            accepted[at] = xp.where(hit, xp.full_like(at, i), xp.full_like(at, -1))  # ``at`` were open: none accepted
            open_[at] = ~hit
            self.reject(batch, rows, at[~hit], x[~hit], open_)
        return accepted, residual_draw(self.correction_rows(rows))


class RrswStep(RowUpdateStep):
    """RRSw, without replacement (:func:`~.single_step.rrsw_plan`): as RRS (its target after a rejection is
    :meth:`RrsStep.next_target` of the current draft), and the rejected token zeroed in the draft, renormalised; a
    node stops when its draft has no mass left. ``acceptance(r(x), p(x))``: ``min(1, r/p)``, or DySpec's Alg. 3 as
    printed (:func:`printed_dyspec_acceptance`, the control)."""

    def __init__(self, rule: SingleStepRule, acceptance: Callable[[Any, Any], Any] = ratio) -> None:
        super().__init__(rule)
        self.acceptance = acceptance

    def start(self, batch: Any, p: Any, q: Any) -> SimpleNamespace:
        return SimpleNamespace(target=q, draft=batch.xp.asarray(p, copy=True))

    def candidate(self, rows: SimpleNamespace, at: Any, x: Any) -> tuple[Any, Any, Any]:
        return at, x, self.acceptance(rows.target[at, x], rows.draft[at, x])

    def reject(self, batch: Any, rows: SimpleNamespace, miss: Any, x: Any, open_: Any) -> None:
        xp, target, draft = batch.xp, rows.target, rows.draft
        target[miss] = RrsStep.next_target(target[miss], draft[miss])
        zeroed = draft[miss]
        zeroed[batch.arange(miss.shape[0]), x] = 0
        left = row_sum(zeroed)
        empty = ~(left > 0)
        open_[miss[empty]] = False
        draft[miss] = xp.where(empty[:, None], zeroed, zeroed / xp.where(empty, xp.ones_like(left), left)[:, None])

    def correction_rows(self, rows: SimpleNamespace) -> Any:
        return rows.target


def printed_dyspec_acceptance(num: Any, den: Any) -> Any:
    """DySpec Alg. 3 as printed (:func:`~.single_step.dyspec_printed_plan`): ``Φ(num/den)``, 1 for ``x/0`` with
    ``x > 0``, 1/2 for ``0/0``."""
    xp = array_namespace(num, den)
    zero = den == 0
    z = num / xp.where(zero, xp.ones_like(den), den)
    phi = 0.5 * (1 + _erf(z / math.sqrt(2)))
    return xp.where(zero, xp.where(num > 0, xp.ones_like(num), xp.full_like(num, 0.5)), phi)


def _erf(x: Any) -> Any:
    """The error function, which the array API lacks: scipy's on numpy, the tensor's own elsewhere."""
    return scipy.special.erf(x) if isinstance(x, np.ndarray) else x.erf()


class DetStep(RowUpdateStep):
    """Deterministic RRS (EAGLE-2; :func:`~.single_step.deterministic_plan`): a distinct candidate accepted with
    ``r(x)``, else ``r(x) ← 0`` renormalised; a repeat of a rejected token is skipped without a draw; the residual is
    ``q`` where the rejected tokens held all the mass."""

    def start(self, batch: Any, p: Any, q: Any) -> SimpleNamespace:
        xp = batch.xp
        return SimpleNamespace(q=q, target=xp.asarray(q, copy=True),
                               fallback=xp.zeros(q.shape[0], dtype=xp.bool, device=batch.device),  # residual q
                               seen=xp.zeros(q.shape, dtype=xp.bool, device=batch.device))  # tokens rejected

    def candidate(self, rows: SimpleNamespace, at: Any, x: Any) -> tuple[Any, Any, Any]:
        new = ~rows.seen[at, x]
        at, x = at[new], x[new]
        target = rows.target[at, x]
        return at, x, ratio(target, array_namespace(target).ones_like(target))

    def reject(self, batch: Any, rows: SimpleNamespace, miss: Any, x: Any, open_: Any) -> None:
        rows.seen[miss, x] = True
        zeroed = rows.target[miss]
        zeroed[batch.arange(miss.shape[0]), x] = 0
        left = row_sum(zeroed)
        empty = ~(left > 0)
        rows.fallback[miss[empty]] = True
        open_[miss[empty]] = False
        rows.target[miss[~empty]] = zeroed[~empty] / left[~empty][:, None]

    def correction_rows(self, rows: SimpleNamespace) -> Any:
        return array_namespace(rows.q).where(rows.fallback[:, None], rows.q, rows.target)


# ---- flow-defined rules: OPT, GR --------------------------------------------------------------------------------
class FlowStep(ArrayStep):
    """A flow-defined rule (OPT, GR; :mod:`.flows`): its step is one categorical over the flows to the candidates
    and the reject weight (:meth:`SingleStepRule.flow_weights`), row by row from the reference solver
    (:meth:`step_rows`) — or, where the rule has ``step_tables`` and the rows are per context, from step tables
    solved as stacks once per context (:func:`~.batched.gr_stacks.tv_gr_tables`). Layer Verification's problems
    come from the reference solver where the row source asks for the reference's order or the rule has no
    ``layer_stacks``, otherwise as stacks (:func:`~.batched.gr_stacks.lv_gr_node`, numpy, to the solver's
    tolerance)."""

    def __init__(self, rule: SingleStepRule, step_tables: Optional[Callable[..., tuple]] = None,
                 layer_stacks: Optional[Callable[..., tuple]] = None) -> None:
        super().__init__(rule)
        self.step_tables, self.layer_stacks = step_tables, layer_stacks

    def step(self, batch: Any, trees: Any, ids: Any, kids: Any, count: Any) -> tuple[Any, Any]:
        xp = batch.xp
        cands = batch.draft.children(trees, kids)
        weights, emit = batch.rows.flow_step(self, ids, cands, count)
        choice = categorical(weights, batch.stream.take(trees))
        return xp.where(choice < count, choice, xp.full_like(choice, -1)), emit

    def step_rows(self, p: Any, q: Any, cands: Any, count: Any) -> tuple[Any, Any]:
        """:meth:`SingleStepRule.flow_weights` row by row: each distinct token's flow at the candidate position
        where it first appears (0 for a repeat and past ``count``), the reject weight in the last column ``[m, W +
        1]``; and the residual ``[m, V]``. Zero weights change no categorical draw, so positions stand in for the
        tokens."""
        xp = array_namespace(p, q)
        m, width = cands.shape
        weights = [[0.0] * (width + 1) for _ in range(m)]
        residual = []
        for i, (pr, qr, row, k) in enumerate(zip(p.tolist(), q.tolist(), cands.tolist(), count.tolist())):
            used = tuple(row[:k])
            tokens, flows, rest = self.rule.flow_weights(used, pr, qr, "iid")
            for x, flow in zip(tokens, flows):
                weights[i][used.index(x)] = flow
            weights[i][width] = flows[-1]
            residual.append(rest)
        return (xp.asarray(weights, dtype=p.dtype, device=device(p)),
                xp.asarray(residual, dtype=p.dtype, device=device(p)))

    def acceptance_and_outflow(self, batch: Any, p: Any, q: Any, cands: Any, problem: Any,
                               nodes: int) -> tuple[Any, Any]:
        if self.layer_stacks is None or batch.rows.exact_order:
            return self._reference_flows(p, q, cands)
        xp = batch.xp
        accept, out = self.layer_stacks(*(np.asarray(to_device(a, "cpu"), dtype=float) for a in (p, q)),
                                        np.asarray(to_device(cands, "cpu")),
                                        np.asarray(to_device(problem, "cpu"), dtype=float),
                                        batch.rows.mass_grid, (batch.trials or 0) * nodes)
        return (xp.asarray(accept, dtype=p.dtype, device=batch.device),
                xp.asarray(out, dtype=p.dtype, device=batch.device))

    def _reference_flows(self, p: Any, q: Any, cands: Any) -> tuple[Any, Any]:
        """The acceptance and outgoing flow row by row with the reference solver."""
        xp = array_namespace(p)
        accept, out = [], []
        for pr, qr, row in zip(p.tolist(), q.tolist(), cands.tolist()):
            got = self.rule.token_acceptance(tuple(row), tuple(pr), tuple(qr), "iid")
            accept.append([got.get(x, 0.0) for x in row])
            out.append(list(self.rule.outflow(tuple(pr), tuple(qr), len(row), "iid")))
        return (xp.asarray(accept, dtype=p.dtype, device=device(p)),
                xp.asarray(out, dtype=p.dtype, device=device(p)))

    def token_law(self, rows: Any, ids: Any, k: int) -> tuple[Any, Any]:
        """From the tabulated flows (the rule's ``step_tables``, numpy): each tuple's flow to a position added to
        that position's token, and the reject weights' sum times the residual. Contexts are read
        :data:`FLOW_MEAN_CHUNK` at a time (the tables are ``V^k`` rows each)."""
        if self.step_tables is None:
            raise NotImplementedError(f"no exact recursion step of {self.rule.name}: its flows are solved tuple by "
                                      "tuple, with no tables per context")
        vocab, size = rows.vocab, rows.vocab**k
        tuples = np.array(np.unravel_index(np.arange(size), (vocab,) * k)).T  # [tuple, position] tokens
        accepted, rejected = np.zeros((len(ids), k, vocab)), np.zeros(len(ids))
        rows.flow_tables(self, k, ids)  # the level's contexts solved as stacks
        for start in range(0, len(ids), FLOW_MEAN_CHUNK):
            at = np.arange(start, min(start + FLOW_MEAN_CHUNK, len(ids)))
            weights = rows.flow_table_step(self, k, np.repeat(ids[at], size), np.tile(np.arange(size), len(at)))
            weights = weights.reshape(len(at), size, k + 1)
            for i in range(k):
                for x in range(vocab):
                    accepted[at, i, x] = weights[:, tuples[:, i] == x, i].sum(axis=1)
            rejected[at] = weights[:, :, k].sum(axis=1)
        return accepted, rejected[:, None] * rows.flow_residuals(self, k, ids)


SPS = RrsStep(rules.SPS)
RRS = RrsStep(rules.RRS)
RRSW = RrswStep(rules.RRSW)
DYSPEC_PRINTED = RrswStep(rules.DYSPEC_PRINTED, printed_dyspec_acceptance)
DETERMINISTIC = DetStep(rules.DETERMINISTIC)
KSEQ = KseqStep(rules.KSEQ)
OPT = FlowStep(rules.OPT)
GR = FlowStep(rules.GR, step_tables=tv_gr_tables, layer_stacks=lv_gr_node)
