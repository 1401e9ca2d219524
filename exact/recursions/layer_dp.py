"""The exact law of Layer Verification with the deepest level's draws summed in closed form (:func:`layer_law`;
docs/engines.md, "LV's reduction over the deepest level"). Exact under fractions."""

from __future__ import annotations

from typing import Any

from simulator.drafting import SCHEMES, FixedShape, draft_tree
from simulator.errors import InvalidParameterError
from simulator.models import Context, ModelView
from simulator.numeric import Number, total
from simulator.randomness import BERNOULLI_FLOAT_SLACK
from simulator.speculation import RoundOutcome
from simulator.trees import DraftTree, Topology, node_children, node_depths
from simulator.verifiers.layer import sample_back, score_nodes, transformed_problem
from simulator.verifiers.rules import RULES, SingleStepRule

from exact.enumeration import enumerate_outcomes


class LayerReduction:
    """:func:`layer_law` on one view: the children's draws per context memoised; ``configurations`` counts the
    drafts above the deepest level."""

    def __init__(self, view: ModelView, topology: Topology, scheme: str, rule: SingleStepRule, law: str) -> None:
        self.view, self.topology, self.scheme, self.rule, self.law = view, topology, scheme, rule, law
        self.exact = view.arithmetic == "fraction"
        # the most a tuple's acceptances may sum to: 1, or in floats 1 plus rounding (a lossless rule's sums land
        # a few ulps either side of 1; the reference's clipping of ⊥ changes nothing measurable there)
        self.most: Number = 1 if self.exact else 1 + BERNOULLI_FLOAT_SLACK
        self.draws: dict[tuple, list[tuple[tuple[int, ...], Number]]] = {}
        self.configurations = 0
        depths = node_depths(topology.parents)
        self.height = depths[-1]
        self.upper = sum(1 for d in depths if d < self.height)  # BFS: the nodes above depth H come first
        self.kids = node_children(topology.parents)

    def law_of_round(self) -> dict[RoundOutcome, Number]:
        cut = Topology(self.topology.name, self.topology.parents[: self.upper])
        out: dict[RoundOutcome, Number] = {}
        for draft, p_draft in enumerate_outcomes(lambda rng: draft_tree(cut, self.view, self.scheme, rng),
                                                 self.exact):
            self.configurations += 1
            for outcome, prob in self.given(draft.tree).items():
                out[outcome] = out.get(outcome, 0 * p_draft) + p_draft * prob
        return out

    def given(self, upper: DraftTree) -> dict[RoundOutcome, Number]:
        """The round's law given the tokens above depth ``H``."""
        shape_of = self._shape_nodes(upper)
        bottom = [v for v in range(len(upper)) if upper.depth(v) == self.height - 1]
        counts = {v: len(self.kids[shape_of[v]]) for v in bottom}
        # Alg. 1 on the tree with placeholder leaves (an admissible draw): every score above depth H and every
        # flow is the real one, since none reads a leaf's token.
        parents, tokens = list(upper.parents), list(upper.tokens)
        laws = {v: self._draws(upper.path(v), counts[v]) for v in bottom if counts[v]}
        for v, law in laws.items():
            for token in law[0][0]:
                parents.append(v)
                tokens.append(token)
        tree = DraftTree(parents, tokens, self.view.vocab)
        inner = [v for v in range(len(tree)) if tree.children(v)]
        p = [self.view.p(tree.path(v)) if v in inner else None for v in range(len(tree))]
        q = [self.view.q(tree.path(v)) if v in inner or v < len(upper) else None for v in range(len(tree))]
        scored = score_nodes(self.rule, tree, p, q, self.law)
        zero = q[0][0] * 0
        scores, flows = list(scored.scores[: len(upper)]), list(scored.flows[: len(upper)])
        mass = total([scores[v] for v in laws]) if laws else zero  # A_{H−1}
        virtual: dict[tuple[int, int], Number] = {}
        for v, law in laws.items():
            if mass == 0 or scores[v] == 0:
                continue
            lam = scores[v] / mass
            p_ext, q_ext = transformed_problem(p[v], q[v], mass)
            for draw, p_draw in law:
                cands = self.rule.used(draw)
                accept = self.rule.token_acceptance(cands, p_ext, q_ext, self.law)
                if total(list(accept.values())) > self.most:
                    raise InvalidParameterError("method", f"{self.rule.name}'s acceptances of {cands} sum above 1: "
                                                          "LV clips ⊥'s weight there, which the closed form over "
                                                          "the leaves cannot follow (use --method enumerate)")
                for x in set(cands):
                    virtual[(v, x)] = virtual.get((v, x), zero) + p_draw * lam * accept.get(x, zero)
        levels = [[v for v in range(len(upper)) if upper.depth(v) == d] for d in range(self.height)]
        leaves = [key for key, score in virtual.items() if score != 0]
        levels.append(list(range(len(upper), len(upper) + len(leaves))))
        paths = [upper.path(v) for v in range(len(upper))] + [upper.path(v) + (x,) for v, x in leaves]
        scores += [virtual[key] for key in leaves]
        flows += [(zero,) * self.view.vocab] * len(leaves)
        rows = list(q[: len(upper)]) + [self.view.q(path) for path in paths[len(upper):]]
        out: dict[RoundOutcome, Number] = {}
        for (node, y), prob in enumerate_outcomes(lambda rng: sample_back(levels, scores, flows, rows, rng),
                                                  self.exact):
            key = RoundOutcome(paths[node], y)
            out[key] = out.get(key, zero) + prob
        return out

    def _shape_nodes(self, upper: DraftTree) -> list[int]:
        """The topology node each drafted node realises (a node short of children realises the first ones)."""
        shape_of = [0] * len(upper)
        for v in range(len(upper)):
            for i, c in enumerate(upper.children(v)):
                shape_of[c] = self.kids[shape_of[v]][i]
        return shape_of

    def _draws(self, context: Context, count: int) -> list[tuple[tuple[int, ...], Number]]:
        """The law of ``count`` children drawn by the scheme at ``context``, enumerated through its sampler."""
        key = (context, count)
        if key not in self.draws:
            sample, p = SCHEMES[self.scheme], self.view.p(context)
            self.draws[key] = list(enumerate_outcomes(lambda rng: tuple(sample(p, count, rng)), self.exact))
        return self.draws[key]


def layer_law(view: ModelView, drafter: Any, rule: str, law: str = "iid") -> tuple[dict[RoundOutcome, Number], int]:
    """The round's law of LV lifting ``rule`` (a name of :data:`~simulator.verifiers.rules.RULES`, with its tuple
    ``law``) on ``drafter``'s trees, and the number of configurations above the deepest level enumerated.
    ``drafter``: a fixed shape (LV is undefined on dynamic trees).

    The leaves' scores ``a_w`` enter only LV's first backward categorical, which is linear in them when
    ``Σ_x A(x | X) ≤ 1`` for every tuple (checked as the rule runs; refused otherwise). So only the drafts above depth
    ``H`` are enumerated, and LV's own backward stage runs on one *virtual leaf* per (parent ``v``, token ``x``) with
    score ``λ_v Σ_X P(X) A(x | X)``.
    """
    if not isinstance(drafter, FixedShape):
        raise InvalidParameterError("drafter", "the layer reduction covers fixed shapes")
    reduction = LayerReduction(view, drafter.topology, drafter.scheme, RULES[rule], law)
    if reduction.height == 0:
        raise InvalidParameterError("depth", "a tree with no draft token has nothing to verify")
    return reduction.law_of_round(), reduction.configurations
