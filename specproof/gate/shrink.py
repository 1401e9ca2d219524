"""Shrinking a lossy case to a small reproducer, deterministically and within a time bound (:func:`shrink`;
docs/gate.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Iterator

from simulator.errors import SpecproofError
from simulator.limits import until
from simulator.models import Context, RandomRationalModel
from simulator.numeric import Number, normalise
from simulator.trees import node_depths

from exact.certificate import Certificate
from exact.reproducer import Reproducer, pruned
from exact.subject import Subject, subject

#: the denominators rows are rounded to, simplest first
DENOMINATORS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
#: row sets of the battery generator tried on a smaller shape or vocabulary
RESEEDS = 8


@dataclass(frozen=True)
class Shrunk:
    """The smallest lossy case found, its certificate, how many moves were kept and whether the search ended
    by itself (``complete``) or at the time bound."""

    case: Reproducer
    certificate: Certificate
    kept: int
    tried: int
    complete: bool


def shrink(case: Reproducer, time_limit: float = 10.0, what: Subject | None = None) -> Shrunk:
    """Shrink a lossy ``case``: the moves, in order, repeated until none applies or ``time_limit`` seconds pass.
    Raises ``ValueError`` if ``case`` itself is not lossy.

    In the manner of Hypothesis's shrinker: moves that make the case smaller (:meth:`Reproducer.size`: fewer draft
    nodes, then a smaller vocabulary, depth and branching, then more zeros and smaller denominators in the rows) are
    tried in a fixed order, and one is kept only when the subject still certifies LOSSY on the result, exactly. A
    candidate that cannot be certified counts as not lossy.
    """
    what = what or subject(case.subject, "case.subject")
    deadline = time.monotonic() + time_limit
    best = pruned(case)
    cert = best.certify(what)  # the case given is certified whole, however long it takes (no time bound)
    if cert.lossless:
        raise ValueError("shrink needs a lossy case: this one certifies lossless")
    kept = tried = 0
    complete = False
    while time.monotonic() < deadline:
        improved = False
        for moves in (_fewer_nodes, _smaller_vocab, _simpler_rows):
            progress = True
            while progress and time.monotonic() < deadline:
                progress = False
                for candidate in moves(best, what):
                    if time.monotonic() >= deadline:
                        break
                    if candidate.size() >= best.size():
                        continue
                    tried += 1
                    found = _lossy(candidate, what, deadline)
                    if found is not None:
                        best, cert, kept, progress, improved = pruned(candidate), found, kept + 1, True, True
                        break
        if not improved:
            complete = time.monotonic() < deadline
            break
    return Shrunk(best, cert, kept, tried, complete)


def _lossy(case: Reproducer, what: Subject, deadline: float) -> Certificate | None:
    """The certificate of a lossy ``case``; ``None`` when it is lossless, cannot be certified, or its
    certification runs past ``deadline``."""
    try:
        with until(deadline):
            cert = case.certify(what)
    except SpecproofError:
        return None
    return None if cert.lossless else cert


def _fewer_nodes(case: Reproducer, what: Subject) -> Iterator[Reproducer]:
    """Drop the tree's deepest level or one leaf (where the subject is still defined) with the case's rows; then
    every smaller shape, fewest nodes first, at each vocabulary from 2 to the case's, with each of :data:`RESEEDS`
    row sets of the battery generator (:class:`RandomRationalModel`). DySpec: a lower budget or depth."""
    if case.parents is None:
        for key in ("budget", "max_depth"):
            if case.options.get(key, 0) > 1:
                smaller = replace(case, options={**case.options, key: case.options[key] - 1})
                yield smaller
                yield from _reseeded(smaller)
        return
    for shape in _subtrees(case.parents):
        if what.allows(shape):
            yield replace(case, parents=shape)
    for nodes in range(1, len(case.parents) - 1):  # every smaller shape, fewest nodes first
        for shape in bfs_shapes(nodes):
            if what.allows(shape):
                for vocab in range(2, case.vocab + 1):
                    yield from _reseeded(replace(case, parents=shape, vocab=vocab))


def _subtrees(parents: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The tree without its deepest level, then without each one leaf (last first): the case's rows still fit."""
    depths = node_depths(parents)
    out = []
    if max(depths) > 1:
        out.append(tuple(par for v, par in enumerate(parents) if depths[v] < max(depths)))
    for leaf in range(len(parents) - 1, 0, -1):
        if leaf not in parents[1:]:
            out.append(tuple(par if par < leaf else par - 1 for v, par in enumerate(parents) if v != leaf))
    return [shape for shape in out if len(shape) > 1]


