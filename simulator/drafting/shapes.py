"""Drafting schemes (docs/drafting.md): how a node's children get their tokens, through the randomness interface
node by node in BFS order, so the exact engine enumerates the draft trees from this very code; the drafter
protocol (:class:`Drafter`) and fixed shapes (:class:`FixedShape`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence

from ..errors import InvalidParameterError
from ..models import Context, ModelView
from ..numeric import Number, total
from ..randomness import Randomness
from ..trees import DraftTree, Topology
from .lazy_draft import LazyDraft, lazy_drafter

DRAFTING: dict[str, str] = {
    "iid": "children drawn i.i.d. from p (with replacement)",
    "without-replacement": "children drawn sequentially from p renormalised over undrafted tokens",
    "almost-greedy": "top c-1 tokens of p, plus one child sampled from the rest (placed last)",
    "greedy-k": "Hu et al.'s greedy draft sampling: the same scheme as almost-greedy, under the paper's name",
    "top-k": "the top c tokens of p, deterministically (ties by token id)",
    "k-models": "child i drawn from draft model i (a model with k ≥ c draft models; Khisti et al.)",
    "hub": "SpecHub's two drafts: x1 ~ p; x2 ~ p without a if x1 is p's top token a, else x2 = a (c = 2)",
}


def top_tokens(p: Sequence[Number], k: int) -> list[int]:
    """The ``k`` most likely tokens with positive mass, by probability then token id."""
    ranked = sorted((x for x in range(len(p)) if p[x] > 0), key=lambda x: (-p[x], x))
    return ranked[:k]


def _iid(p: Sequence[Number], count: int, rng: Randomness) -> Iterator[int]:
    for _ in range(count):
        yield rng.categorical(p)


def _sample_distinct(weights: list[Number], count: int, rng: Randomness) -> Iterator[int]:
    for _ in range(count):
        if total(weights) <= 0:
            return
        x = rng.categorical(weights)
        yield x
        weights[x] = weights[x] * 0


def _without_replacement(p: Sequence[Number], count: int, rng: Randomness) -> Iterator[int]:
    return _sample_distinct(list(p), count, rng)


def _almost_greedy(p: Sequence[Number], count: int, rng: Randomness) -> Iterator[int]:
    fixed = top_tokens(p, count - 1)
    yield from fixed
    yield from _sample_distinct([p[x] * 0 if x in fixed else p[x] for x in range(len(p))], 1, rng)


def _top_k(p: Sequence[Number], count: int, rng: Randomness) -> Iterator[int]:
    return iter(top_tokens(p, count))


def _k_models(p: Sequence[Number], count: int, rng: Randomness) -> Iterator[int]:
    """Child ``i`` drawn from draft model ``i``'s row (``p.models[i]``, :class:`~simulator.models.DraftRows`),
    independently; checked before the first draw."""
    models = getattr(p, "models", None)
    if models is None:
        raise InvalidParameterError("drafting", "k-models draws child i from draft model i, and this model has one "
                                                "draft model: give it several (--rho 0.3,0.8, --draft-models K, or "
                                                "a table's \"drafts\" list; docs/models.md)")
    if count > len(models):
        raise InvalidParameterError("branching", f"k-models draws child i from draft model i: a node has {count} "
                                                 f"children and the model {len(models)} draft models")
    return (rng.categorical(row) for row in models[:count])


def _hub(p: Sequence[Number], count: int, rng: Randomness) -> Iterator[int]:
    """SpecHub's drafts (Sun et al., EMNLP 2024, arXiv:2411.05289): exactly two; ``a`` the top token of ``p``
    (ties by token id), ``x1 ~ p``, then ``x2 ~ p`` renormalised without ``a`` if ``x1 = a``, else ``x2 = a``. So
    ``P(x, a) = p(x)`` and ``P(a, x) = p(a)·p(x)/(1 − p(a))`` for ``x ≠ a``. A row with one positive token gets one
    child, ``a`` (the short-support rule)."""
    if count != 2:
        raise InvalidParameterError("branching", f"the hub scheme drafts exactly 2 children per node, got {count}")
    return _hub_draws(p, rng)


def _hub_draws(p: Sequence[Number], rng: Randomness) -> Iterator[int]:
    hub = top_tokens(p, 1)[0]
    first = rng.categorical(p)
    yield first
    if first != hub:
        yield hub
    else:
        yield from _sample_distinct([p[x] * 0 if x == hub else p[x] for x in range(len(p))], 1, rng)


#: Each scheme yields a node's children one at a time, each drawn when asked for (the lazy exact engine asks only
#: for the children a verifier reads, :mod:`simulator.drafting.lazy_draft`); fewer than asked under short support.
SCHEMES: dict[str, Callable[[Sequence[Number], int, Randomness], Iterator[int]]] = {
    "iid": _iid,
    "without-replacement": _without_replacement,
    "almost-greedy": _almost_greedy,
    "greedy-k": _almost_greedy,  # Hu et al.'s name for the same scheme (docs/drafting.md)
    "top-k": _top_k,
    "k-models": _k_models,
    "hub": _hub,
}


#: the schemes that give every node all its children (with replacement: never short of tokens)
NEVER_SHORT = ("iid", "k-models")

#: log10 of the number of distinct ordered child-token lists a scheme can draft for ``c`` children from ``V``
#: tokens (an upper bound: zeros in ``p`` only lower it).
_LOG10_CHOICES: dict[str, Callable[[int, int], float]] = {
    "iid": lambda c, V: c * math.log10(V),
    "without-replacement": lambda c, V: sum(math.log10(V - i) for i in range(min(c, V))),
    "almost-greedy": lambda c, V: math.log10(max(V - (c - 1), 1)),
    "greedy-k": lambda c, V: _LOG10_CHOICES["almost-greedy"](c, V),
    "top-k": lambda c, V: 0.0,
    "k-models": lambda c, V: c * math.log10(V),
    "hub": lambda c, V: math.log10(2 * max(V - 1, 1)),
}


def draft_models_for(scheme: str, topology: Topology) -> int:
    """How many draft models a model pair needs to draft ``topology`` under ``scheme``: under ``k-models`` one per
    child of the node with the most children, and at least two (docs/drafting.md); one under any other scheme."""
    if scheme != "k-models":
        return 1
    children = [topology.parents[1:].count(v) for v in range(len(topology.parents))]
    return max(2, *children)


#: the schemes defined for one number of children only: every inner node of their shapes must have it
FIXED_BRANCHING: dict[str, int] = {"hub": 2}


def _child_counts(parents: Sequence[int]) -> dict[int, int]:
    """Each inner node's number of children."""
    counts: dict[int, int] = {}
    for par in parents[1:]:
        counts[par] = counts.get(par, 0) + 1
    return counts


