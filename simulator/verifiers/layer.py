"""Layer Verification (Cha et al., AdaptFM at ICML 2026, Algs. 1–2 / 4, Eqs. 1–2, App. E.2): a single-step rule
lifted to a tree by forward node scoring (:func:`score_nodes`, Alg. 1) and backward sampling (:func:`sample_back`,
Alg. 2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ..numeric import Number, residual, total
from ..randomness import Randomness
from ..trees import DraftTree, node_levels
from .rules import SingleStepRule

Rows = Sequence[Optional[Sequence[Number]]]


@dataclass(frozen=True)
class NodeScores:
    """Alg. 1's output: inclusion score ``a_v`` and outgoing flow row ``flow_v`` of every node."""

    scores: tuple[Number, ...]
    flows: tuple[tuple[Number, ...], ...]


def score_nodes(rule: SingleStepRule, tree: DraftTree, p: Rows, q: Rows, law: str) -> NodeScores:
    """The forward node-scoring stage (Alg. 1): ``a_0 = 1``; for each depth ``t``, with ``A_t`` the total score of
    the non-leaf nodes of that depth and ``λ_v = a_v / A_t``, the single-step rule solves the node's transformed
    problem (:func:`transformed_problem`; the dummy token Δ is never drafted, App. E.2) and the children get
    ``a_w = λ_v · f(X → x_w)/P(X) / #[x_w ∈ X]``; the node's outgoing flow is ``flow_v(x) = λ_v Σ_X f(X → x)`` over
    real tokens, under the drafting scheme's tuple law."""
    n, vocab = len(tree), len(q[0])
    zero = q[0][0] * 0
    scores: list[Number] = [zero] * n
    scores[0] = zero + 1
    flows: list[tuple[Number, ...]] = [(zero,) * vocab] * n
    for level in node_levels(tree.parents):
        inner = [v for v in level if tree.children(v)]
        mass = total([scores[v] for v in inner]) if inner else zero  # A_t
        if mass == 0:
            continue
        for v in inner:
            if scores[v] == 0:
                continue
            lam = scores[v] / mass
            p_ext, q_ext = transformed_problem(p[v], q[v], mass)
            kids = rule.used(tree.children(v))
            cands = tuple(tree.tokens[c] for c in kids)
            accept = rule.token_acceptance(cands, p_ext, q_ext, law)
            for c, x in zip(kids, cands):
                scores[c] = lam * accept.get(x, zero) / cands.count(x)
            out = rule.outflow(p_ext, q_ext, len(kids), law)
            flows[v] = tuple(lam * f for f in out[:vocab])
    return NodeScores(tuple(scores), tuple(flows))


def transformed_problem(p_v: Sequence[Number], q_v: Sequence[Number], mass: Number) -> tuple[tuple, tuple]:
    """A node's single-step problem over ``Σ ∪ {Δ}`` (App. E.2): draft ``(p_v, 0)``, target ``(A_t q_v, 1 − A_t)``."""
    zero = mass * 0
    return tuple(p_v) + (zero,), tuple(mass * x for x in q_v) + (1 - mass,)


def sample_back(levels: Sequence[Sequence[int]], scores: Sequence[Number], flows: Sequence[Sequence[Number]],
                q: Rows, rng: Randomness) -> tuple[int, int]:
    """The backward sampling stage (Alg. 2) over ``levels`` (the node ids of each depth, the root's first): from
    depth ``H`` up to 0, one categorical over the nodes of the depth and ⊥ with weights ``a_v − Σ_x flow_v(x)`` and
    ``1 − Σ_v a_v`` (Eq. 1 times its common denominator); on a node, ``y`` from ``norm(a_v q_v − flow_v)``
    (Eq. 2)."""
    zero = scores[0] * 0
    for depth in range(len(levels) - 1, -1, -1):
        nodes = levels[depth]
        # Exactly, Assumption 4.2 makes every weight ≥ 0 and a depth is reached only if its weights have
        # mass. In float64 rounding can leave −1e-17s (clipped to 0) and reach a depth whose weights all
        # vanish — a branch of rounding-level probability — which then passes on up to the root.
        weights = [max(scores[v] - total(flows[v]), zero) for v in nodes]
        weights.append(max(1 - total([scores[v] for v in nodes]), zero))
        if total(weights) == 0 and depth > 0:
            continue
        choice = rng.categorical(weights) if depth > 0 or total(weights) > 0 else 0
        if choice < len(nodes):
            v = nodes[choice]
            res = residual(q[v], flows[v], scale=scores[v])  # Eq. 2
            return v, rng.categorical(res)
    raise AssertionError("the root is always selected: its ⊥ weight is 1 − a_0 = 0")  # pragma: no cover


def layer_verify(rule: SingleStepRule, tree: DraftTree, p: Rows, q: Rows, rng: Randomness,
                 law: str = "iid") -> tuple[int, int]:
    """Layer Verification: forward scoring, then the backward sampling stage (Alg. 2).

    Assumption 4.2 (``flow_v ≤ a_v q_v``) holds whenever the rule is a lossless single-step rule for the tuple law,
    and is what makes LV lossless (Theorem 4.3).
    """
    scored = score_nodes(rule, tree, p, q, law)
    return sample_back(node_levels(tree.parents), scored.scores, scored.flows, q, rng)


def lv(rule: SingleStepRule, law: str = "iid"):
    """The LV lift of ``rule`` as a verifier function."""
    def verify(tree: DraftTree, p: Rows, q: Rows, rng: Randomness) -> tuple[int, int]:
        return layer_verify(rule, tree, p, q, rng, law)
    verify.__name__ = f"lv_{rule.name}"
    verify.__doc__ = f"Layer Verification lifting the single-step rule {rule.name!r} ({law} tuple law)."
    return verify
