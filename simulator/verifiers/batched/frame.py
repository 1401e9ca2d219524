"""What a batched kernel reads (package docstring): the tree as arrays, the rows and the uniform streams.

Shapes: ``B`` trees, ``n`` nodes (BFS order, node 0 the root), ``V`` tokens, ``W`` the most children of a node;
``m`` the trees still open at a step (kernels work on the open trees only, as index arrays into the batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from array_api_compat import array_namespace, device as device_of

from ...array_ops import categorical, kseq_residual, kseq_rho, ranked_below, ranking_place, rrs_target
from ...errors import InvalidParameterError
from ...randomness import counter_uniform
from ...trees import node_children, node_depths, node_levels


class TreeShape:
    """The static structure of a topology as arrays on one device: children padded with −1 (``kids [n, W]``),
    child counts ``[n]``, parents and depths (lists), the levels (node ids per depth)."""

    def __init__(self, parents: tuple[int, ...], xp: Any, device: Any) -> None:
        n = len(parents)
        self.parents, self.n = parents, n
        self.children = node_children(parents)
        self.width = max(1, max(len(c) for c in self.children))
        self.depth = node_depths(parents)
        self.height = max(self.depth)
        self.levels = node_levels(parents)
        padded = [c + [-1] * (self.width - len(c)) for c in self.children]
        self.kids = xp.asarray(padded, dtype=xp.int64, device=device)
        self.count = xp.asarray([len(c) for c in self.children], dtype=xp.int64, device=device)
        self.depths = xp.asarray(self.depth, dtype=xp.int64, device=device)


class Stream(Protocol):
    def take(self, rows: Any) -> Any:
        """The next uniform of each tree in ``rows`` (indices into the batch), ``[m]``; their positions advance."""


class CounterStream:
    """Each trial's counter stream (:func:`simulator.randomness.counter_uniform`), computed as it is read."""

    def __init__(self, seed: int, trials: Any) -> None:
        xp = array_namespace(trials)
        self.seed, self.trials = seed, xp.asarray(trials, dtype=xp.int64)
        self.pos = xp.zeros(trials.shape, dtype=xp.int64, device=device_of(trials))

    def take(self, rows: Any) -> Any:
        out = counter_uniform(self.seed, self.trials[rows], self.pos[rows])
        self.pos[rows] += 1
        return out

    def skip(self, count: int) -> Any:
        """Every tree's position before skipping ``count`` uniforms, ``[B]``: they are read later by :meth:`at`
        (a draft whose tokens are drawn when first read), the next :meth:`take` reads past them."""
        start = self.pos
        self.pos = start + count
        return start

    def at(self, rows: Any, index: Any) -> Any:
        """The uniforms at positions ``index`` of the trees ``rows`` (arrays that broadcast); no position moves."""
        return counter_uniform(self.seed, self.trials[rows], index)


class ReplayStream:
    """Uniforms given as ``[B, U]``, each row read left to right (:class:`simulator.randomness.ReplayRandomness`)."""

    def __init__(self, uniforms: Any) -> None:
        xp = array_namespace(uniforms)
        self.uniforms = uniforms
        self.pos = xp.zeros(uniforms.shape[0], dtype=xp.int64, device=device_of(uniforms))

    def take(self, rows: Any) -> Any:
        at = self.pos[rows]
        if at.shape[0] and int(array_namespace(at).max(at)) >= self.uniforms.shape[1]:
            raise InvalidParameterError("uniforms", f"a row needs more than {self.uniforms.shape[1]} uniforms")
        self.pos[rows] += 1
        return self.uniforms[rows, at]


