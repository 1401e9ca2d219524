"""Khisti et al.'s canonical multi-draft rule on drafts from several draft models (:data:`khisti_is`; Khisti,
Ebrahimi, Dbouk, Behboodi, Memisevic, Louizos, ICLR 2025, arXiv:2410.18234, Theorem 1): an importance-sampling step
selects one of a node's drafted tokens, then single-draft speculative sampling checks it against the law of the
selected token (docs/rules.md, "khisti-is")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..errors import UnsupportedDraftError
from ..numeric import Number, row_cache
from ..randomness import Randomness
from ..trees import DraftTree
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


Flow = dict[Tokens, dict[int, Number]]


def max_flow(laws: dict[Tokens, Number], q: Row) -> tuple[Flow, dict[Tokens, Number]]:
    """A maximum flow ``f(X → y)`` of the network source → tuple ``X`` (capacity ``P(X)``) → token ``y ∈ X`` → sink
    (capacity ``q(y)``), and what each tuple does not send, ``P(X) − Σ_y f(X → y)``.

    Edmonds–Karp: shortest augmenting paths, searched breadth first in a fixed order (tuples in ``laws``' order, a
    tuple's tokens ascending), at most ``O(|V||E|)`` of them whatever the capacities. Plain arithmetic and
    comparisons only, so rationals stay rational and the prover's symbols run it too (docs/proofs.md).
    """
    zero = q[0] * 0
    supply, room = dict(laws), list(q)  # residual capacities out of the source and into the sink
    flow: Flow = {tup: {} for tup in laws}
    while True:
        reached_from: dict = {tup: None for tup in laws if supply[tup] > 0}  # tuple → token it was reached from
        via: dict[int, Tokens] = {}  # token → tuple it was reached from
        queue, end = list(reached_from), None
        for tup in queue:
            for y in sorted(set(tup)):
                if y in via:
                    continue
                via[y] = tup
                if room[y] > 0:
                    end = y
                    break
                # back along a flow into y: another tuple may send elsewhere what it sends to y
                for other in laws:
                    if other not in reached_from and flow[other].get(y, zero) > 0:
                        reached_from[other] = y
                        queue.append(other)
            if end is not None:
                break
        if end is None:
            return flow, supply
        path, y = [], end  # (tuple, token it sends to, token it stops sending to or None)
        while True:
            tup = via[y]
            path.append((tup, y, reached_from[tup]))
            if reached_from[tup] is None:
                break
            y = reached_from[tup]
        amount = min([room[end], supply[path[-1][0]]] + [flow[tup][back] for tup, _, back in path if back is not None])
        room[end] -= amount
        supply[path[-1][0]] -= amount
        for tup, y, back in path:
            flow[tup][y] = flow[tup].get(y, zero) + amount
            if back is not None:
                flow[tup][back] -= amount


@row_cache(2048)
def canonical(q: Row, *rows: Row) -> Canonical:
    """The optimal importance weights and the selected token's law for drafts ``X_i ~ rows[i]`` and target ``q``.

    The weights solve Khisti et al.'s linear program (Theorem 1: maximise ``Σ_y min(q(y), p_I(y))``) as a maximum
    flow of the tuple → token network (:func:`max_flow`): position ``i`` of ``X`` is selected with probability
    ``f(X → x_i)/P(X)`` (the first position holding a token), and what a tuple does not send goes to position 0.
    That part never changes the acceptance: by maximality every token of such a tuple is already saturated
    (``p_I(y) ≥ q(y)``). So ``p_I(y) = Σ_X P(X) Σ_{i: x_i = y} β_i(X)`` and the acceptance ``Σ_y min(q, p_I)`` is
    the optimum for these draft models.
    """
    laws = product_law(rows)
    flow, unsent = max_flow(laws, q)
    zero = q[0] * 0
    law = [zero] * len(q)
    selection: dict[Tokens, tuple[Number, ...]] = {}
    for tup, prob in laws.items():
        weights = [zero] * len(tup)
        for y, f in flow[tup].items():
            weights[tup.index(y)] += f / prob
        weights[0] += unsent[tup] / prob  # never negative: each augmentation sends at most what is left
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
