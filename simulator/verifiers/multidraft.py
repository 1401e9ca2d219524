"""Khisti et al.'s canonical multi-draft rule on drafts from several draft models (:data:`khisti_is`; Khisti,
Ebrahimi, Dbouk, Behboodi, Memisevic, Louizos, ICLR 2025, arXiv:2410.18234, Theorem 1): an importance-sampling step
selects one of a node's drafted tokens, then single-draft speculative sampling checks it against the law of the
selected token (docs/rules.md, "khisti-is")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..errors import UnsupportedDraftError
from ..numeric import Number, is_rational, row_cache, total
from ..randomness import Randomness
from ..trees import DraftTree
from .flows import max_flow
from .single_step import run_plan, sps_plan

Row = tuple[Number, ...]
Tokens = tuple[int, ...]
#: one node's step: (the children's tokens, the rows of the draft models that drafted them, q, rng) ->
#: (index of the accepted child, None) or (None, the correction token)
Step = Callable[[Sequence[int], tuple[Row, ...], Row, Randomness], tuple[Optional[int], Optional[int]]]


@dataclass(frozen=True)
class Canonical:
    """Theorem 1's first step at one node: ``selection[X]``, the probability of selecting each position of the
    drafted tuple ``X`` (the importance weights ``β``), and ``law``, the selected token's law ``p_I``."""

    selection: dict[Tokens, tuple[Number, ...]]
    law: Row


def product_law(rows: Sequence[Row]) -> dict[Tokens, Number]:
    """``P(X) = Π_i p_i(x_i)`` for every tuple of positive probability: token ``i`` drawn from draft model ``i``,
    independently (the ``k-models`` scheme)."""
    laws: dict[Tokens, Number] = {(): rows[0][0] * 0 + 1}
    for row in rows:
        laws = {tup + (x,): prob * row[x] for tup, prob in laws.items() for x in range(len(row)) if row[x] > 0}
    return laws


@row_cache(2048)
def canonical(q: Row, *rows: Row) -> Canonical:
    """The optimal importance weights and the selected token's law for drafts ``X_i ~ rows[i]`` and target ``q``.

    The weights solve Khisti et al.'s linear program (Theorem 1: maximise ``Σ_y min(q(y), p_I(y))``) as a maximum
    flow of the tuple → token network (:func:`.flows.max_flow`): position ``i`` of ``X`` is selected with probability
    ``f(X → x_i)/P(X)`` (the first position holding a token), and what a tuple does not send goes to position 0.
    That part never changes the acceptance: by maximality every token of such a tuple is already saturated
    (``p_I(y) ≥ q(y)``). So ``p_I(y) = Σ_X P(X) Σ_{i: x_i = y} β_i(X)`` and the acceptance ``Σ_y min(q, p_I)`` is
    the optimum for these draft models.
    """
    laws = product_law(rows)
    flow = max_flow(laws, q, is_rational(rows[0][0]))
    zero = q[0] * 0
    law = [zero] * len(q)
    selection: dict[Tokens, tuple[Number, ...]] = {}
    for tup, prob in laws.items():
        weights = [zero] * len(tup)
        for y, f in flow.flows[tup].items():
            weights[tup.index(y)] += f / prob
        # Exactly the flows of a tuple sum to at most P(X); in float64 the difference can be −1e-17.
        weights[0] += max(1 - total(weights), zero)
        selection[tup] = tuple(weights)
        for x, w in zip(tup, weights):
            law[x] += prob * w
    return Canonical(selection, tuple(law))


def khisti_step(tokens: Sequence[int], rows: tuple[Row, ...], q: Row,
                rng: Randomness) -> tuple[Optional[int], Optional[int]]:
    """One node: select a position ``I`` with probability ``β_I(X)``, then single-draft SpS on ``x_I`` against
    ``p_I`` (:func:`.single_step.sps_plan`: accept with probability ``min(1, q(x_I)/p_I(x_I))``, else draw the
    correction from ``norm((q − p_I)_+)``)."""
    step = canonical(tuple(q), *rows)
    index = rng.categorical(selection_of(step, tokens))
    accepted, corrected = run_plan(sps_plan([tokens[index]], step.law, q), rng)
    if accepted is None:
        return None, rng.categorical(corrected)
    return index, None


def selection_of(step: Canonical, tokens: Sequence[int]) -> tuple[Number, ...]:
    """``β(X)`` of the drafted tokens; a tuple the draft models cannot produce gets a typed error."""
    weights = step.selection.get(tuple(tokens))
    if weights is None:
        raise UnsupportedDraftError("tokens", f"candidates {list(tokens)}: a token has zero probability under the "
                                              "draft model that drafted it; khisti-is selects among the tuples "
                                              "the draft models can produce")
    return weights


def draft_rows(row: Sequence[Number], count: int) -> tuple[Row, ...]:
    """The rows of the draft models that drafted a node's ``count`` children: child ``i`` by draft model ``i``
    (the ``k-models`` scheme; ``row.models`` of a :class:`~simulator.models.draft_rows.DraftRows`)."""
    models = getattr(row, "models", None) or (row,)
    if len(models) < count:
        raise UnsupportedDraftError("drafting", f"a node has {count} children but the model has {len(models)} "
                                                "draft model(s): khisti-is reads child i as drafted by draft model i "
                                                "(--drafting k-models, a model with at least as many draft models "
                                                "as the branching)")
    return tuple(tuple(r) for r in models[:count])


def lift(step: Step):
    """The verifier walking down the tree with ``step``: at a node with children it runs ``step`` on their tokens
    and the draft models' rows; an accepted child is the next node; at a leaf the bonus token is drawn from ``q``."""
    def verify(tree: DraftTree, p, q, rng: Randomness) -> tuple[int, int]:
        v = 0
        while True:
            kids = tree.children(v)
            if not kids:
                return v, rng.categorical(q[v])
            index, y = step([tree.tokens[c] for c in kids], draft_rows(p[v], len(kids)), q[v], rng)
            if index is None:
                return v, y
            v = kids[index]
    return verify


khisti_is = lift(khisti_step)
khisti_is.__name__ = khisti_is.__qualname__ = "khisti_is"
khisti_is.__doc__ = ("Khisti et al.'s canonical multi-draft rule (arXiv:2410.18234, Theorem 1) at every node: "
                     ":func:`khisti_step`.")
