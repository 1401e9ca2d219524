"""DySpec's dynamic token trees (Xiong et al., arXiv:2410.11744, Algs. 1–2; corrections in docs/corrections.md):
:class:`DySpecBudget` fills the most valuable sampling slot up to a budget, :class:`DySpecThreshold` grows layer by
layer above a threshold."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Protocol, Sequence

from ..errors import InvalidParameterError
from ..models import Context, ModelView
from ..numeric import Number, normalise, rational, total
from ..randomness import Randomness
from ..trees import MAX_TREE_NODES, DraftTree
from .shapes import Draft


def _sample_slot(residual: Sequence[Number], rng: Randomness) -> tuple[int, Number, tuple[Number, ...] | None]:
    """Draw ``y ~ R``; return ``y``, ``R[y]`` and ``R`` without ``y`` renormalised (``None`` when empty)."""
    y = rng.categorical(residual)
    share = residual[y]
    rest = [r * 0 if x == y else r for x, r in enumerate(residual)]
    return y, share, normalise(rest) if total(rest) > 0 else None


class Grower(Protocol):
    """A tree being grown node by node, for :func:`grow_greedy` and :func:`grow_by_threshold`: the reference's
    (:class:`_Growing`, rows from a view, draws through the randomness interface) or an array kernel's
    (:mod:`simulator.drafting.arrays`)."""

    one: Number

    def row(self, node: int) -> Sequence[Number]:
        """``node``'s draft row."""

    def sample(self, residual: Sequence[Number]) -> tuple[int, Number, Sequence[Number] | None]:
        """:func:`_sample_slot` on ``residual``."""

    def add(self, parent: int, token: int) -> int:
        """A new node under ``parent``; its id."""


def grow_greedy(budget: int, tree: Grower) -> None:
    """Alg. 1 on ``tree``: ``budget`` nodes, each from the slot of largest value. Slots are (−value, opening order,
    node, residual); the order breaks ties first-opened first. A node's first slot holds ``None`` until it is
    popped, when the node's draft row is read: a node never sampled from (the last ones, once the budget is spent)
    has no row read.

    Each sampling slot has an estimated value ``v``: a slot at node ``u`` samples ``y`` from ``u``'s residual ``R``
    and opens ``u``'s next sibling slot (value ``v·(1 − R[y])``) and the new node's first child slot (``v·R[y]``).
    The shape depends on the tokens drawn (all through the randomness interface), so Layer Verification is undefined
    on these trees (docs/rules.md).
    """
    heap: list[tuple[Number, int, int, Sequence[Number] | None]] = [(-tree.one, 0, 0, None)]
    opened, added = 1, 0
    while added < budget and heap:
        neg_value, _, node, residual = heapq.heappop(heap)
        y, share, rest = tree.sample(tree.row(node) if residual is None else residual)
        new = tree.add(node, y)
        added += 1
        if rest is not None:
            heapq.heappush(heap, (neg_value * (1 - share), opened, node, rest))
        heapq.heappush(heap, (neg_value * share, opened + 1, new, None))
        opened += 2


def grow_by_threshold(threshold: float, max_depth: int, tree: Grower) -> None:
    """Alg. 2 on ``tree``: layer by layer to ``max_depth``, each node of value at least ``threshold`` sampled (its
    row read) while its value stays at or above it."""
    layer: list[tuple[int, Number]] = [(0, tree.one)]
    for _ in range(max_depth):
        next_layer = []
        for node, value in layer:
            if value < threshold:
                continue
            residual: Sequence[Number] | None = tree.row(node)
            while residual is not None and value >= threshold:
                y, share, residual = tree.sample(residual)
                next_layer.append((tree.add(node, y), value * share))
                value = value * (1 - share)
        layer = next_layer


class _Growing:
    """The reference's tree, grown node by node (each after its parent, in any order), rows read from ``view``
    and draws made through ``rng``; :meth:`draft` renumbers it in BFS order, children in the order they were
    sampled, with the rows of ``view``."""

    def __init__(self, view: ModelView, rng: Randomness) -> None:
        self.view, self.rng = view, rng
        self.parents: list[int] = [-1]
        self.tokens: list[int | None] = [None]
        self.paths: list[Context] = [()]
        self.one: Number = rational(1) if view.arithmetic == "fraction" else 1.0

    def row(self, node: int) -> Sequence[Number]:
        return self.view.p(self.paths[node])

    def sample(self, residual: Sequence[Number]) -> tuple[int, Number, Sequence[Number] | None]:
        return _sample_slot(residual, self.rng)

    def add(self, parent: int, token: int) -> int:
        self.parents.append(parent)
        self.tokens.append(token)
        self.paths.append(self.paths[parent] + (token,))
        return len(self.parents) - 1

    def draft(self) -> Draft:
        order, parents = bfs_renumbering(self.parents)
        tree = DraftTree(parents, [None] + [self.tokens[old] for old in order[1:]], self.view.vocab)
        return Draft.of(tree, self.view)


