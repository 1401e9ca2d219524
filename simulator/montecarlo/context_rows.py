"""A model pair's rows as arrays, ``p`` and ``q`` at every context of length ≤ ``H``, with the per-context tables
the array rules read, each computed once (:class:`ContextRows`): shared by Monte Carlo, the toy study and the
exact programme over contexts."""

from __future__ import annotations

import itertools

import numpy as np

from simulator.array_ops import guide_buckets, guide_table, guided_inverse_cdf, last_positive, ranking_tables, take_rows
from simulator.verifiers.batched.gr_stacks import MassGrid
from simulator.models import ContextTree, ModelPair, ModelView
from simulator.models.model_pairs import row_field
from simulator.numeric import SUM_TOLERANCE, as_distribution
from simulator.verifiers.batched.frame import Derived, residual_draw, rows_name

FLOW_TABLE_CHUNK = 512  # contexts per stacked solve (GR) when building step tables


class ContextRows:
    """``p`` and ``q`` rows of every context of length ≤ ``H``, from the model view the reference path uses.

    The context ``c`` of length ``ℓ`` with base-``V`` code ``k`` has id ``(V^ℓ − 1)/(V − 1) + k``; the child of
    id ``i`` by token ``x`` has id ``i·V + x + 1``.

    The tables: running sums for sampling, the rows the single-step rules derive (RRS's targets, K-SEQ's ``ρ*`` and
    residual), GR's step tables and GBV's ranking.
    """

    def __init__(self, model: ModelPair, height: int) -> None:
        vocab = self.vocab = model.vocab
        self.height = height
        contexts = ContextTree(vocab, height)  # by length, then code
        self.offsets = contexts.offsets
        if hasattr(model, "row_arrays"):  # the model's rows as arrays at once, checked in bulk
            p, self.q = model.row_arrays(contexts)
            self.p = p[: self.offsets[height]]
            _check_rows(self.q, contexts, "q")
            _check_rows(self.p, contexts, "p")
        else:
            view = ModelView(model, "float")
            self.q = np.array([view.q(context) for context in contexts], dtype=float).reshape(-1, vocab)
            self.p = np.array([view.p(context) for context in itertools.islice(contexts, self.offsets[height])],
                              dtype=float).reshape(-1, vocab)
        self._flows: dict[tuple[object, int], _FlowStore] = {}
        self._ranks: dict[bool, tuple[np.ndarray, np.ndarray]] = {}
        self._running: dict[object, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._derived: dict[Derived, np.ndarray] = {}
        self.mass_grid = MassGrid(self.p, self.q, self.reach())

    def reach(self) -> np.ndarray:
        """The draft's probability of each context with a ``p`` row, ``Π p(c_i | c_<i)``: the chance that a node at
        its depth has that path under i.i.d. drafting."""
        reach = np.ones(len(self.p))
        for level in range(1, self.height):
            ids = np.arange(self.offsets[level], self.offsets[level + 1])
            parent, token = np.divmod(ids - 1, self.vocab)
            reach[ids] = reach[parent] * self.p[parent, token]
        return reach

    def sample(self, which: object, ctx: np.ndarray, u: np.ndarray) -> np.ndarray:
        """:func:`simulator.array_ops.categorical` over the row of :meth:`table` ``which`` of each context ``ctx`` with
        uniforms ``u``, from running sums and a guide table computed once per table (:func:`guided_inverse_cdf`)."""
        return _guided_draw(*self.sampling_tables(which), ctx, u)

    def sampling_tables(self, which: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The running sums, guide table and last positive index of every row of :meth:`table` ``which``, computed
        once."""
        which = rows_name(which)  # checked before the cache
        if which not in self._running:
            table = self.table(which)
            running = np.cumsum(table, axis=1)
            self._running[which] = (running, guide_table(running, guide_buckets(self.vocab)), last_positive(table))
        return self._running[which]

    #: the Monte Carlo engine's sums (closed forms, stacked solves), rows per context: see
    #: :class:`~simulator.verifiers.batched.frame.RowSource`
    exact_order, by_context = False, True

    def table(self, which: object) -> np.ndarray:
        """The rows named ``which`` (:meth:`~simulator.verifiers.batched.frame.RowSource.entry`) at every context — a
        rule's :class:`Derived` rows (or values) at every context with a ``p`` row, computed once."""
        which = rows_name(which)
        if isinstance(which, str):
            return getattr(self, which)
        if which not in self._derived:
            self._derived[which] = which.compute(self.p, self.q[: len(self.p)], self.table)
        return self._derived[which]

    def entry(self, which: object, ids: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self.table(which).ravel().take(ids * self.vocab + x)  # a 1-D gather: a third of ``[ids, x]``'s time

    def value(self, which: Derived, ids: np.ndarray) -> np.ndarray:
        return self.table(which)[ids]

    def rank_tables(self, clipped: bool) -> tuple[np.ndarray, np.ndarray]:
        """GBV's ranking places and the draft mass ranked below each token at every non-leaf context
        (:func:`simulator.array_ops.ranking_tables`, computed once)."""
        if clipped not in self._ranks:
            self._ranks[clipped] = ranking_tables(self.p, self.q[: len(self.p)], clipped)
        return self._ranks[clipped]

    def place(self, ids: np.ndarray, x: np.ndarray, clipped: bool) -> np.ndarray:
        return self.rank_tables(clipped)[0][ids, x]

    def lower(self, ids: np.ndarray) -> np.ndarray:
        return take_rows(self.rank_tables(False)[1], ids)

    def flow_step(self, step, ids: np.ndarray, cands: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, object]:
        """A flow-defined rule's step (:meth:`~simulator.verifiers.batched.frame.RowSource.flow_step`): from step
        tables built once per context (:meth:`flow_table_step`) where its array step has ``step_tables`` (GR), its
        residual drawn from running sums and guide tables built with them; otherwise from its reference solver row by
        row."""
        if step.step_tables is None:
            weights, residual = step.step_rows(self.p[ids], self.q[ids], cands, count)
            return weights, residual_draw(residual)
        width = cands.shape[1]
        weights = np.zeros((len(ids), width + 1))
        counts = np.unique(count).tolist()
        for k in counts:
            at = slice(None) if len(counts) == 1 else np.flatnonzero(count == k)  # one count: most levels
            ctx = ids[at]
            code = np.zeros(len(ctx), dtype=np.int64)
            for i in range(k):
                code = code * self.vocab + cands[at, i]
            table = self.flow_table_step(step, k, ctx, code)
            weights[at, :k], weights[at, width] = table[:, :k], table[:, k]

        def emit(at: np.ndarray, u: np.ndarray) -> np.ndarray:
            """The residual token for the rows ``at`` (their contexts already solved), by candidate count."""
            out = np.empty(len(at), dtype=np.int64)
            for k in counts:
                part = slice(None) if len(counts) == 1 else np.flatnonzero(count[at] == k)
                store = self._flows[step, k]
                out[part] = _guided_draw(store.running, store.guide, store.last, ids[at][part], u[part])
            return out

        return weights, emit

    def flow_table_step(self, step, k: int, ctx: np.ndarray, code: np.ndarray) -> np.ndarray:
        """The step of the flow rule ``step`` (an array step with ``step_tables``: GR) for ``k`` i.i.d. candidates at
        contexts ``ctx`` whose candidate tuples have base-``V`` codes ``code``: ``[m, k + 1]`` — the flow to each
        candidate position's token where it first appears (0 for a repeat), then the reject weight, as
        :meth:`~simulator.verifiers.rules.SingleStepRule.step` builds them. The rule is solved lazily, once per context
        reached (``V^k`` tuples per context rule out tables for every context up front at ``k = 3``); the tables are
        read by one gather."""
        store = self._flow_store(step, k, ctx)
        return take_rows(store.weights, store.slot[ctx] * self.vocab**k + code)

    def flow_tables(self, step, k: int, contexts: np.ndarray) -> None:
        """The step tables of ``step`` (its ``step_tables``: GR's
        :func:`simulator.verifiers.batched.gr_stacks.tv_gr_tables`) for the ``contexts`` not yet solved, as one
        stack. Dense arrays, not the reference solver's dictionaries: 108 KB per context at ``V = 15, k = 3``, a
        tenth of those."""
        self._flow_store(step, k, contexts)

    def flow_residuals(self, step, k: int, contexts: np.ndarray) -> np.ndarray:
        """The residual rows ``[m, V]`` of ``step`` (with ``step_tables``) for ``k`` candidates at ``contexts``."""
        return self._flow_store(step, k, contexts).residual[contexts]

    def _flow_store(self, step, k: int, contexts: np.ndarray) -> "_FlowStore":
        store = self._flows.setdefault((step, k), _FlowStore(len(self.p), self.vocab, k))
        missing = np.unique(contexts[store.slot[contexts] < 0]).tolist()
        for start in range(0, len(missing), FLOW_TABLE_CHUNK):
            chunk = missing[start: start + FLOW_TABLE_CHUNK]
            store.add(chunk, *step.step_tables(self.p[chunk], self.q[chunk], k))
        return store


class _FlowStore:
    """A flow rule's step tables for ``k`` candidates of the contexts solved so far, one block of ``V^k`` rows per
    context in one array (grown by doubling), so that a batch's steps are one gather; ``slot[c]`` the block of context
    ``c`` (−1 before it is solved). The residual of each context is kept as :meth:`ContextRows.sample` keeps a
    table's rows (running sums, guide table and last positive token), and as a row for the exact recursions."""

    def __init__(self, contexts: int, vocab: int, k: int) -> None:
        self.size, self.buckets = vocab**k, guide_buckets(vocab)
        self.slot = np.full(contexts, -1, dtype=np.int64)
        self.weights = np.empty((0, k + 1))
        self.running = np.zeros((contexts, vocab))
        self.residual = np.zeros((contexts, vocab))
        self.guide: np.ndarray | None = None  # [C, G], in the narrow integer type guide_table picks for V
        self.last = np.zeros(contexts, dtype=np.int64)
        self.count = 0

    def add(self, contexts: list[int], tables: np.ndarray, residuals: np.ndarray) -> None:
        need = (self.count + len(contexts)) * self.size
        if need > len(self.weights):
            grown = np.empty((max(need, 2 * len(self.weights)), self.weights.shape[1]))
            grown[: self.count * self.size] = self.weights[: self.count * self.size]
            self.weights = grown
        start = self.count * self.size
        self.weights[start: need] = np.asarray(tables).reshape(-1, self.weights.shape[1])
        self.slot[contexts] = np.arange(self.count, self.count + len(contexts))
        self.residual[contexts] = residuals
        self.running[contexts] = running = np.cumsum(residuals, axis=1)
        guide = guide_table(running, self.buckets)
        if self.guide is None:
            self.guide = np.zeros((len(self.slot), self.buckets), dtype=guide.dtype)
        self.guide[contexts] = guide
        self.last[contexts] = last_positive(residuals)
        self.count += len(contexts)


def _guided_draw(running: np.ndarray, guide: np.ndarray, last: np.ndarray, ctx: np.ndarray,
                 u: np.ndarray) -> np.ndarray:
    """:func:`~simulator.array_ops.categorical` over the rows ``ctx`` of a table kept as running sums, guide table and
    last positive token per row (:func:`guided_inverse_cdf`)."""
    index, none = guided_inverse_cdf(running, guide, ctx, u)
    if none.any():
        index[none] = last[ctx[none]]
    return index


def _check_rows(rows: np.ndarray, contexts: ContextTree, name: str) -> None:
    """The check :class:`~simulator.models.ModelView` makes of each row (finite, non-negative, summing to 1 within
    :data:`~simulator.numeric.SUM_TOLERANCE`), on all rows at once; a row that is not clearly fine is checked by
    :func:`~simulator.numeric.as_distribution` itself, which names it in its error."""
    fine = np.isfinite(rows).all(axis=1) & (rows >= 0).all(axis=1)
    fine &= np.abs(rows.sum(axis=1) - 1.0) <= SUM_TOLERANCE / 2
    for i in np.flatnonzero(~fine).tolist():
        as_distribution(rows[i].tolist(), rows.shape[1], row_field(name, contexts[i]), "float")


class DeviceRows:
    """:class:`ContextRows` on a torch device (``specproof mc --device cuda``): the rows and the per-context tables
    copied there once, each computed by the host object (so the numbers are the host's, bit for bit); GR's step
    tables stay on the host (its solver is a numpy routine), their rows copied over per call."""

    exact_order, by_context = False, True

    def __init__(self, host: ContextRows, device: str) -> None:
        import torch

        self.host, self.device, self.torch = host, device, torch
        self.vocab, self.height, self.offsets = host.vocab, host.height, host.offsets
        self.mass_grid = host.mass_grid  # LV's GR problems are solved on the host
        self.p, self.q = self._put(host.p), self._put(host.q)
        self._tables: dict[object, tuple] = {}

    def _put(self, array: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(array)).to(self.device)

    def _table(self, key: object, build) -> tuple:
        if key not in self._tables:
            self._tables[key] = tuple(self._put(a) for a in build())
        return self._tables[key]

    def sample(self, which: object, ctx, u):
        """:meth:`ContextRows.sample` on the device."""
        which = rows_name(which)
        running, guide, last = self._table(("running", which), lambda: self.host.sampling_tables(which))
        index, none = guided_inverse_cdf(running, guide, ctx, u)
        return self.torch.where(none, last[ctx], index)

    def entry(self, which: object, ids, x):
        if which in ("p", "q"):  # already on the device
            return getattr(self, which)[ids, x]
        return self._device_table(which)[ids, x]

    def value(self, which: Derived, ids):
        return self._device_table(which)[ids]

    def _device_table(self, which: object):
        """The host's :meth:`ContextRows.table` ``which``, copied to the device once."""
        which = rows_name(which)
        return self._table(("table", which), lambda: (self.host.table(which),))[0]

    def place(self, ids, x, clipped: bool):
        return self._table(("ranks", clipped), lambda: self.host.rank_tables(clipped))[0][ids, x]

    def lower(self, ids):
        return self._table(("ranks", False), lambda: self.host.rank_tables(False))[1][ids]

    def flow_step(self, step, ids, cands, count):
        weights, emit = self.host.flow_step(step, *(a.cpu().numpy() for a in (ids, cands, count)))
        return self._put(weights), lambda at, u: self._put(emit(at.cpu().numpy(), u.cpu().numpy()))