class RowSource(Protocol):
    """The rows a kernel reads, by row id: ``p [C, V]`` and ``q [C', V]`` tables and the per-row quantities of
    the rules (computed per call, or looked up in tables computed once)."""

    p: Any
    q: Any
    vocab: int
    #: sums in the reference's order (LV's outflow tuple by tuple, flows from the reference solver): decisions
    #: then match the reference even at ties, at a cost a real vocabulary cannot pay (docs/engines.md)
    exact_order: bool
    #: a node's rows depend on its path only (rows per context), so nodes with the same path share them
    by_context: bool
    #: where rows are per context, GR's solutions at a grid of score masses per context
    #: (:class:`~simulator.verifiers.batched.gr_stacks.MassGrid`), where Layer Verification's GR problems start
    #: Newton; ``None`` for rows given per node (nothing to share between calls)
    mass_grid: Any

    def sample(self, which: object, ids: Any, u: Any) -> Any:
        """:func:`~simulator.array_ops.categorical` over the row named ``which`` (:meth:`entry`) of each id with
        uniforms ``u`` ``[m]`` (where the rows are per context, a table of running sums is summed once)."""

    def entry(self, which: object, ids: Any, x: Any) -> Any:
        """Token ``x[i]``'s entry ``[m]`` in the row named ``which`` of each id: ``"p"``, ``"q"``, ``("rrs", i)`` —
        RRS's target after ``i`` rejections, ``r_0 = q``, ``r_{i+1} = norm((r_i − p)_+)`` (SpS's residual is ``r_1``)
        — or ``("kseq", k)``, K-SEQ's residual for ``k`` candidates (:func:`~simulator.array_ops.kseq_residual`).
        These rows depend on the node's rows alone, so rows per context compute them once."""

    def kseq_rho(self, ids: Any, k: Any) -> Any:
        """K-SEQ's ``ρ*`` ``[m]`` for ``k`` candidates (a number or one per row)."""

    def place(self, ids: Any, x: Any, clipped: bool) -> Any:
        """GBV's ranking place of token ``x`` ``[m]`` in each row (0 best; ``clipped``: the control's ranking)."""

    def lower(self, ids: Any) -> Any:
        """The draft mass ranked below each token ``[m, V]`` (:func:`simulator.array_ops.ranked_below`)."""

    def flow_step(self, rule: Any, ids: Any, cands: Any, count: Any) -> tuple[Any, Any]:
        """A flow-defined rule's step weights ``[m, W + 1]`` (:func:`flow_step_rows`) and the draw from its residual,
        ``emit(at, u)``: :func:`~simulator.array_ops.categorical` over the residual rows ``at`` (indices into the
        ``m`` rows) with uniforms ``u`` — only the rejected rows' residuals are read."""


def row_name(which: object) -> tuple[str, int]:
    """A derived row's name (:meth:`RowSource.entry`) as ``(kind, k)``; anything else is refused, naming it."""
    if (not isinstance(which, tuple) or len(which) != 2 or which[0] not in ("rrs", "kseq")
            or type(which[1]) is not int or which[1] < (0 if which[0] == "rrs" else 1)):
        raise InvalidParameterError("which", f"rows are 'p', 'q', ('rrs', i ≥ 0) or ('kseq', k ≥ 1), not {which!r}")
    return which


@dataclass
class DenseRows:
    """The rows of each tree and node given as ``p [B, n, V]``, ``q [B, n, V]``; row id ``b·n + v``."""

    p3: Any
    q3: Any
    exact_order: bool = True
    by_context: bool = False  # rows are given per node, not per context
    mass_grid: None = None

    def __post_init__(self) -> None:
        batch, n, self.vocab = self.q3.shape
        self.p, self.q = self.p3.reshape(batch * n, self.vocab), self.q3.reshape(batch * n, self.vocab)

    def ids(self) -> Any:
        xp = array_namespace(self.q)
        batch, n = self.q3.shape[:2]
        return xp.reshape(xp.arange(batch * n, dtype=xp.int64, device=device_of(self.q)), (batch, n))

    def rows_of(self, which: object, ids: Any) -> Any:
        """The rows named ``which`` (:meth:`RowSource.entry`) of ``ids`` ``[m, V]``, computed for these rows."""
        if which in ("p", "q"):
            return getattr(self, which)[ids]
        kind, k = row_name(which)
        p, q = self.p[ids], self.q[ids]
        if kind == "kseq":
            return kseq_residual(p, q, kseq_rho(p, q, k), k)
        return rrs_target(p, q, k)

    def sample(self, which: object, ids: Any, u: Any) -> Any:
        return categorical(self.rows_of(which, ids), u)

    def entry(self, which: object, ids: Any, x: Any) -> Any:
        if which in ("p", "q"):
            return getattr(self, which)[ids, x]
        return array_namespace(x).take_along_axis(self.rows_of(which, ids), x[:, None], axis=1)[:, 0]

    def kseq_rho(self, ids: Any, k: Any) -> Any:
        return kseq_rho(self.p[ids], self.q[ids], k)

    def place(self, ids: Any, x: Any, clipped: bool) -> Any:
        return ranking_place(self.p[ids], self.q[ids], x, clipped)

    def lower(self, ids: Any) -> Any:
        return ranked_below(self.p[ids], self.q[ids])

    def flow_step(self, rule: Any, ids: Any, cands: Any, count: Any) -> tuple[Any, Any]:
        weights, residual = flow_step_rows(rule, self.p[ids], self.q[ids], cands, count)
        return weights, residual_draw(residual)


