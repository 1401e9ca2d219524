"""Medusa's typical acceptance (``typical``): medusa-llm 0.1's ``evaluate_posterior`` (its typical branch) and
``generate_candidates`` (``medusa/model/utils.py``; Cai et al., arXiv:2401.10774, §2.3.1), written against the
randomness interface. Lossy by design (docs/lossy.md)."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable, Sequence

from ...numeric import Number
from ...randomness import Randomness
from ...trees import DraftTree
from ..knobs import Knob, number_in
from .interval import exact, greater

#: the 1e-5 inside the entropy's logarithm, ``torch.log(posterior_prob + 1e-5)`` (utils.py line 308), taken as the
#: decimal it is typed as
EPSILON = Fraction(1, 100_000)
CORRECTIONS = ("argmax", "sample")


def _correction(value: object) -> str:
    if value not in CORRECTIONS:
        raise ValueError(f"must be one of {', '.join(CORRECTIONS)}, got {value!r}")
    return str(value)


KNOBS = (
    Knob("posterior_threshold", 0.09, "a drafted token passes if its target probability exceeds this (or the "
                                      "entropy-scaled threshold, whichever is lower)", number_in(0)),
    Knob("posterior_alpha", 0.3, "the entropy-scaled threshold is this times exp(−H), H the target row's entropy",
         number_in(0)),
    Knob("temperature", 1, "the rows are raised to 1/temperature and renormalised before the test (1: as given)",
         number_in(0, low_open=True)),
    Knob("correction", "argmax", "the token after the accepted ones: argmax, the target's most probable (as "
                                 "Medusa ships), or sample, a draw from the target's row", _correction),
)


class _Tempered:
    """A target row at a temperature ``T``, ``q^(1/T)`` renormalised: as exact rationals where ``1/T`` is a whole
    number (``T = 1``: the row itself), else as intervals of an mpmath context (:mod:`.interval`)."""

    def __init__(self, row: Sequence[Number], temperature: Fraction) -> None:
        self.row = [Fraction(x) for x in row]
        self.power = 1 / temperature
        self.exact: list[Fraction] | None = None
        if self.power.denominator == 1:
            weights = [x ** self.power.numerator for x in self.row]
            self.exact = [w / sum(weights) for w in weights]

    def prob(self, ctx: Any, x: int) -> Any:
        """``q_T(x)`` as an interval of ``ctx``."""
        if self.exact is not None:
            return exact(ctx, self.exact[x])
        weights = [ctx.exp(exact(ctx, self.power) * ctx.log(exact(ctx, w))) if w else ctx.mpf(0) for w in self.row]
        return weights[x] / sum(weights)

    def entropy(self, ctx: Any) -> Any:
        """Medusa's ``H = −Σ q_T log(q_T + 1e-5)`` (lines 307–309) as an interval of ``ctx``; a zero entry adds
        nothing (``0 · log(1e-5)``)."""
        terms = [self.prob(ctx, y) for y, w in enumerate(self.row) if w]
        return -sum(t * ctx.log(t + exact(ctx, EPSILON)) for t in terms)

    def log_prob(self, ctx: Any, x: int) -> Any:
        return ctx.log(self.prob(ctx, x))


def make(posterior_threshold: Number = Fraction(9, 100), posterior_alpha: Number = Fraction(3, 10),
         temperature: Number = 1, correction: str = "argmax") -> Callable[..., tuple[int, int]]:
    """Medusa's typical acceptance over the tree's root-to-leaf paths, its candidates, in Medusa's order: its
    ``torch.cartesian_prod`` of the heads' top-k lists is lexicographic in the children's ranks, which for a
    BFS-numbered tree is the paths sorted by node ids (:meth:`~simulator.trees.TreeStructure.leaf_paths`).

    A drafted token ``x`` after node ``v`` passes if ``q_T,v(x) > min(posterior_threshold, posterior_alpha ·
    exp(−H_v))``, ``q_T,v`` the target row at ``v`` at ``temperature`` and ``H_v = −Σ q_T,v log(q_T,v + 1e-5)``
    (utils.py lines 303–314). Each candidate keeps its longest prefix of passing tokens (line 315); of those with
    the longest, the one of the largest likelihood, the product of ``q_T`` over the prefix, wins, the first in
    order on an exact tie (``torch.argmax``, lines 318–328); with none passing, the root. The token after is the
    target's argmax at the node reached, its smallest index on a tie (``generate_candidates``, line 213, on the
    logits ``update_inference_inputs`` keeps, line 387), or with ``correction="sample"`` a draw from the target's
    row there (the rows as given, whatever the temperature).

    Comparisons are exact: rational ones as rationals, those through ``exp`` and ``log`` (the entropy threshold; the
    likelihoods where ``1/temperature`` is not a whole number) by :func:`.interval.greater`, which refuses
    a tie with :class:`~simulator.errors.UndecidedComparisonError` naming the row (``typical.q[CONTEXT]``).
    """
    threshold, alpha = Fraction(posterior_threshold), Fraction(posterior_alpha)
    temperature = Fraction(temperature)
    rows: dict[tuple, _Tempered] = {}
    passed: dict[tuple, bool] = {}  # (row, token) -> whether it passes: rows recur across a certificate's trees

    def tempered(row: Sequence[Number]) -> _Tempered:
        key = tuple(row)
        if key not in rows:
            rows[key] = _Tempered(row, temperature)
        return rows[key]

    def passes(tree: DraftTree, q: Sequence, v: int) -> bool:
        parent, x = tree.parents[v], tree.tokens[v]
        key = (tuple(q[parent]), x)
        if key not in passed:
            row, name = tempered(q[parent]), f"q[{','.join(map(str, tree.path(parent)))}]"
            if row.row[x] == 0:  # 0 exceeds no threshold: both are ≥ 0
                passed[key] = False
            elif row.exact is not None and row.exact[x] > threshold:
                passed[key] = True
            elif row.exact is None and greater(lambda ctx: row.prob(ctx, x), lambda ctx: exact(ctx, threshold),
                                               "typical", name):
                passed[key] = True
            else:
                passed[key] = greater(lambda ctx: row.prob(ctx, x),
                                      lambda ctx: exact(ctx, alpha) * ctx.exp(-row.entropy(ctx)), "typical", name)
        return passed[key]

    def more_likely(tree: DraftTree, q: Sequence, path: list[int], best: list[int], length: int) -> bool:
        """Whether ``path``'s first ``length`` tokens are strictly more likely than ``best``'s."""
        terms = [[(tempered(q[tree.parents[v]]), tree.tokens[v]) for v in nodes[1:length + 1]]
                 for nodes in (path, best)]
        if all(row.exact is not None for side in terms for row, _ in side):
            products = [math.prod((row.exact[x] for row, x in side), start=Fraction(1))  # type: ignore[index]
                        for side in terms]
            return products[0] > products[1]
        if sorted((id(row), x) for row, x in terms[0]) == sorted((id(row), x) for row, x in terms[1]):
            return False  # the same factors in another order: an exact tie
        return greater(*(lambda ctx, side=side: sum(row.log_prob(ctx, x) for row, x in side) for side in terms),
                       "typical", f"q[{','.join(map(str, tree.path(path[length])))}]")

    def verify(tree: DraftTree, p: Sequence, q: Sequence, rng: Randomness) -> tuple[int, int]:
        paths = tree.leaf_paths()
        lengths = []
        for path in paths:
            n = 0
            while n + 1 < len(path) and passes(tree, q, path[n + 1]):
                n += 1
            lengths.append(n)
        longest = max(lengths)
        best = paths[lengths.index(longest)]
        for path, n in zip(paths, lengths):
            if n == longest and path[n] != best[n] and more_likely(tree, q, path, best, n):
                best = path
        node = best[longest]
        row = q[node]
        y = rng.categorical(row) if correction == "sample" else max(range(len(row)), key=lambda i: (row[i], -i))
        return node, y

    verify.__name__ = "typical"
    return verify

