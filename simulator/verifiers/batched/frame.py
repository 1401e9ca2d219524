"""What an array rule reads (:class:`Batch`): the tree as arrays, the rows and the uniform streams.

Shapes: ``B`` trees, ``n`` nodes (BFS order, node 0 the root), ``V`` tokens, ``W`` the most children of a node;
``m`` the trees still open at a step (array rules work on the open trees only, as index arrays into the batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Protocol

from array_api_compat import array_namespace, device as device_of

from ...array_ops import categorical, put_rows, ranked_below, ranking_place, take_rows
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


class CounterStream:
    """Each trial's counter stream (:func:`simulator.randomness.counter_uniform`), computed as it is read."""

    def __init__(self, seed: int, trials: Any) -> None:
        xp = array_namespace(trials)
        self.seed, self.trials = seed, xp.asarray(trials, dtype=xp.int64)
        self.pos = xp.zeros(trials.shape, dtype=xp.int64, device=device_of(trials))

    def take(self, rows: Any) -> Any:
        """The next uniform of each tree in ``rows`` (indices into the batch), ``[m]``; their positions advance."""
        at = self.pos[rows]
        out = counter_uniform(self.seed, self.trials[rows], at)
        self.pos[rows] = at + 1
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
        # read at b·U + position by a 1-D gather (a copy where the rows are not row-major): on torch, 0.6 of the
        # time of indexing by two arrays on 10^4 trees
        self.flat = xp.reshape(uniforms, (-1,))
        self.pos = xp.zeros(uniforms.shape[0], dtype=xp.int64, device=device_of(uniforms))

    def take(self, rows: Any) -> Any:
        at = take_rows(self.pos, rows)
        if at.shape[0] and int(array_namespace(at).max(at)) >= self.uniforms.shape[1]:
            raise InvalidParameterError("uniforms", f"a row needs more than {self.uniforms.shape[1]} uniforms")
        put_rows(self.pos, rows, at + 1)
        return take_rows(self.flat, rows * self.uniforms.shape[1] + at)


class Derived:
    """Rows ``[C, V]`` or per-row values ``[C]`` that depend on a node's ``p`` and ``q`` rows alone, named by the
    single-step rule that reads them (:mod:`simulator.verifiers.single_step_arrays`: RRS's target after ``i``
    rejections, K-SEQ's ``ρ*`` and residual). A key of the row sources — hashable, equal by value — which compute
    the table once per context where their rows are per context."""

    def compute(self, p: Any, q: Any, derived: Callable[["Derived"], Any]) -> Any:
        """The table over the rows ``p``, ``q`` ``[C, V]``; ``derived(key)`` is another table over the same rows."""
        raise NotImplementedError


class RowSource(Protocol):
    """The rows an array rule reads, by row id: ``p [C, V]`` and ``q [C', V]`` tables and the rows the rules derive
    from them (:class:`Derived`: computed per call, or looked up in tables computed once)."""

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
        """Token ``x[i]``'s entry ``[m]`` in the row named ``which`` of each id: ``"p"``, ``"q"`` or a rule's
        :class:`Derived` rows (RRS's target after ``i`` rejections, K-SEQ's residual for ``k`` candidates)."""

    def value(self, which: Derived, ids: Any) -> Any:
        """The per-row value ``[m]`` named ``which`` (a :class:`Derived` of one value a row: K-SEQ's ``ρ*``)."""

    def place(self, ids: Any, x: Any, clipped: bool) -> Any:
        """GBV's ranking place of token ``x`` ``[m]`` in each row (0 best; ``clipped``: the control's ranking)."""

    def lower(self, ids: Any) -> Any:
        """The draft mass ranked below each token ``[m, V]`` (:func:`simulator.array_ops.ranked_below`)."""

    def flow_step(self, step: Any, ids: Any, cands: Any, count: Any) -> tuple[Any, Any]:
        """A flow-defined rule's step weights ``[m, W + 1]``
        (:meth:`~simulator.verifiers.single_step_arrays.FlowStep.step_rows`, for the rule's array step ``step``)
        and the draw from its residual, ``emit(at, u)``: :func:`~simulator.array_ops.categorical` over the residual
        rows ``at`` (indices into the ``m`` rows) with uniforms ``u`` — only the rejected rows' residuals are read."""


