"""TensorRT-LLM's MTP relaxed acceptance for thinking models (docs/lossy.md#relaxed): greedy decoding that also
accepts a draft token among the target's ``relaxed_topk`` most likely whose probability is at least the top-1's
minus ``relaxed_delta``, as ``mtpRelaxedAcceptanceKernel`` decides it; the token after the accepted prefix, and every
later one, is the target's argmax."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ...completion import GREEDY, GreedyCompletion, argmax
from ...errors import InvalidParameterError
from ...numeric import Number
from ...randomness import Randomness
from ...trees import DraftTree
from ..block import chain_of
from ..knobs import FIELD, Knob, number_in, whole_in

Rows = Sequence[Optional[Sequence[Number]]]

KNOBS = (
    Knob("relaxed_topk", 1, "how many of the target's most likely tokens a draft token may be (1: greedy decoding)",
         whole_in(1)),
    Knob("relaxed_delta", 0, "how far below the top-1's probability an accepted token's probability may be (a "
                             "difference of probabilities after softmax, not of log-probabilities)", number_in(0)),
)


def candidates(row: Sequence[Number], relaxed_topk: int, relaxed_delta: Number) -> list[int]:
    """The tokens the kernel accepts at a position whose target row is ``row``: the top-1, then each of the next
    ``relaxed_topk − 1`` by probability (ties by token id) whose probability ``x`` satisfies
    ``not (top1 − relaxed_delta > x)``, i.e. ``x ≥ top1 − relaxed_delta``, decided exactly.

    Raises
    ------
    InvalidParameterError
        On ``verifier-kwargs.relaxed_topk``: more than the vocabulary (``torch.topk`` refuses ``k > V``).
    """
    if relaxed_topk > len(row):
        raise InvalidParameterError(f"{FIELD}.relaxed_topk",
                                    f"relaxed: {relaxed_topk} exceeds the vocabulary {len(row)}; TensorRT-LLM's "
                                    f"torch.topk(k={relaxed_topk}) refuses it (relaxed_topk={len(row)} already "
                                    "ranks the whole vocabulary)")
    ranked = sorted(range(len(row)), key=lambda x: (-row[x], x))[:relaxed_topk]
    threshold = row[ranked[0]] - relaxed_delta
    return [ranked[0]] + [x for x in ranked[1:] if not threshold > row[x]]


def make(relaxed_topk: int = 1, relaxed_delta: Number = 0) -> Callable[..., tuple[int, int, GreedyCompletion]]:
    """The rule at the given knobs (TensorRT-LLM ``MTPDecodingConfig``: ``relaxed_topk`` 1 and ``relaxed_delta``
    0.0 by default, which is greedy decoding; its DeepSeek-R1 guides use 10 and 0.6).

    The returned ``verify(tree, p, q, rng)`` walks the chain draft from the root, accepting each draft token that is
    among :func:`candidates` of its parent's target row, and stops at the first that is not; it returns the last
    accepted node, the target's argmax there (``y``: the kernel's "golden token", the first of ``torch.topk``'s
    indices) and :data:`~simulator.completion.GREEDY`, the completion of greedy decoding. It never draws from
    ``rng``: given the draft the round is deterministic, and only the drafting is random.
    """
    def relaxed(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int, GreedyCompletion]:
        nodes = chain_of(tree, "relaxed")
        for parent, child in zip(nodes, nodes[1:]):
            if tree.tokens[child] not in candidates(q[parent], relaxed_topk, relaxed_delta):
                return parent, argmax(q[parent]), GREEDY
        return nodes[-1], argmax(q[nodes[-1]]), GREEDY
    return relaxed