def branching_fits(scheme: str, parents: Sequence[int]) -> bool:
    """Whether every inner node of the tree ``parents`` has the number of children ``scheme`` needs, if it needs one
    (:data:`FIXED_BRANCHING`)."""
    need = FIXED_BRANCHING.get(scheme)
    return need is None or set(_child_counts(parents).values()) == {need}


def check_drafting(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise InvalidParameterError("drafting", f"unknown drafting scheme {scheme!r}; choose from {sorted(SCHEMES)}")
    return scheme


@dataclass(frozen=True)
class Draft:
    """A drafted tree with the rows a verifier needs: ``p[v]`` for non-leaf ``v`` (``None`` at leaves),
    ``q[v]`` for every ``v``."""

    tree: DraftTree
    p: tuple[tuple[Number, ...] | None, ...]
    q: tuple[tuple[Number, ...], ...]

    @classmethod
    def of(cls, tree: DraftTree, view: ModelView) -> "Draft":
        """``tree`` with its rows read from ``view``."""
        paths = [tree.path(v) for v in range(len(tree))]
        inner = [v for v in range(len(tree)) if tree.children(v)]
        view.prefetch("p", [paths[v] for v in inner])
        view.prefetch("q", paths)  # a causal LM scores the whole tree in one pass
        return cls(tree, tuple(view.p(paths[v]) if tree.children(v) else None for v in range(len(tree))),
                   tuple(view.q(path) for path in paths))


def draft_tree(topology: Topology, view: ModelView, scheme: str, rng: Randomness) -> Draft:
    """Draft a tree of the given shape from ``view``'s draft model, consuming randomness from ``rng``.

    The schemes (:data:`SCHEMES`; Cha et al., AdaptFM at ICML 2026, App. D.1): ``iid`` (with replacement),
    ``without-replacement``, ``almost-greedy`` (the top ``c − 1`` tokens, then one sampled from the rest; Hu et al.,
    ICLR 2025, arXiv:2502.18779, whose "greedy draft sampling" it is: ``greedy-k`` names the same function),
    ``top-k`` (deterministic), ``k-models`` (child ``i`` from draft model ``i``, independently: Khisti et al.,
    ICLR 2025, arXiv:2410.18234) and ``hub`` (SpecHub's pair around ``p``'s top token, two children per node). A node
    whose draft row has fewer positive tokens than the scheme needs gets fewer children, never a zero-probability
    token; the survivors keep BFS order.
    """
    sample_children = SCHEMES[check_drafting(scheme)]
    shape_children: list[list[int]] = [[] for _ in topology.parents]
    for node, par in enumerate(topology.parents[1:], start=1):
        shape_children[par].append(node)
    realized: dict[int, int] = {0: 0}
    parents, tokens, paths = [-1], [None], [()]
    for level in topology.levels():
        # Layer by layer: a causal LM computes the draft rows of a whole layer in one pass.
        growing = [s for s in level if s in realized and shape_children[s]]
        view.prefetch("p", [paths[realized[s]] for s in growing])
        for shape_node in growing:
            v = realized[shape_node]
            kids = shape_children[shape_node]
            for kid, token in zip(kids, sample_children(view.p(paths[v]), len(kids), rng)):
                realized[kid] = len(parents)
                parents.append(v)
                tokens.append(token)
                paths.append(paths[v] + (token,))
    # Realized nodes are numbered in the order the shape's BFS reaches them, so the rows line up with ids.
    return Draft.of(DraftTree(parents, tokens, view.vocab), view)


class Drafter(Protocol):
    """What every engine drafts with: one round's tree from a model view, through the randomness interface.

    ``scheme`` names the drafting for the registry's ``lossless_under``; ``height`` bounds the depth of every draft (a
    round's output is completed to ``height + 1`` tokens); ``advance(generated)`` returns the drafter for the next round
    given every token generated so far (a stateless drafter returns itself).

    Optional: ``lazy(view)``, a function drafting one round on demand for the exact engine (tokens drawn when a verifier
    first reads them, :mod:`simulator.drafting.lazy_draft`) or ``None`` where it cannot for this view; the engine drafts
    eagerly without it. Present on every built-in drafter: ``log10_trees(vocab)``, log10 of an upper bound on the number
    of distinct trees one round can draft, and ``size_options``, the options the trees grow with as the command line
    names them (without ``--``); the exact engine's size estimate (:mod:`exact.size`) reads them.
    """

    scheme: str
    height: int

    def draft(self, view: ModelView, rng: Randomness) -> Draft: ...

    def advance(self, generated: Context) -> "Drafter": ...


@dataclass(frozen=True)
class FixedShape:
    """A fixed topology drafted by one of the schemes of :data:`DRAFTING`."""

    topology: Topology
    scheme: str = "iid"

    def __post_init__(self) -> None:
        check_drafting(self.scheme)
        if not branching_fits(self.scheme, self.topology.parents):
            counts = sorted(set(_child_counts(self.topology.parents).values()))
            raise InvalidParameterError("branching", f"{self.scheme} drafting needs exactly "
                                                     f"{FIXED_BRANCHING[self.scheme]} children at every inner node; "
                                                     f"this {self.topology.name} tree has {counts}")

    @property
    def height(self) -> int:
        return self.topology.height

    def draft(self, view: ModelView, rng: Randomness) -> Draft:
        return draft_tree(self.topology, view, self.scheme, rng)

    def lazy(self, view: ModelView) -> Callable[[Randomness], LazyDraft] | None:
        """Drafting on demand for the exact engine (:mod:`simulator.drafting.lazy_draft`), or ``None`` where node ids
        could depend on the draws (short draft rows under a scheme without replacement)."""
        return lazy_drafter(self.topology, view, SCHEMES[self.scheme], self.scheme in NEVER_SHORT)

    def advance(self, generated: Context) -> "FixedShape":
        return self

    @property
    def size_options(self) -> tuple[str, ...]:
        return ("parents",) if self.topology.name == "explicit" else ("depth", "branching")

    def log10_trees(self, vocab: int) -> float:
        choices = _LOG10_CHOICES[self.scheme]
        return sum(choices(c, vocab) for c in _child_counts(self.topology.parents).values())

    def describe(self) -> dict:
        return {"topology": self.topology.name, "parents": list(self.topology.parents),
                "depth": self.topology.height, "drafting": self.scheme}