def rows_name(which: object) -> object:
    """A name of rows a row source holds — ``"p"``, ``"q"`` or a rule's :class:`Derived` rows — as given; anything
    else is refused, naming ``which``."""
    if isinstance(which, Derived) or (isinstance(which, str) and which in ("p", "q")):
        return which
    raise InvalidParameterError("which", f"rows are 'p', 'q' or a rule's derived rows, not {which!r}")


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
        """The rows named ``which`` (:meth:`RowSource.entry`) of ``ids`` ``[m, V]`` (or the values ``[m]`` of a
        :class:`Derived` of one value a row), computed for these rows."""
        which = rows_name(which)
        if isinstance(which, str):
            return take_rows(getattr(self, which), ids)
        return which.compute(take_rows(self.p, ids), take_rows(self.q, ids), lambda key: self.rows_of(key, ids))

    def sample(self, which: object, ids: Any, u: Any) -> Any:
        return categorical(self.rows_of(which, ids), u)

    def entry(self, which: object, ids: Any, x: Any) -> Any:
        if which in ("p", "q"):
            return getattr(self, which)[ids, x]
        return array_namespace(x).take_along_axis(self.rows_of(which, ids), x[:, None], axis=1)[:, 0]

    def value(self, which: Derived, ids: Any) -> Any:
        return self.rows_of(which, ids)

    def place(self, ids: Any, x: Any, clipped: bool) -> Any:
        return ranking_place(take_rows(self.p, ids), take_rows(self.q, ids), x, clipped)

    def lower(self, ids: Any) -> Any:
        return ranked_below(take_rows(self.p, ids), take_rows(self.q, ids))

    def flow_step(self, step: Any, ids: Any, cands: Any, count: Any) -> tuple[Any, Any]:
        weights, residual = step.step_rows(take_rows(self.p, ids), take_rows(self.q, ids), cands, count)
        return weights, residual_draw(residual)


def residual_draw(residual: Any) -> Any:
    """The draw of a rejection's token from residual rows ``[m, V]``: ``emit(at, u)`` for the rows ``at``."""
    return lambda at, u: categorical(residual[at], u)


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

    def read(self, trees: Any, nodes: Any, parent_ids: Any = None) -> Any:
        """The token ``[m]`` of node ``nodes[i]`` (not the root) of tree ``trees[i]``, whose parent's id was read
        (``parent_ids``: those ids, where the caller has them); its own id can be read after."""

    def children(self, trees: Any, kids: Any) -> Any:
        """:meth:`read` of the nodes ``kids`` (``[m, W]``, −1 padded: the children of one node of each tree
        ``trees[i]``), ``[m, W]``; entries at padding are unspecified."""


class GivenDraft:
    """A draft given as arrays ``tokens [B, n]`` and ``ids [B, n]`` (the torch path's trees)."""

    def __init__(self, tokens: Any, ids: Any) -> None:
        self.tokens, self.ids, self.size = tokens, ids, tokens.shape[0]

    def node_ids(self, trees: Any, nodes: Any) -> Any:
        return self.ids[trees, nodes]

    def read(self, trees: Any, nodes: Any, parent_ids: Any = None) -> Any:
        return self.tokens[trees, nodes]

    def children(self, trees: Any, kids: Any) -> Any:
        return self.tokens[trees[:, None], array_namespace(kids).where(kids >= 0, kids, 0)]


@dataclass
class Batch:
    """One array rule call's input: the tree's structure as arrays (:class:`TreeShape`), the drafted trees
    (:class:`DraftSource`: tokens ``[B, n]`` and a row id per node ``[B, n]``) into ``rows``, a :class:`RowSource`
    (the model's rows per context for Monte Carlo, the given rows of each tree and node for the torch path), and
    the uniform stream (each tree's uniforms, read in the reference's order). The lifts of a single-step rule
    (:mod:`.token_tree`, :mod:`.layer`) receive that rule as its array step
    (:class:`~simulator.verifiers.single_step_arrays.ArrayStep`) and call it."""

    shape: TreeShape
    draft: DraftSource
    rows: Any
    stream: Any
    #: the run's trials per seed, where known (a configuration value, never the batch's size): an array rule may
    #: choose how to compute from it, never what — Layer Verification over GR warm-starts Newton at the contexts
    #: a run visits often (:class:`~simulator.verifiers.batched.gr_stacks.MassGrid`)
    trials: int | None = None

    @property
    def tokens(self) -> Any:
        """Every drafted token ``[B, n]`` (an array rule that reads the whole tree)."""
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
