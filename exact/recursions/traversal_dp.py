"""The exact law of Traversal Verification by recursion over subtrees, without enumerating draft trees
(:func:`traversal_law`; docs/engines.md, "TRV's exact recursion"). Exact under fractions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from simulator.drafting import SCHEMES, FixedShape
from simulator.errors import InvalidParameterError
from simulator.limits import active_count
from simulator.models import Context, ModelView
from simulator.numeric import Number, rational
from simulator.speculation import RoundOutcome
from simulator.trees import node_children
from simulator.verifiers.traversal import child_rate, reject_child

from exact.enumeration import enumerate_outcomes

#: a node's shape: the shapes of its children, in order (a leaf: ``()``)
Shape = tuple
#: a subtree's acceptances: (token path below the subtree's parent, ``y``) → probability
Accepts = dict[tuple[tuple[int, ...], int], Number]


@dataclass
class TraversalRecursion:
    """:func:`traversal_law`'s sub-problems on one view, memoised; ``solved`` counts them."""

    view: ModelView
    scheme: str
    merge: bool
    zero_draft: bool

    def __post_init__(self) -> None:
        self.exact = self.view.arithmetic == "fraction"
        self.one: Number = rational(1) if self.exact else 1.0
        self.memo: dict[tuple, tuple[Accepts, Number]] = {}
        self.draws: dict[tuple, list[tuple[tuple[int, ...], Number]]] = {}
        self.solved = 0
        self.count = active_count()

    def root(self, shape: Shape) -> dict[RoundOutcome, Number]:
        """The round's law on a tree of ``shape``: the root's subtree, whose deletion also emits from its
        target."""
        accepts, _ = self.node((), self.one, (shape,), root=True)  # the root is never deleted
        return {RoundOutcome(path, y): prob for (path, y), prob in accepts.items() if prob != 0}

    def node(self, context: Context, rate: Number, members: tuple[Shape, ...],
             root: bool = False) -> tuple[Accepts, Number]:
        """``S``: the acceptances in the subtree of a trie node at ``context`` entered with ``rate``, whose members
        (the merged drafted nodes) have the shapes ``members``; and the probability that the node is deleted."""
        key = (context, rate, members, root)
        if key in self.memo:
            return self.memo[key]
        self.solved += 1
        self.count.execution()
        zero = self.one * 0
        accepts: Accepts = {}
        deleted = zero
        target = list(self.view.q(context))
        draft = list(self.view.p(context)) if any(members) else None
        for groups, p_groups in self.children(context, members):
            rate_now, target_now, draft_now = rate, target, draft
            reach = p_groups  # P(these tokens, and every earlier child deleted)
            for x, kid_members in groups:
                inner, gone = self.node(context + (x,), child_rate(rate_now, target_now, draft_now, x), kid_members)
                for (path, y), prob in inner.items():
                    key_ = ((x,) + path, y)
                    accepts[key_] = accepts.get(key_, zero) + reach * prob
                reach = reach * gone
                if reach == 0:
                    break
                rate_now, target_now, draft_now = reject_child(rate_now, target_now, draft_now, x, self.zero_draft)
            if reach == 0:
                continue
            leaf = reach if root else reach * rate_now  # a leaf now: accepted with its rate (the root: always)
            for y, qy in enumerate(target_now):
                if qy > 0:
                    accepts[((), y)] = accepts.get(((), y), zero) + leaf * qy
            deleted = deleted + (reach - leaf)
        self.memo[key] = (accepts, deleted)
        return accepts, deleted

    def children(self, context: Context, members: tuple[Shape, ...]) -> list[tuple[tuple, Number]]:
        """The law of the trie children of a node: ``((token, member shapes), …)`` in the trie's order, with its
        probability. Each member draws its children by the scheme; a child joins the group of its token (merged) or
        opens a new group."""
        states: dict[tuple, Number] = {(): self.one}
        p = self.view.p(context) if any(members) else None
        for shape in members:
            if not shape:
                continue
            law = self._draws(context, p, len(shape))
            folded: dict[tuple, Number] = {}
            for state, prob in states.items():
                for tokens, p_tokens in law:
                    grown = list(state)
                    for x, kid in zip(tokens, shape):
                        at = next((i for i, (t, _) in enumerate(grown) if t == x), None) if self.merge else None
                        if at is None:
                            grown.append((x, (kid,)))
                        else:
                            grown[at] = (x, grown[at][1] + (kid,))
                    key = tuple(grown)
                    folded[key] = folded.get(key, self.one * 0) + prob * p_tokens
            self.count.execution(len(states) * len(law))
            states = folded
        return list(states.items())

    def _draws(self, context: Context, p: Sequence[Number], count: int) -> list[tuple[tuple[int, ...], Number]]:
        """The law of ``count`` children drawn by the scheme from ``p``, enumerated through its generator."""
        key = (context, count)
        if key not in self.draws:
            sample = SCHEMES[self.scheme]
            self.draws[key] = list(enumerate_outcomes(lambda rng: tuple(sample(p, count, rng)), self.exact))
        return self.draws[key]


def _shape(parents: Sequence[int], v: int = 0) -> Shape:
    kids = node_children(list(parents))
    def build(u: int) -> Shape:
        return tuple(build(c) for c in kids[u])
    return build(v)


def traversal_law(view: ModelView, drafter: Any, merge: bool = True,
                  zero_draft: bool = True) -> tuple[dict[RoundOutcome, Number], int]:
    """The round's law of TRV (``merge``: equal siblings merged, as ``trv``; ``zero_draft``: Eq. 2's update) on
    ``drafter``'s trees, and the number of sub-problems solved. ``drafter``: a fixed shape under any drafting
    scheme (dynamic trees are not covered).

    TRV (:mod:`simulator.verifiers.traversal`) visits leaves in DFS post-order: once inside a node's subtree it stays
    there until it accepts or deletes the node, and the parent's update (Eqs. 1–3) reads the deleted node's token
    only. So a subtree is a sub-problem ``S(context, rate, shape)`` (the law of acceptances inside it and the
    probability it is deleted), memoised by its arguments. Each sub-problem solved, and each (state, draw) pair its
    children's law folds, counts as an execution (:mod:`simulator.limits`), so ``--max-executions`` stops a recursion
    too large to finish as it stops an enumeration.
    """
    if not isinstance(drafter, FixedShape):
        raise InvalidParameterError("drafter", "the traversal recursion covers fixed shapes (dynamic trees: enumerate)")
    recursion = TraversalRecursion(view, drafter.scheme, merge, zero_draft)
    return recursion.root(_shape(drafter.topology.parents)), recursion.solved
