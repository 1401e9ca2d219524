"""FLy's entropy-gated deferral (``fly``) as vLLM 0.33.0's Model Runner V2 decides it at temperature > 0
(``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py``, ``_rejection_kernel`` and ``_resample_kernel``;
docs/lossy.md): a draft token the target rejects is kept when the target's top-k entropy there is high and the next
``fly_window_size`` drafts are all accepted natively."""

from __future__ import annotations

from fractions import Fraction
from typing import Optional, Sequence

from ...numeric import Number
from ...randomness import Randomness
from ...trees import DraftTree
from ..block import chain_of
from ..knobs import Knob, number_in, whole_in
from ..rules import SPS
from .interval import exact, greater

Rows = Sequence[Optional[Sequence[Number]]]

#: vLLM's default window when ``fly_window_size`` is unset: ``min(MAX_DEFAULT_WINDOW, k − 1)`` (config/speculative.py)
MAX_DEFAULT_WINDOW = 6


def _window(value: object) -> int | None:
    """``None`` (vLLM's default, resolved from the chain's depth) or a whole number ≥ 0 (0: FLy off)."""
    return None if value is None else whole_in(0)(value)


KNOBS = (
    Knob("fly_window_size", None, "the native acceptances after a deferral that confirm it; unset: min(6, k − 1), "
         "k the chain's depth; 0 switches FLy off", _window),
    Knob("fly_entropy_threshold", Fraction(3, 10), "the target's top-k entropy (nats) at which a rejection may be "
         "deferred (entropy ≥ threshold)", number_in(0)),
    Knob("fly_entropy_top_k", 3, "how many of the target's largest probabilities the entropy sums over", whole_in(1)),
)


def window_for(depth: int, window: int | None) -> int:
    """The window for ``depth`` draft tokens: the given one, or vLLM's default ``min(6, depth − 1)``
    (``SpeculativeConfig``). vLLM's config also refuses a depth below 2 and a window not below the depth; the kernel
    runs them, deferring nothing (``i + W < k`` never holds), and so does the rule."""
    return min(MAX_DEFAULT_WINDOW, depth - 1) if window is None else window


def top_entropy_at_least(row: Sequence[Number], top_k: int, threshold: Number, rule: str, where: str) -> bool:
    """Whether ``−Σ q log q`` over the ``top_k`` largest entries of ``row`` (zeros adding nothing, as
    ``compute_fly_entropy`` in ``vllm/v1/spec_decode/fly.py``) is at least ``threshold``, decided exactly: rationally
    where the entropy is 0 (every summed entry 0 or 1), else in interval arithmetic, a tie refused naming ``where``."""
    top = [v for v in sorted(row, reverse=True)[:top_k] if v > 0]
    if all(v == 1 for v in top):
        return threshold <= 0

    def entropy(ctx):
        out = ctx.mpf(0)
        for v in top:
            x = exact(ctx, v)
            out -= x * ctx.log(x)
        return out

    return greater(entropy, lambda ctx: exact(ctx, threshold), rule, where, or_equal=True)


def make(fly_window_size: int | None = None, fly_entropy_threshold: Number = Fraction(3, 10),
         fly_entropy_top_k: int = 3):
    """The ``fly`` rule at the given knob values (:data:`KNOBS`).

    Per position ``i`` of a chain of depth ``k``, one coin decides the native test ``u < q(x)/p(x)``: speculative
    sampling's (:data:`~simulator.verifiers.rules.SPS`), a Bernoulli of ``min(1, q/p)`` (``_rejection_kernel``
    compares ``log q(x) > log u + log p(x)``). With ``W`` the window (:func:`window_for`):

    * with nothing pending, a rejection at ``i`` is deferred (``pending_rejection = i``) when ``W > 0``,
      ``p(x) > 0``, ``q(x) > 0``, ``i + W < k`` and the target's top-k entropy at ``i`` is at least the threshold;
      any other rejection ends the round at ``i``;
    * while one is pending, a native rejection ends the round at the pending position, and a native acceptance at
      ``i − pending = W`` accepts everything up to ``i`` and clears it.

    The token after the accepted prefix is drawn as ``_resample_kernel`` draws it: from SpS's residual
    ``(q − p)_+`` normalised at the position where the round ended (a pending one's, whose log-normalisers the
    kernel froze), or from the target's row after all ``k``.
    """
    top_k, threshold = fly_entropy_top_k, fly_entropy_threshold

    def fly(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
        nodes = chain_of(tree, "fly")
        k = len(nodes) - 1
        window = window_for(k, fly_window_size)
        accepted, pending = 0, None
        for i in range(k):
            parent, x = nodes[i], tree.tokens[nodes[i + 1]]
            native = rng.bernoulli(SPS.planned(p[parent], q[parent], (x,)).steps[0][1])
            if pending is not None:
                if not native:
                    break
                if i - pending == window:
                    accepted, pending = i + 1, None
            elif native:
                accepted = i + 1
            elif (window > 0 and p[parent][x] > 0 and q[parent][x] > 0 and i + window < k
                  and top_entropy_at_least(q[parent], top_k, threshold, "fly", f"q[{parent}] (position {i})")):
                pending = i
            else:
                break
        node = nodes[accepted]
        if accepted == k:
            return node, rng.categorical(q[node])
        return node, rng.categorical(SPS.planned(p[node], q[node], (tree.tokens[nodes[accepted + 1]],)).residual)

    return fly