def bfs_renumbering(parents: Sequence[int]) -> tuple[list[int], list[int]]:
    """A tree grown node by node (``parents[i] < i``) in BFS order, children in the order they were added:
    ``order[new] = old`` and the renumbered parent list."""
    children: list[list[int]] = [[] for _ in parents]
    for node in range(1, len(parents)):
        children[parents[node]].append(node)
    order = [0]
    for node in order:
        order.extend(children[node])
    new_id = {old: new for new, old in enumerate(order)}
    return order, [-1] + [new_id[parents[old]] for old in order[1:]]


def _check_int(value: object, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidParameterError(field, f"must be an integer ≥ {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class DySpecBudget:
    """Alg. 1: the greedy dynamic tree with ``budget`` draft tokens, filling the slot of largest value. Correction:
    Alg. 1 adds the node before sampling ``y`` (line 6 before 7); we sample first. Ties between equal values go to
    the slot opened first (a FIFO heap), so the tree is a function of the tokens."""

    budget: int
    scheme: str = "dyspec"
    size_options = ("budget",)

    def __post_init__(self) -> None:
        _check_int(self.budget, "budget", 1)
        if self.budget >= MAX_TREE_NODES:
            raise InvalidParameterError("budget", f"{self.budget:,} draft tokens: a draft tree may have at most "
                                                  f"{MAX_TREE_NODES:,} nodes")

    def log10_trees(self, vocab: int) -> float:
        """Each of the ``budget`` draft tokens is one categorical choice among at most ``V`` tokens."""
        return self.budget * math.log10(vocab)

    @property
    def height(self) -> int:
        return self.budget

    def grow(self, tree: Grower) -> None:
        """Grow ``tree`` (the reference's, or an array kernel's: the same loop)."""
        grow_greedy(self.budget, tree)

    def draft(self, view: ModelView, rng: Randomness) -> Draft:
        tree = _Growing(view, rng)
        self.grow(tree)
        return tree.draft()

    def advance(self, generated: Context) -> "DySpecBudget":
        return self

    def describe(self) -> dict:
        return {"drafting": self.scheme, "budget": self.budget}


@dataclass(frozen=True)
class DySpecThreshold:
    """Alg. 2: sample at a node while its value is at least ``threshold``, layer by layer, to ``max_depth``.
    Corrections: Alg. 2's ``while v_i < t`` is inverted (read ``v_i ≥ t``), and the depth is capped (with a one-hot
    ``p`` the value never falls and the tree would never stop)."""

    threshold: float
    max_depth: int
    scheme: str = "dyspec-threshold"
    size_options = ("threshold", "max-depth")

    def __post_init__(self) -> None:
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 1:
            raise InvalidParameterError("threshold", f"must lie in (0, 1], got {t!r}")
        _check_int(self.max_depth, "max_depth", 1)
        if self.max_depth >= MAX_TREE_NODES:
            raise InvalidParameterError("max_depth", f"{self.max_depth:,} layers: a draft tree may have at most "
                                                     f"{MAX_TREE_NODES:,} nodes")

    def log10_trees(self, vocab: int) -> float:
        """A layer's values sum to at most 1, so at most ``⌊1/t⌋`` of its nodes sample; a sampling node draws a
        sequence of distinct tokens, one of at most ``Σ_c V!/(V−c)! ≤ e·V!``."""
        cap = math.floor(1 / self.threshold)
        sampling = total = 1  # the root samples
        for _ in range(self.max_depth - 1):
            sampling = min(sampling * vocab, cap)
            total += sampling
        return total * (math.lgamma(vocab + 1) / math.log(10) + math.log10(math.e))

    @property
    def height(self) -> int:
        return self.max_depth

    def grow(self, tree: Grower) -> None:
        """Grow ``tree`` (the reference's, or an array kernel's: the same loop)."""
        grow_by_threshold(self.threshold, self.max_depth, tree)

    def draft(self, view: ModelView, rng: Randomness) -> Draft:
        tree = _Growing(view, rng)
        self.grow(tree)
        return tree.draft()

    def advance(self, generated: Context) -> "DySpecThreshold":
        return self

    def describe(self) -> dict:
        return {"drafting": self.scheme, "threshold": self.threshold, "max_depth": self.max_depth}
