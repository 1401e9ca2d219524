"""The size of an exact computation, estimated before it starts, and the refusal of one that is too large.

An exact certificate enumerates every draft tree, every execution of the verifier on it, and every completed
sequence. Its size is estimated as

    trees × (1 + executions per tree) + completed sequences

where *trees* is the drafter's own upper bound (``log10_trees``, see :class:`simulator.drafting.Drafter`: every
token a choice among ``V``, fewer for schemes without replacement) — or, when that bound alone fits the limit
but the product does not, the trees counted by enumerating the drafter alone —, *executions per tree* is
measured by enumerating the verifier on one tree (the first the engine drafts; a plugin gets the same
treatment, under the per-execution limit on random choices and the run's ``--timeout``), and *completed
sequences* is ``V^(H+1)``. Zeros in the rows make the bound an overestimate, and the probe tree may be cheaper
than others: a run that fits the estimate can still be stopped by the execution count at run time
(:mod:`simulator.limits`). Large numbers are kept as base-10 logarithms, so the estimate of a tree of a hundred
thousand nodes costs nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from simulator.drafting import Drafter
from simulator.errors import ExecutionLimitError, SizeLimitError
from simulator.limits import computation, current_limits
from simulator.models import Context, ModelPair, ModelView
from simulator.numeric import check_arithmetic
from simulator.speculation import decide
from simulator.verifiers.registry import Verifier, load_verifier

from .enumeration import EnumeratingChooser, enumerate_outcomes


def _log10_sum(*logs: float) -> float:
    top = max(logs)
    return top + math.log10(sum(10 ** (x - top) for x in logs))


def _amount(log10: float) -> str:
    return f"{round(10 ** log10):,}" if log10 < 12 else f"about 10^{log10:.1f}"


@dataclass(frozen=True)
class SizeEstimate:
    """``log10`` of the trees bound, executions per tree measured on one tree (``None`` when the bound alone
    settles the question), ``log10`` of the completed sequences, and the options the size grows with."""

    log10_trees: float
    per_tree: int | None
    log10_sequences: float
    options: tuple[str, ...]
    rounds_log10: float = 0.0  # log10 of the rounds solved (several for the law of N tokens)
    counted: bool = False  # the trees were counted, not bounded
    at_least: bool = False  # the count stopped early: there are at least that many trees

    @property
    def log10_executions(self) -> float:
        per_tree = math.log10(1 + (self.per_tree or 0))
        return _log10_sum(self.rounds_log10 + self.log10_trees + per_tree, self.log10_sequences)

    def describe(self) -> str:
        per_tree = "" if self.per_tree is None else f" × (1 + {self.per_tree:,} verifier executions, measured on one tree)"
        rounds = "" if self.rounds_log10 == 0 else f"{_amount(self.rounds_log10)} rounds × "
        qualifier = "more than " if self.at_least else "" if self.counted else "at most "
        trees = f"{qualifier}{_amount(self.log10_trees)} draft tree(s)"
        return (f"{_amount(self.log10_executions)} executions: {rounds}{trees}{per_tree} + "
                f"{_amount(self.log10_sequences)} completed sequences")

    def check(self, max_executions: int | None) -> "SizeEstimate":
        """Raise :class:`SizeLimitError` (field ``max_executions``) when the estimate passes ``max_executions``."""
        if max_executions is not None and self.log10_executions > math.log10(max_executions):
            options = ", ".join(f"--{o}" for o in self.options)
            raise SizeLimitError("max_executions", f"{self.describe()}: over the limit of {max_executions:,} "
                                                   f"(--max-executions); the size grows with {options}: reduce "
                                                   "them, or raise --max-executions")
        return self


def _options(drafter: Drafter) -> tuple[str, ...]:
    return ("vocab", *getattr(drafter, "size_options", ()))


def _trees_log10(drafter: Drafter, vocab: int) -> float:
    bound = getattr(drafter, "log10_trees", None)
    return 0.0 if bound is None else bound(vocab)  # a user's drafter: no bound; the run-time count still holds


def probe(view: ModelView, drafter: Drafter, verifier: Verifier, max_executions: int | None) -> int:
    """Executions of ``verifier`` on the first tree the engine drafts (counted up to ``max_executions``)."""
    exact = view.arithmetic == "fraction"
    draft = drafter.draft(view, EnumeratingChooser((), exact))
    count = 0
    for _ in enumerate_outcomes(lambda rng: decide(draft.tree, draft.p, draft.q, verifier, rng, view.vocab), exact):
        count += 1
        if max_executions is not None and count > max_executions:
            break
    return count


def count_trees(view: ModelView, drafter: Drafter, limit: int | None) -> int:
    """The distinct draft trees of one round, counted by enumerating the drafter alone (up to ``limit + 1``: past
    it the count stops)."""
    count = 0
    for _ in enumerate_outcomes(lambda rng: drafter.draft(view, rng), view.arithmetic == "fraction"):
        count += 1
        if limit is not None and count > limit:
            break
    return count


def estimate_round(model: ModelPair, drafter: Drafter, verifier: str | Verifier, arithmetic: str = "fraction",
                   context: Context = (), rounds_log10: float = 0.0,
                   extra_sequences_log10: float | None = None) -> SizeEstimate:
    """The size of one round's certificate (or of ``10^rounds_log10`` rounds, for the law of ``N`` tokens, whose
    completed sequences are ``extra_sequences_log10``). Only the work the ambient ``max_executions`` affords is
    done: the bounds first, then the probe, then (if the bound was too loose to decide) a count of the trees."""
    fn = verifier if callable(verifier) else load_verifier(verifier)[1]
    vocab = model.vocab
    sequences = (drafter.height + 1) * math.log10(vocab) if extra_sequences_log10 is None else extra_sequences_log10
    estimate = SizeEstimate(_trees_log10(drafter, vocab), None, sequences, _options(drafter), rounds_log10)
    limit = current_limits().max_executions
    if limit is not None and estimate.log10_executions > math.log10(limit):
        return estimate
    view = ModelView(model, check_arithmetic(arithmetic), context)
    with computation():
        try:
            estimate = replace(estimate, per_tree=probe(view, drafter, fn, limit))
        except ExecutionLimitError:  # drafting the probe tree alone passed the limit
            return replace(estimate, per_tree=limit)
    if limit is not None and estimate.log10_executions > math.log10(limit):
        affordable = limit // (1 + estimate.per_tree)  # more trees than this pass the limit whatever the count
        with computation():
            try:
                trees = count_trees(view, drafter, affordable)
            except ExecutionLimitError:
                trees = affordable + 1
        estimate = replace(estimate, log10_trees=math.log10(max(trees, 1)), counted=True,
                           at_least=trees > affordable)
    return estimate


def estimate_generation(model: ModelPair, drafter: Drafter, verifier: str | Verifier, length: int,
                        arithmetic: str = "fraction", context: Context = ()) -> SizeEstimate:
    """The law of the first ``length`` tokens: a round's law for each context reached (at most
    ``Σ_{n<N} V^n``, bounded here by ``N·V^(N−1)``) and ``V^N`` generated sequences."""
    log_v = math.log10(model.vocab)
    contexts = math.log10(length) + (length - 1) * log_v
    estimate = estimate_round(model, drafter, verifier, arithmetic, context, contexts, length * log_v)
    return SizeEstimate(estimate.log10_trees, estimate.per_tree, estimate.log10_sequences,
                        (*estimate.options, "tokens"), contexts)
