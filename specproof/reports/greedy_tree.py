"""DySpec's App. D.1 (Xiong et al., arXiv:2410.11744): the greedy tree is a maximum-weight rooted subtree of its size,
checked against exhaustive enumeration (:func:`best_subtree_weight`)."""

from __future__ import annotations


from simulator.models import Context, ModelView
from simulator.numeric import Number, rational


def _children(view: ModelView, path: Context, weight: Number) -> list[tuple[Context, Number]]:
    return [(path + (x,), weight * px) for x, px in enumerate(view.p(path))]


def greedy_subtree(view: ModelView, size: int) -> tuple[list[Context], Number]:
    """D.1's greedy: ``size`` nodes (the root included) and their total weight.

    The search space is the ``V``-ary tree of token sequences; node ``u`` weighs ``w_u = Π_m p(u_{m+1} | u_{0:m})``
    (Eq. 12), a set of nodes the sum of its weights (Eq. 13). The greedy starts from the root and adds the heaviest
    neighbour of the current set ``size − 1`` times (ties: the smaller token path).
    """
    one: Number = rational(1) if view.arithmetic == "fraction" else 1.0
    chosen: list[Context] = [()]
    total = one
    frontier = dict(_children(view, (), one))
    while len(chosen) < size:
        path = min(frontier, key=lambda u: (-frontier[u], u))
        weight = frontier.pop(path)
        chosen.append(path)
        total += weight
        frontier.update(_children(view, path, weight))
    return chosen, total


def best_subtree_weight(view: ModelView, size: int) -> Number:
    """The largest weight of a connected subtree of ``size`` nodes containing the root, by enumerating every
    such subtree once (include or exclude the first frontier node, recursively)."""
    one: Number = rational(1) if view.arithmetic == "fraction" else 1.0
    best = [one * 0]

    def grow(count: int, weight: Number, frontier: list[tuple[Context, Number]]) -> None:
        if count == size:
            best[0] = max(best[0], weight)
            return
        if not frontier:
            return
        (path, w), rest = frontier[0], frontier[1:]
        grow(count + 1, weight + w, rest + _children(view, path, w))  # include the first frontier node
        grow(count, weight, rest)  # or exclude it for good

    grow(1, one, _children(view, (), one))
    return best[0]
