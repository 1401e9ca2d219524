"""Drafting on demand for the exact engine (docs/engines.md, "Lazy drafting"): a :class:`LazyDraft` draws a token,
from the eager drafter's own scheme code, only when it is first read; tokens never read are never drawn, and the
law is unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, Iterator

from ..models import ModelView
from ..numeric import Number
from ..randomness import Randomness
from ..trees import Topology, TreeStructure, node_children, node_depths

#: A drafting scheme (:data:`simulator.drafting.SCHEMES`): a node's children from its draft row, one per ``next``.
Sampler = Callable[[Sequence[Number], int, Randomness], Iterator[int]]

#: The most contexts :func:`lazy_drafter` reads to decide that every inner node gets all its children: a few
#: seconds of a synthetic model's rows (0.3 ms each), so that a tree too large to certify is refused promptly.
MAX_SUPPORT_CONTEXTS = 10_000


class LazyDraft:
    """One round's draft of ``topology`` whose tokens are drawn from ``rng`` when first read. ``tree``, ``p`` and
    ``q`` are what a verifier receives (as :class:`~simulator.drafting.Draft`'s fields).

    Reading a token first draws its ancestors' and earlier siblings' tokens, each from the eager drafter's own
    scheme code (:data:`simulator.drafting.SCHEMES`).
    """

    def __init__(self, topology: Topology, view: ModelView, sample: Sampler, rng: Randomness) -> None:
        self._view, self._rng, self._sample = view, rng, sample
        self.tree = LazyTree(self, topology.parents)
        self._tokens: list[int | None] = [None] * len(topology.parents)
        self._drawn = [True] + [False] * (len(topology.parents) - 1)
        self._children: dict[int, Iterator[int]] = {}  # a node's scheme, part-way through its children
        self.p: Sequence = _Drawn(len(self.tree.parents), lambda v: self.row("p", v))
        self.q: Sequence = _Drawn(len(self.tree.parents), lambda v: self.row("q", v))

    def token(self, v: int) -> int | None:
        """Node ``v``'s token (``None`` at the root), drawn with what it is conditioned on if not drawn yet."""
        if not self._drawn[v]:
            parent = self.tree.parents[v]
            sampler = self._children.get(parent)
            if sampler is None:
                row = self._view.p(self.tree.path(parent))
                sampler = self._children[parent] = self._sample(row, len(self.tree.children(parent)), self._rng)
            for sibling in self.tree.children(parent):  # earlier siblings first, in the scheme's order
                if not self._drawn[sibling]:
                    token = next(sampler, None)
                    if token is None:  # lazy_drafter checked every such row: an engine bug, not input
                        raise RuntimeError(f"node {parent}'s draft row ran out of tokens under lazy drafting")
                    self._tokens[sibling], self._drawn[sibling] = token, True
                if sibling == v:
                    break
        return self._tokens[v]

    def row(self, name: str, v: int) -> tuple[Number, ...] | None:
        if name == "p" and not self.tree.children(v):
            return None  # a leaf carries no draft row (as Draft)
        return getattr(self._view, name)(self.tree.path(v))


class LazyTree(TreeStructure):
    """The tree a verifier receives from a :class:`LazyDraft`: :class:`~simulator.trees.DraftTree`'s interface
    (``parents``, ``tokens``, ``children``, ``depth``, ``path``, ``height``, ``is_chain``, ``chain_nodes``), the
    structure fixed, the tokens drawn when read (``tokens[v]``, ``path(v)``)."""

    def __init__(self, draft: LazyDraft, parents: tuple[int, ...]) -> None:
        self.parents = parents
        self._children = [tuple(c) for c in node_children(parents)]
        self._depths = node_depths(parents)
        self.tokens: Sequence = _Drawn(len(parents), draft.token)
        self._draft = draft
        self._paths: dict[int, tuple[int, ...]] = {0: ()}

    def path(self, v: int) -> tuple[int, ...]:
        path = self._paths.get(v)
        if path is None:
            path = self._paths[v] = self.path(self.parents[v]) + (self._draft.token(v),)
        return path

    def __repr__(self) -> str:  # shows what is drawn; never draws
        shown = ["?" if not self._draft._drawn[v] else self._draft._tokens[v] for v in range(len(self.parents))]
        return f"LazyTree(parents={list(self.parents)}, tokens={shown})"


class _Drawn(Sequence):
    """A sequence over a round's nodes whose entries are computed when read (``get(v)``): the tokens, the rows."""

    def __init__(self, size: int, get: Callable[[int], object]) -> None:
        self._size, self._get = size, get

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, v):  # type: ignore[override]
        if isinstance(v, slice):
            return tuple(self[i] for i in range(self._size)[v])
        if not -self._size <= v < self._size:
            raise IndexError(v)
        return self._get(v % self._size)


def lazy_drafter(topology: Topology, view: ModelView, sample: Sampler,
                 never_short: bool) -> Callable[[Randomness], LazyDraft] | None:
    """A function drafting ``topology`` lazily from ``view`` with the scheme ``sample`` (one :class:`LazyDraft` per
    execution), or ``None`` when node ids could depend on the draws (the verifier sees the topology's BFS ids, the
    drafted tree's only when every node with children gets all of them: unless the scheme always gives every
    child, ``never_short``, when some reachable draft row of a node with children has fewer positive tokens than
    the node has children, or there are more than :data:`MAX_SUPPORT_CONTEXTS` such rows), and for a model that scores a
    tree's rows together (``batch_rows``: a causal LM's tree-attention pass, whose rows — bugs included — are what
    a certificate of it must cover; drawn row by row they would come from other passes)."""
    if getattr(view.model, "batch_rows", None) is not None:
        return None  # a causal LM scores a whole tree in one pass (tree attention): that pass is what is certified
    if not never_short and not _full_support(topology, view):
        return None
    return lambda rng: LazyDraft(topology, view, sample, rng)


def _full_support(topology: Topology, view: ModelView) -> bool:
    """Whether every draft row an inner node can have (at a context reachable through positive draft tokens)
    has at least as many positive tokens as the most children of a node at that depth."""
    children = node_children(topology.parents)
    depths = node_depths(topology.parents)
    need = [0] * (max(depths) + 1)
    for v, kids in enumerate(children):
        need[depths[v]] = max(need[depths[v]], len(kids))
    contexts: list[tuple[int, ...]] = [()]
    seen = 1
    for depth, width in enumerate(need):
        if width == 0:
            break  # nothing deeper has children (BFS levels)
        deeper = []
        for context in contexts:
            positive = [x for x, w in enumerate(view.p(context)) if w > 0]
            if len(positive) < width:
                return False
            if depth + 1 < len(need) and need[depth + 1]:
                deeper.extend(context + (x,) for x in positive)
        seen += len(deeper)
        if seen > MAX_SUPPORT_CONTEXTS:
            return False
        contexts = deeper
    return True


class Eager:
    """``drafter`` with drafting on demand switched off: the exact engine drafts every tree whole, as it did
    before drafting on demand. The second method the lazy engine is checked against (tests/test_lazy_draft.py)
    and the "before" of ``benchmarks/exact_scale.py``."""

    def __init__(self, drafter: object) -> None:
        self.drafter = drafter

    def __getattr__(self, name: str) -> object:
        if name == "lazy":
            raise AttributeError(name)
        return getattr(self.drafter, name)