def bfs_shapes(nodes: int) -> Iterator[tuple[int, ...]]:
    """Every BFS-ordered parent list with ``nodes`` draft nodes (parents non-decreasing, each an earlier node),
    shallowest first."""
    def grow(parents: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if len(parents) == nodes + 1:
            yield parents
            return
        low = parents[-1] if len(parents) > 1 else 0
        for par in range(low, len(parents)):
            yield from grow(parents + (par,))

    yield from sorted(grow((-1,)), key=lambda ps: (max(node_depths(ps)), ps))


def _smaller_vocab(case: Reproducer, what: Subject) -> Iterator[Reproducer]:
    """Remove a token from the vocabulary (its entries dropped and each row renormalised; contexts holding it
    dropped), then the smaller vocabulary with the generator's row sets."""
    if case.vocab <= 1:
        return
    for token in range(case.vocab - 1, -1, -1):
        tables = [_without_token(table, token) for table in (case.p, case.q, *case.drafts)]
        if all(table is not None for table in tables):
            yield replace(case, vocab=case.vocab - 1, p=tables[0], q=tables[1], drafts=tuple(tables[2:]))
    yield from _reseeded(replace(case, vocab=case.vocab - 1))


def _reseeded(case: Reproducer) -> Iterator[Reproducer]:
    """``case``'s shape with the rows of the generator behind every battery (:class:`RandomRationalModel`,
    seeds ``0..RESEEDS-1``) on every context up to the case's depth: where the case's own rows cannot follow a
    smaller shape, another row set of the same generator may."""
    contexts = [()]
    frontier: list[Context] = [()]
    for _ in range(case.depth):
        frontier = [ctx + (t,) for ctx in frontier for t in range(case.vocab)]
        contexts += frontier
    for seed in range(RESEEDS):
        model = RandomRationalModel(case.vocab, seed, draft_models=1 + len(case.drafts))
        drafts = [{c: tuple(model.draft_rows(c)[i]) for c in contexts} for i in range(1, model.draft_models)]
        yield replace(case, p={c: tuple(model.p(c)) for c in contexts}, q={c: tuple(model.q(c)) for c in contexts},
                      drafts=tuple(drafts))


def _without_token(table: dict[Context, tuple[Number, ...]], token: int) -> dict | None:
    out = {}
    for ctx, row in table.items():
        if token in ctx:
            continue
        rest = row[:token] + row[token + 1:]
        if sum(rest) == 0:
            return None
        out[tuple(t - (t > token) for t in ctx)] = normalise(rest)
    return out


def _simpler_rows(case: Reproducer, what: Subject) -> Iterator[Reproducer]:
    """Simplify one row: zero an entry, make the row uniform on its support, or round it to ``k/d`` for a small
    ``d`` (:data:`DENOMINATORS`; a row is changed only where the certification reads it)."""
    for ctx in sorted(set(case.p) | set(case.q), key=lambda c: (len(c), c)):
        for name in ("p", "q", *range(len(case.drafts))):  # an int: that draft model's table (case.drafts)
            table = case.drafts[name] if isinstance(name, int) else getattr(case, name)
            if ctx not in table:
                continue
            for row in _simpler(table[ctx]):
                if isinstance(name, int):
                    yield replace(case, drafts=(*case.drafts[:name], {**table, ctx: row}, *case.drafts[name + 1:]))
                else:
                    yield replace(case, **{name: {**table, ctx: row}})


def _simpler(row: tuple[Number, ...]) -> Iterator[tuple[Number, ...]]:
    """Rows simpler than ``row``: one entry zeroed, uniform on the support, rounded to ``k/d``."""
    for x, v in enumerate(row):
        rest = row[:x] + (v * 0,) + row[x + 1:]
        if v != 0 and sum(rest) != 0:
            yield normalise(rest)
    support = [v != 0 for v in row]
    yield tuple(Fraction(int(s), sum(support)) for s in support)
    for d in DENOMINATORS:
        yield _rounded(row, d)


def _rounded(row: tuple[Number, ...], d: int) -> tuple[Fraction, ...]:
    """The row as multiples of ``1/d`` summing to 1 (largest remainders round up)."""
    scaled = [Fraction(v) * d for v in row]
    units = [int(s) for s in scaled]
    order = sorted(range(len(row)), key=lambda i: (-(scaled[i] - units[i]), i))
    for i in order[: d - sum(units)]:
        units[i] += 1
    return tuple(Fraction(u, d) for u in units)
