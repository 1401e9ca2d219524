"""SGLang's threshold acceptance (``sglang-threshold``): its CUDA kernel ``TreeSpeculativeSamplingTargetOnly``
(sgl-kernel's ``csrc/speculative/speculative_sampling.cuh``, SGLang 0.5.23), written against the randomness
interface; lossless only at ``threshold_single = threshold_acc = 1`` with distinct siblings (docs/lossy.md)."""

from __future__ import annotations

from typing import Sequence

from ...numeric import Number
from ...randomness import Randomness
from ...trees import DraftTree
from ..knobs import Knob, number_in

KNOBS = (
    Knob("threshold_single", 1, "accept a sibling whose target probability is at least this, whatever the coin "
                                "(SGLang's --speculative-accept-threshold-single)", number_in(0, 1)),
    Knob("threshold_acc", 1, "accept a sibling when the coin is at most the target mass of the siblings tried so "
                             "far over this (--speculative-accept-threshold-acc)", number_in(0, 1, low_open=True)),
)


def make(threshold_single: Number = 1, threshold_acc: Number = 1):
    """SGLang's tree verification with its two thresholds.

    At node ``v`` one coin ``u ~ U(0, 1)``; ``v``'s children are tried in order, ``acc`` summing the target
    probability ``q_v(x)`` of each tried (a duplicate token counts again), and child ``x`` is accepted if
    ``u ≤ acc / threshold_acc`` or ``q_v(x) ≥ threshold_single``; an accepted child gets a fresh coin and its own
    children. When every child is rejected the token is drawn from ``(q_v − d)_+`` with ``d`` the target's mass on
    the tokens tried (the kernel's draft rows are zero: "target only"), i.e. from ``q_v`` without them; at a leaf
    from ``q_v``. The coin is one uniform per level, so each comparison is drawn as a Bernoulli conditioned on the
    ones already failed: ``P(u ≤ a_i | u > a_{i-1}) = (a_i − a_{i-1}) / (1 − a_{i-1})``.
    """
    def verify(tree: DraftTree, p: Sequence, q: Sequence, rng: Randomness) -> tuple[int, int]:
        v = 0
        while True:
            row = q[v]
            tried: set[int] = set()
            acc = known_above = row[0] * 0  # (in the rows' arithmetic) the coin exceeds known_above: siblings failed
            for child in tree.children(v):
                x = tree.tokens[child]
                acc = acc + row[x]
                bound = min(1, acc / threshold_acc)
                if row[x] >= threshold_single or (bound > known_above and
                                                  rng.bernoulli((bound - known_above) / (1 - known_above))):
                    v = child
                    break
                tried.add(x)
                known_above = max(known_above, bound)
            else:
                return v, rng.categorical([0 * w if i in tried else w for i, w in enumerate(row)])
    verify.__name__ = "sglang_threshold"
    return verify
