"""The single-step rules as objects every lift uses (:class:`SingleStepRule`): sampling a step and its flows, from
one plan or flow per rule (docs/rules.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..errors import UnsupportedDraftError
from ..numeric import RATIONALS, Number, row_cache, total
from ..randomness import Randomness
from . import flows as fl
from . import single_step as ss
from .spechub import spechub_plan

Row = tuple[Number, ...]


@dataclass(frozen=True)
class SingleStepRule:
    """A single-step rule: *sequential* (a plan of :mod:`.single_step`) or *flow-defined* (a feasible flow of
    :mod:`.flows`). :meth:`step` is what token verification runs, :meth:`token_acceptance` and :meth:`outflow` what
    Layer Verification needs, all from the same plan or flow, so each rule is written once. Its array form, which
    the array rules receive, is its array step (:mod:`.single_step_arrays`)."""
    name: str
    plan: Optional[Callable[[Sequence[int], Row, Row], ss.Plan]] = None
    solver: Optional[Callable[[Row, Row, int, str], fl.FlowSolution]] = None
    max_candidates: Optional[int] = None  # SpS looks at the first candidate only

    def used(self, candidates: Sequence[int]) -> tuple[int, ...]:
        return tuple(candidates[: self.max_candidates])

    def planned(self, p: Row, q: Row, cands: tuple[int, ...]) -> ss.Plan:
        """A sequential rule's plan for the candidates ``cands`` at the rows ``p``, ``q``, computed once per distinct
        (rows, candidates) and shared (:func:`_plan`)."""
        p, q, cands = tuple(p), tuple(q), tuple(cands)
        if p and not isinstance(p[0], (int, float, *RATIONALS)):  # symbolic rows: a plan holds for its path only
            return self.plan(cands, p, q)  # type: ignore[misc]
        key = (self, id(p), id(q), cands)  # a model view hands out the same row objects: no rational hashed
        hit = _PLANS_BY_ROW.get(key)
        if hit is not None and hit[0] is p and hit[1] is q:
            return hit[2]
        plan = _plan(self, p, q, cands)
        if len(_PLANS_BY_ROW) >= PLAN_CACHE:
            _PLANS_BY_ROW.clear()
        _PLANS_BY_ROW[key] = (p, q, plan)  # the rows held: their ids are not reused while the entry lives
        return plan

    def step(self, candidates: Sequence[int], p: Row, q: Row, rng: Randomness, law: str) -> ss.StepResult:
        """Token verification's step: a sequential rule runs its plan; a flow-defined rule samples the tuple with one
        categorical over its flows and a reject option (:meth:`flow_weights`)."""
        cands = self.used(candidates)
        if self.plan is not None:
            return ss.run_plan(self.planned(p, q, cands), rng)
        tokens, weights, residual = self.flow_weights(cands, p, q, law)
        choice = rng.categorical(weights)
        if choice == len(tokens):
            return None, residual
        return cands.index(tokens[choice]), None

    def flow_weights(self, cands: tuple[int, ...], p: Row, q: Row,
                     law: str) -> tuple[list[int], list[Number], Row]:
        """A flow-defined rule's step as one categorical: the distinct candidate tokens (in order of first
        appearance), their flows followed by the reject weight ``P(X) − Σ flows``, and the residual. Shared by
        :meth:`step` and the rule's array step (``simulator.verifiers.single_step_arrays.FlowStep.step_rows``)."""
        prob_tuple = self.tuple_probability(cands, p, law)  # refuses a tuple the drafting cannot produce
        solution = self.solver(tuple(p), tuple(q), len(cands), law)
        per = solution.flows[cands]
        tokens = list(dict.fromkeys(cands))
        weights = [per.get(x, prob_tuple * 0) for x in tokens]
        # Exactly the flows of a tuple sum to at most P(X); in float64 the difference can be −1e-17.
        weights.append(max(prob_tuple - (total(weights) if weights else prob_tuple * 0), prob_tuple * 0))
        return tokens, weights, solution.residual

    def token_acceptance(self, candidates: Sequence[int], p: Row, q: Row, law: str) -> dict[int, Number]:
        """``P(accept a candidate holding x | X)`` for each token ``x`` of the candidates used."""
        cands = self.used(candidates)
        if self.plan is not None:
            out: dict[int, Number] = {}
            for x, prob in zip(cands, ss.plan_acceptance(self.planned(p, q, cands), len(cands))):
                out[x] = out.get(x, 0) + prob
            return out
        solution = self.solver(tuple(p), tuple(q), len(cands), law)
        prob_tuple = self.tuple_probability(cands, p, law)
        return {x: f / prob_tuple for x, f in solution.flows[cands].items()}

    def tuple_probability(self, cands: tuple[int, ...], p: Row, law: str) -> Number:
        """``P(X)`` of the candidates; a flow-defined rule has flows only for tuples the drafting can produce."""
        prob = fl.tuple_law(tuple(p), len(cands), law).get(cands)
        if prob is None:
            bad = [x for x in cands if not p[x] > 0]
            why = (f"token {bad[0]} has zero draft probability" if bad
                   else "a token repeats, which drafting without replacement never does")
            raise UnsupportedDraftError("tokens", f"candidates {list(cands)}: {why}; the {self.name.upper()} "
                                                  f"rule is defined by flows over the tuples drafting can produce")
        return prob

    def outflow(self, p: Row, q: Row, k: int, law: str) -> Row:
        """``Σ_X f(X → x)`` under the tuple law, for every token ``x``."""
        return _outflow(self, tuple(p), tuple(q), min(k, self.max_candidates or k), law)


#: plans kept: the exact engine meets the same (rows, candidates) in thousands of executions (a tree's nodes share
#: contexts, and every branch of the enumeration repeats them), and a plan's residuals over rationals dominated its time
PLAN_CACHE = 16384


_PLANS_BY_ROW: dict[tuple, tuple[Row, Row, ss.Plan]] = {}


@row_cache(PLAN_CACHE)
def _plan(rule: SingleStepRule, p: Row, q: Row, cands: tuple[int, ...]) -> ss.Plan:
    return rule.plan(cands, p, q)  # type: ignore[misc]


@row_cache(8192)
def _outflow(rule: SingleStepRule, p: Row, q: Row, k: int, law: str) -> Row:
    if rule.solver is not None:
        return rule.solver(p, q, k, law).outflow
    out = [q[0] * 0] * len(q)
    for tup, prob in fl.tuple_law(p, k, law).items():
        for x, acc in rule.token_acceptance(tup, p, q, law).items():
            out[x] = out[x] + prob * acc
    return tuple(out)


SPS = SingleStepRule("sps", plan=ss.sps_plan, max_candidates=1)
RRS = SingleStepRule("rrs", plan=ss.rrs_plan)
RRSW = SingleStepRule("rrsw", plan=ss.rrsw_plan)
DETERMINISTIC = SingleStepRule("det", plan=ss.deterministic_plan)
KSEQ = SingleStepRule("kseq", plan=ss.kseq_plan)
OPT = SingleStepRule("opt", solver=fl.opt_flow)
GR = SingleStepRule("gr", solver=fl.gr_flow)
DYSPEC_PRINTED = SingleStepRule("dyspec-printed", plan=ss.dyspec_printed_plan)
HU = SingleStepRule("hu", plan=ss.hu_plan)  # Hu et al.'s rule for greedy drafting (tv-hu)
SPECHUB = SingleStepRule("spechub", plan=spechub_plan)

RULES = {rule.name: rule for rule in (SPS, RRS, RRSW, DETERMINISTIC, KSEQ, OPT, GR)}
