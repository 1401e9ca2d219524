"""The size of an exact computation estimated before it starts, and the refusal of one that is too large
(:func:`estimate_round`; docs/limits.md, "Exact enumeration")."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Callable

from simulator.drafting import Drafter
from simulator.errors import ExecutionLimitError, SizeLimitError
from simulator.limits import computation, current_limits, suggested_limit
from simulator.models import Context, ModelPair, ModelView
from simulator.numeric import check_arithmetic
from simulator.randomness import Randomness
from simulator.speculation import decide, lazy_program
from simulator.verifiers import VERIFIERS
from simulator.verifiers.registry import Verifier, load_verifier, verifier_name

from .enumeration import Branch, EnumeratingChooser, enumerate_outcomes, located


#: Random descents of the choice tree behind an estimate of a lazily drafted round's executions.
PROBES = 64


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
    #: drafting on demand: log10 of a round's executions estimated by Knuth's estimator (mean, and the mean
    #: less two standard errors; None when the standard error passes the mean), None when drafted eagerly
    sampled: tuple[float, float | None] | None = None
    #: the verifier has an exact recursion (``certify --method recursion``), whose cost this does not estimate
    recursion: bool = False

    @property
    def log10_executions(self) -> float:
        if self.sampled is not None:
            return _log10_sum(self.rounds_log10 + self.sampled[0], self.log10_sequences)
        per_tree = math.log10(1 + (self.per_tree or 0))
        return _log10_sum(self.rounds_log10 + self.log10_trees + per_tree, self.log10_sequences)

    @property
    def log10_low(self) -> float:
        """What the refusal compares with the limit: the estimate, or for a sampled one its lower end."""
        if self.sampled is None:
            return self.log10_executions
        low = self.sampled[1]
        return self.log10_sequences if low is None else _log10_sum(self.rounds_log10 + low, self.log10_sequences)

    def describe(self) -> str:
        rounds = "" if self.rounds_log10 == 0 else f"{_amount(self.rounds_log10)} rounds × "
        if self.sampled is not None:
            low = "" if self.sampled[1] is None else f"; at least {_amount(self.sampled[1])} with 95% confidence"
            return (f"{_amount(self.log10_executions)} executions, estimated: {rounds}{_amount(self.sampled[0])} per "
                    f"round (drafted on demand; {PROBES} random descents of the choice tree{low}) + "
                    f"{_amount(self.log10_sequences)} completed sequences")
        per_tree = "" if self.per_tree is None else f" × (1 + {self.per_tree:,} verifier executions, measured on one tree)"
        qualifier = "more than " if self.at_least else "" if self.counted else "at most "
        trees = f"{qualifier}{_amount(self.log10_trees)} draft tree(s)"
        return (f"{_amount(self.log10_executions)} executions: {rounds}{trees}{per_tree} + "
                f"{_amount(self.log10_sequences)} completed sequences")

    def check(self, max_executions: int | None) -> "SizeEstimate":
        """Raise :class:`SizeLimitError` (field ``max_executions``) when the estimate passes ``max_executions``."""
        if max_executions is not None and self.log10_low > math.log10(max_executions):
            options = ", ".join(f"--{o}" for o in self.options)
            raise SizeLimitError("max_executions", f"{self.describe()}: over the limit of {max_executions:,} "
                                                   f"(--max-executions); the size grows with {options}: reduce "
                                                   f"them{self._raise_to()}"
                                                   + ("; or compute the law by the rule's exact recursion, which "
                                                      "enumerates no trees (--method recursion)" if self.recursion
                                                      else ""))
        return self


    def _raise_to(self) -> str:
        """The limit that would let the run start, where a run of this size could finish (the engine enumerates
        thousands of executions a second)."""
        if self.log10_executions > MAX_SUGGESTED_LOG10:
            return f" (a run of about 10^{self.log10_executions:.1f} executions would not finish)"
        return f", or pass --max-executions {suggested_limit(10 ** self.log10_executions)} or more (0 for none)"


#: past about 10^10 executions (days at the engine's rates) a refusal suggests no larger limit
MAX_SUGGESTED_LOG10 = 10.0


def _options(drafter: Drafter) -> tuple[str, ...]:
    return ("vocab", *getattr(drafter, "size_options", ()))


def _trees_log10(drafter: Drafter, vocab: int) -> float:
    bound = getattr(drafter, "log10_trees", None)
    return 0.0 if bound is None else bound(vocab)  # a user's drafter: no bound; the run-time count still holds


def probe(view: ModelView, drafter: Drafter, verifier: Verifier, max_executions: int | None) -> int:
    """Executions of ``verifier`` on the first tree the engine drafts (counted up to ``max_executions``)."""
    exact = view.arithmetic == "fraction"
    drafting = EnumeratingChooser((), exact)
    draft = drafter.draft(view, drafting)
    count = 0
    with located(lambda: Branch.of(drafting), outer=True):
        for _ in enumerate_outcomes(lambda rng: decide(draft.tree, draft.p, draft.q, verifier, rng, view.vocab),
                                    exact):
            count += 1
            if max_executions is not None and count > max_executions:
                break
    return count


class _Descent(EnumeratingChooser):
    """A descent of the choice tree taking a uniformly random branch at every choice."""

    def __init__(self, exact: bool, draw: random.Random) -> None:
        super().__init__((), exact)
        self._draw = draw

    def _branch(self, k: int, width: int) -> int:
        return self._draw.randrange(width)


def sample_executions(program: Callable[[Randomness], object], exact: bool,
                      probes: int = PROBES) -> tuple[float, float | None]:
    """Knuth's estimate of the leaves of ``program``'s choice tree: log10 of the mean over ``probes`` random
    descents of the product of the branch counts met, and of the mean less two standard errors (``None`` when
    that is not positive). Seeded: the same program gives the same estimate."""
    draw = random.Random(0)
    logs = []
    for _ in range(probes):
        descent = _Descent(exact, draw)
        with located(lambda: Branch.of(descent)):
            program(descent)
        logs.append(sum(math.log10(w) for w in descent.widths))
    top = max(logs)
    scaled = [10 ** (x - top) for x in logs]  # the products over the largest, which keeps them finite
    mean = sum(scaled) / probes
    spread = math.sqrt(sum((x - mean) ** 2 for x in scaled) / max(probes - 1, 1) / probes)
    low = mean - 2 * spread
    return top + math.log10(mean), (top + math.log10(low) if low > 0 else None)


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
    completed sequences are ``extra_sequences_log10``). Drafted on demand: sampled (:func:`sample_executions`). Drafted
    eagerly, only the work the ambient ``max_executions`` affords is done: the bounds first, then the probe, then
    (if the bound was too loose to decide) a count of the trees.

    Two estimates, by how the round is enumerated: drafted on demand (:mod:`simulator.drafting.lazy_draft`), Knuth's
    estimator over the choice tree (:func:`sample_executions`; refused only when the mean less two standard errors
    passes the limit); drafted eagerly, trees × (1 + executions per tree), from the drafter's bound or count
    (:func:`count_trees`) and one probe tree (:func:`probe`). Both add the ``V^(H+1)`` completed sequences. Numbers
    are base-10 logarithms; the run-time count (:mod:`simulator.limits`) still stops anything underestimated.
    """
    fn = verifier if callable(verifier) else load_verifier(verifier)[1]
    vocab = model.vocab
    sequences = (drafter.height + 1) * math.log10(vocab) if extra_sequences_log10 is None else extra_sequences_log10
    spec = VERIFIERS.get(verifier_name(fn))
    estimate = SizeEstimate(_trees_log10(drafter, vocab), None, sequences, _options(drafter), rounds_log10,
                            recursion=spec is not None and spec.exact_law is not None)
    view = ModelView(model, check_arithmetic(arithmetic), context)
    program = lazy_program(view, drafter, fn)
    limit = current_limits().max_executions
    if program is not None:
        if limit is not None and sequences > math.log10(limit):  # past the limit whatever a round costs
            return replace(estimate, sampled=(0.0, 0.0))
        return replace(estimate, sampled=sample_executions(program, view.arithmetic == "fraction"))
    if limit is not None and estimate.log10_executions > math.log10(limit):
        return estimate
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
    return replace(estimate, options=(*estimate.options, "tokens"), rounds_log10=contexts)
