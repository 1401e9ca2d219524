"""Hypothesis strategies for a user's property tests: the model pairs and draft-tree shapes specproof certifies
on, drawn so that a failure shrinks to a small vocabulary, a shallow tree and simple rows (docs/gate.md)."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from hypothesis import strategies as st

from simulator.errors import InvalidParameterError
from simulator.models import ModelPair, RandomRationalModel, SyntheticModel, TableModel
from simulator.trees import Topology, make_topology

#: the model kinds :func:`model_pairs` draws from
PAIR_KINDS = ("table", "random-rational", "synthetic")
#: the named shapes :func:`tree_shapes` draws from, and ``explicit``: any BFS-ordered tree within the bounds
SHAPE_KINDS = ("chain", "multi-chain", "complete", "tapered", "binary", "explicit")


def model_pairs(vocab: Sequence[int] = (2, 3), kinds: Sequence[str] = PAIR_KINDS,
                max_weight: int = 4) -> st.SearchStrategy[ModelPair]:
    """Model pairs ``(p, q)`` as ``exact.certify`` takes them.

    Parameters
    ----------
    vocab
        The vocabulary sizes to draw from (each ≥ 1).
    kinds
        Of :data:`PAIR_KINDS`: ``table``, one context-free pair of rows drawn here, integer weights in
        ``0..max_weight`` (each row with some mass) as exact fractions, which shrink towards uniform rows;
        ``random-rational``, rows per context from a seed, zeros included (exact); ``synthetic``, the correlated
        softmax pair (similarity ``ρ``, temperatures ``τ_p``, ``τ_q``; float rows).
    max_weight
        The largest integer weight of a ``table`` row.

    Returns
    -------
    A strategy of :class:`simulator.models.ModelPair`.

    Raises
    ------
    InvalidParameterError
        An unknown kind, an empty ``vocab``, a size below 1, or ``max_weight`` below 1 (field named).
    """
    _check_choices(kinds, PAIR_KINDS, "kinds")
    sizes = _sizes(vocab, "vocab", 1)
    if isinstance(max_weight, bool) or not isinstance(max_weight, int) or max_weight < 1:
        raise InvalidParameterError("max_weight", f"must be an integer ≥ 1, got {max_weight!r}")
    seeds = st.integers(0, 2**31 - 1)
    by_kind = {
        "table": st.sampled_from(sizes).flatmap(lambda v: st.builds(
            lambda p, q: TableModel(v, {None: p}, {None: q}), _row(v, max_weight), _row(v, max_weight))),
        "random-rational": st.builds(lambda v, seed, zero: RandomRationalModel(v, seed, zero_prob=zero),
                                     st.sampled_from(sizes), seeds, st.sampled_from((0.0, 0.25, 0.5))),
        "synthetic": st.builds(SyntheticModel, st.sampled_from(sizes), st.sampled_from((0.0, 0.5, 0.9, 1.0)),
                               st.sampled_from((0.5, 1.0, 2.0)), st.sampled_from((0.5, 1.0, 2.0)), seeds),
    }
    return st.one_of([by_kind[kind] for kind in kinds])


def tree_shapes(depths: Sequence[int] = (1, 2), branchings: Sequence[int] = (1, 2), kinds: Sequence[str] = SHAPE_KINDS,
                max_nodes: int = 8) -> st.SearchStrategy[Topology]:
    """Draft-tree shapes as ``FixedShape(shape, scheme)`` takes them.

    Parameters
    ----------
    depths, branchings
        The depths ``H`` and branchings ``b`` of the named shapes (:data:`SHAPE_KINDS`; ``binary`` has ``b = 2``).
    kinds
        The shapes to draw; ``explicit`` draws any tree in BFS order with at most ``max_nodes`` nodes, a depth
        among ``depths`` at most and at most ``max(branchings)`` children a node.
    max_nodes
        The most nodes of a drawn tree, the root included: a named shape larger than this is not drawn.

    Returns
    -------
    A strategy of :class:`simulator.trees.Topology`.

    Raises
    ------
    InvalidParameterError
        An unknown kind, an empty or negative size list, or bounds no shape fits (field named).
    """
    _check_choices(kinds, SHAPE_KINDS, "kinds")
    depth_list, branching_list = _sizes(depths, "depths", 0), _sizes(branchings, "branchings", 1)
    named = [make_topology(kind, depth, branching) for kind in kinds if kind != "explicit" for depth in depth_list
             for branching in ((2,) if kind == "binary" else branching_list)]
    named = list({(t.name, t.parents): t for t in named if len(t.parents) <= max_nodes}.values())
    options = [st.sampled_from(named)] if named else []
    if "explicit" in kinds:
        options.append(_explicit(max(depth_list), max(branching_list), max_nodes))
    if not options:
        raise InvalidParameterError("max_nodes", f"no shape of {list(kinds)} fits within {max_nodes} nodes")
    return st.one_of(options)


def _row(vocab: int, max_weight: int) -> st.SearchStrategy[list[Fraction]]:
    """A row of ``vocab`` exact probabilities from integer weights, at least one positive."""
    weights = st.lists(st.integers(0, max_weight), min_size=vocab, max_size=vocab).filter(any)
    return weights.map(lambda w: [Fraction(x, sum(w)) for x in w])


@st.composite
def _explicit(draw, max_depth: int, max_children: int, max_nodes: int) -> Topology:
    """A BFS-ordered tree: each node of the level being grown gets 0..max_children children, level by level."""
    parents, level = [-1], [0]
    for _ in range(max_depth):
        nxt = []
        for node in level:
            room = min(max_children, max_nodes - len(parents))
            for _ in range(draw(st.integers(0, room))):
                nxt.append(len(parents))
                parents.append(node)
        if not nxt:
            break
        level = nxt
    return make_topology("explicit", parents=parents)


def _check_choices(chosen: Sequence[str], allowed: Sequence[str], field: str) -> None:
    if isinstance(chosen, str) or not chosen or any(c not in allowed for c in chosen):
        raise InvalidParameterError(field, f"must be a non-empty list drawn from {list(allowed)}, got {chosen!r}")


def _sizes(values: Sequence[int], field: str, low: int) -> list[int]:
    if isinstance(values, (str, int)) or not values or any(
            isinstance(v, bool) or not isinstance(v, int) or v < low for v in values):
        raise InvalidParameterError(field, f"must be a non-empty list of integers ≥ {low}, got {values!r}")
    return sorted(set(values))
