"""Drafting in array form for KV-cached rounds on real models, numpy and torch alike: per-node schemes
(:data:`ARRAY_SCHEMES`) and whole-round kernels (:data:`ARRAY_DRAFTERS`: fixed shapes, DySpec, ADED), each drawing
exactly as its reference does on the same rows and uniforms."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Protocol, Sequence

from array_api_compat import array_namespace, device

from simulator.array_ops import categorical, row_sum
from simulator.drafting.aded import START, Aded, cached_candidates, candidate_tree
from simulator.drafting.dyspec import DySpecBudget, DySpecThreshold, bfs_renumbering
from simulator.drafting.shapes import FixedShape
from simulator.errors import InvalidParameterError


def _iid(rows: Any, uniforms: Any) -> Any:
    xp = array_namespace(rows)
    return xp.stack([categorical(rows, uniforms[:, j]) for j in range(uniforms.shape[1])], axis=1)


def _without_replacement(rows: Any, uniforms: Any) -> Any:
    """Sequential draws, each drawn token's weight set to zero before the next; the reference stops short where
    the mass runs out, which a fixed-shape tree cannot, so that is an error naming the drafting."""
    xp = array_namespace(rows)
    tokens = xp.arange(rows.shape[1], device=device(rows))
    drawn = []
    for j in range(uniforms.shape[1]):
        if bool(xp.any(row_sum(rows) <= 0)):
            raise InvalidParameterError("drafting", f"without replacement needs {uniforms.shape[1]} tokens of "
                                                    "positive draft mass per node; a row has fewer (top-k or "
                                                    "top-p below the branching?)")
        x = categorical(rows, uniforms[:, j])
        drawn.append(x)
        rows = xp.where(tokens[None, :] == x[:, None], xp.zeros_like(rows), rows)
    return xp.stack(drawn, axis=1)


#: scheme name -> ``draw(rows [m, V], uniforms [m, c]) -> tokens [m, c]``, the children of ``m`` nodes
ARRAY_SCHEMES: dict[str, Callable[[Any, Any], Any]] = {
    "iid": _iid,
    "without-replacement": _without_replacement,
}


def array_scheme(name: str) -> Callable[[Any, Any], Any]:
    """The kernel of drafting scheme ``name``, or a typed error naming the schemes that have one."""
    if name not in ARRAY_SCHEMES:
        raise InvalidParameterError("drafting", f"{name!r} has no array kernel; the real path drafts with "
                                                f"{sorted(ARRAY_SCHEMES)}")
    return ARRAY_SCHEMES[name]


class RoundSource(Protocol):
    """What a round's kernel reads: the context, the draft model's rows, uniforms and an array to take the rows'
    namespace, dtype and device from."""

    context: Sequence[int]
    vocab: int
    like: Any

    def rows(self, parents: Sequence[int], tokens: Sequence[int], nodes: Sequence[int]) -> Any:
        """Draft rows ``[len(nodes), V]`` of ``nodes`` (node 0: the context's end, first when given), every parent
        scored before or among them; one forward pass."""

    def uniform(self) -> float:
        """The next drafting uniform."""


@dataclass
class ArrayDraft:
    """A round's draft in BFS order: parents, tokens (``tokens[0]`` unused), the draft row of every node the
    drafter sampled from (``None`` elsewhere), the uniforms read, and ``order[v]``, node ``v``'s id in the order
    nodes were added (the draft model's cache holds them so)."""

    parents: list[int]
    tokens: list[int]
    rows: list[Any]
    uniforms: list[float]
    order: list[int] = field(default_factory=list)

    @classmethod
    def grown(cls, parents: Sequence[int], tokens: Sequence[int], rows: dict[int, Any],
              uniforms: list[float]) -> "ArrayDraft":
        """A tree grown in insertion order, renumbered BFS as :func:`simulator.drafting.dyspec.bfs_renumbering`
        numbers the reference's."""
        order, bfs_parents = bfs_renumbering(parents)
        return cls(bfs_parents, [0] + [int(tokens[old]) for old in order[1:]], [rows.get(old) for old in order],
                   uniforms, order)


class ArrayDrafter(Protocol):
    scheme: str

    def draft(self, source: RoundSource) -> ArrayDraft: ...

    def advance(self, context: Sequence[int]) -> "ArrayDrafter": ...


def _uniforms(source: RoundSource, count: int, used: list[float], like: Any) -> Any:
    xp = array_namespace(like)
    values = [source.uniform() for _ in range(count)]
    used.extend(values)
    return xp.asarray([values], dtype=xp.float64, device=device(like))


@dataclass(frozen=True)
class LevelDrafter:
    """A fixed shape: each level's growing nodes scored in one pass, their children drawn by the scheme's kernel
    (:data:`ARRAY_SCHEMES`), node by node in BFS order."""

    reference: FixedShape

    @property
    def scheme(self) -> str:
        return self.reference.scheme

    def draft(self, source: RoundSource) -> ArrayDraft:
        draw = array_scheme(self.reference.scheme)
        parents = list(self.reference.topology.parents)
        children: list[list[int]] = [[] for _ in parents]
        for v in range(1, len(parents)):
            children[parents[v]].append(v)
        tokens, rows, used = [0] * len(parents), [None] * len(parents), []
        for level in self.reference.topology.levels():
            growing = [v for v in level if children[v]]
            if not growing:
                break
            for v, row in zip(growing, source.rows(parents, tokens, growing)):
                rows[v] = row
                kids = draw(row[None, :], _uniforms(source, len(children[v]), used, row))[0]
                for kid, token in zip(children[v], kids.tolist()):
                    tokens[kid] = int(token)
        return ArrayDraft(parents, tokens, rows, used, list(range(len(parents))))

    def advance(self, context: Sequence[int]) -> "LevelDrafter":
        return self


def _sample_slot(residual: Any, u: Any) -> tuple[int, float, Any]:
    """:func:`simulator.drafting.dyspec._sample_slot` on an array row: ``y``, ``R[y]`` and ``R`` without ``y``
    renormalised (left-to-right sum, as the reference's; ``None`` when no mass is left)."""
    xp = array_namespace(residual)
    y = int(categorical(residual[None, :], u)[0])
    share = float(residual[y])
    rest = xp.where(xp.arange(residual.shape[0], device=device(residual)) == y, xp.zeros_like(residual), residual)
    mass = row_sum(rest[None, :])[0]
    return y, share, (rest / mass if float(mass) > 0 else None)


class _Grown:
    """A kernel's :class:`simulator.drafting.dyspec.Grower`: a tree grown in insertion order whose draft rows are
    scored lazily (:meth:`row` feeds every node added since the last pass in one batch), draws made from the
    source's uniforms."""

    one = 1.0

    def __init__(self, source: RoundSource) -> None:
        self.source = source
        self.parents, self.tokens = [-1], [0]
        self.rows: dict[int, Any] = {}
        self.pending = [0]
        self.used: list[float] = []

    def add(self, parent: int, token: int) -> int:
        self.parents.append(parent)
        self.tokens.append(token)
        self.pending.append(len(self.parents) - 1)
        return len(self.parents) - 1

    def row(self, node: int) -> Any:
        if node not in self.rows:
            batch, self.pending = self.pending, []
            self.rows.update(zip(batch, self.source.rows(self.parents, self.tokens, batch)))
        return self.rows[node]

    def sample(self, residual: Any) -> tuple[int, float, Any]:
        return _sample_slot(residual, _uniforms(self.source, 1, self.used, residual)[0])

    def draft(self) -> ArrayDraft:
        sampled = {v: row for v, row in self.rows.items() if v in set(self.parents)}
        return ArrayDraft.grown(self.parents, self.tokens, sampled, self.used)


@dataclass(frozen=True)
class DySpecArrays:
    """DySpec's trees (:class:`simulator.drafting.dyspec.DySpecBudget`'s Alg. 1, :class:`DySpecThreshold`'s
    Alg. 2) grown by the reference's own loop (its ``grow``) on array rows:
    a node's row is scored when it is first sampled from, with every node added since the last pass."""

    reference: DySpecBudget | DySpecThreshold

    @property
    def scheme(self) -> str:
        return self.reference.scheme

    def draft(self, source: RoundSource) -> ArrayDraft:
        tree = _Grown(source)
        self.reference.grow(tree)
        return tree.draft()

    def advance(self, context: Sequence[int]) -> "DySpecArrays":
        return self


@dataclass(frozen=True)
class AdedArrays:
    """ADED (:class:`simulator.drafting.aded.Aded`): the reference's candidates and tree, and its rows (the tri-gram
    table's scores normalised, uniform where the table has no row) written into arrays entry by entry, each the
    exact quotient rounded once as the reference's. No draft model is read."""

    reference: Aded

    @property
    def scheme(self) -> str:
        return self.reference.scheme

    def draft(self, source: RoundSource) -> ArrayDraft:
        xp = array_namespace(source.like)
        context = tuple(source.context)
        tree = candidate_tree(cached_candidates(self.reference.table, context, self.reference.config),
                              source.vocab)
        rows: list[Any] = []
        for v in range(len(tree)):
            if not tree.children(v):
                rows.append(None)
                continue
            scores = self.reference.table.row(*((START, START) + context + tree.path(v))[-2:])
            on = device(source.like)
            if not scores:
                rows.append(xp.full((source.vocab,), float(Fraction(1, source.vocab)), dtype=xp.float64, device=on))
                continue
            mass = sum(s for _, s in scores)
            row = xp.zeros((source.vocab,), dtype=xp.float64, device=on)
            row[xp.asarray([x for x, _ in scores], device=on)] = xp.asarray([float(s / mass) for _, s in scores],
                                                                            dtype=xp.float64, device=on)
            rows.append(row)
        return ArrayDraft(list(tree.parents), [0] + list(tree.tokens[1:]), rows, [], list(range(len(tree))))

    def advance(self, context: Sequence[int]) -> "AdedArrays":
        return AdedArrays(self.reference.advance(tuple(context)))


#: reference drafter class -> its kernel's constructor
ARRAY_DRAFTERS: dict[type, Callable[[Any], ArrayDrafter]] = {
    FixedShape: LevelDrafter,
    DySpecBudget: DySpecArrays,
    DySpecThreshold: DySpecArrays,
    Aded: AdedArrays,
}


def array_drafter(drafter: Any) -> ArrayDrafter:
    """The kernel of a reference drafter (a kernel is returned as it is), or a typed error naming the drafters that
    have one.

    Each kernel draws as its reference drafter does on the same rows and uniforms, read in the same order (tested
    decision by decision). It asks for draft rows through :class:`RoundSource` only when a draw needs them, feeding
    every node added since the last pass in one batch, so a round costs as few draft passes as the drafter's order
    allows. Rows stay on the model's device.
    """
    if type(drafter) in ARRAY_DRAFTERS.values():
        return drafter
    make = ARRAY_DRAFTERS.get(type(drafter))
    if make is None:
        raise InvalidParameterError("drafting", f"{getattr(drafter, 'scheme', drafter)!r} has no array kernel; "
                                                "the real path drafts fixed shapes, DySpec and ADED")
    if isinstance(drafter, FixedShape):
        array_scheme(drafter.scheme)
    return make(drafter)