def residual_draw(residual: Any) -> Any:
    """The draw of a rejection's token from residual rows ``[m, V]``: ``emit(at, u)`` for the rows ``at``."""
    return lambda at, u: categorical(residual[at], u)


def flow_step_rows(rule: Any, p: Any, q: Any, cands: Any, count: Any) -> tuple[Any, Any]:
    """:meth:`SingleStepRule.flow_weights` row by row: each distinct token's flow at the candidate position where
    it first appears (0 for a repeat and past ``count``), the reject weight in the last column ``[m, W + 1]``; and
    the residual ``[m, V]``. Zero weights change no categorical draw, so positions stand in for the tokens."""
    xp = array_namespace(p, q)
    m, width = cands.shape
    weights = [[0.0] * (width + 1) for _ in range(m)]
    residual = []
    for i, (pr, qr, row, k) in enumerate(zip(p.tolist(), q.tolist(), cands.tolist(), count.tolist())):
        used = tuple(row[:k])
        tokens, flows, rest = rule.flow_weights(used, pr, qr, "iid")
        for x, flow in zip(tokens, flows):
            weights[i][used.index(x)] = flow
        weights[i][width] = flows[-1]
        residual.append(rest)
    return (xp.asarray(weights, dtype=p.dtype, device=device_of(p)),
            xp.asarray(residual, dtype=p.dtype, device=device_of(p)))


class DraftSource(Protocol):
    """The drafted trees of a batch: tokens and row ids ``[B, n]`` (``tokens[:, 0]`` ignored), and the same read
    a few at a time, which a draft drawn on demand (:class:`simulator.montecarlo.batched.IidDraft`) draws only
    then."""

    tokens: Any
    ids: Any
    size: int

    def node_ids(self, trees: Any, nodes: Any) -> Any:
        """The row id ``[m]`` of node ``nodes[i]`` of tree ``trees[i]``: the root, or a node read before by
        :meth:`read` or :meth:`children`."""

    def read(self, trees: Any, nodes: Any) -> Any:
        """The token ``[m]`` of node ``nodes[i]`` (not the root) of tree ``trees[i]``, whose parent's id was read;
        its own id can be read after."""

    def children(self, trees: Any, kids: Any) -> Any:
        """:meth:`read` of the nodes ``kids`` (``[m, W]``, −1 padded: the children of one node of each tree
        ``trees[i]``), ``[m, W]``; entries at padding are unspecified."""


class GivenDraft:
    """A draft given as arrays ``tokens [B, n]`` and ``ids [B, n]`` (the torch path's trees)."""

    def __init__(self, tokens: Any, ids: Any) -> None:
        self.tokens, self.ids, self.size = tokens, ids, tokens.shape[0]

    def node_ids(self, trees: Any, nodes: Any) -> Any:
        return self.ids[trees, nodes]

    def read(self, trees: Any, nodes: Any) -> Any:
        return self.tokens[trees, nodes]

    def children(self, trees: Any, kids: Any) -> Any:
        return self.tokens[trees[:, None], array_namespace(kids).where(kids >= 0, kids, 0)]


@dataclass
class Batch:
    """One kernel call's input: the drafted trees (:class:`DraftSource`, row ids into ``rows``), the tree's shape and
    the uniform stream."""

    shape: TreeShape
    draft: DraftSource
    rows: Any
    stream: Any
    #: the run's trials per seed, where known (a configuration value, never the batch's size): a kernel may
    #: choose how to compute from it, never what — Layer Verification over GR warm-starts Newton at the contexts
    #: a run visits often (:class:`~simulator.verifiers.batched.gr_stacks.MassGrid`)
    trials: int | None = None

    @property
    def tokens(self) -> Any:
        """Every drafted token ``[B, n]`` (a kernel that reads the whole tree)."""
        return self.draft.tokens

    @property
    def ids(self) -> Any:
        """Every node's row id ``[B, n]``."""
        return self.draft.ids

    @cached_property
    def xp(self) -> Any:
        return array_namespace(self.shape.kids)

    @property
    def device(self) -> Any:
        return device_of(self.shape.kids)

    @property
    def size(self) -> int:
        return self.draft.size

    def arange(self, count: int) -> Any:
        return self.xp.arange(count, dtype=self.xp.int64, device=self.device)

    def full(self, count: int, value: Any, dtype: Any = None) -> Any:
        return self.xp.full((count,), value, dtype=dtype or self.xp.int64, device=self.device)

    def where_true(self, mask: Any) -> Any:
        """The indices of the true entries of a boolean ``[m]``."""
        return self.xp.nonzero(mask)[0]
