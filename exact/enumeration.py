"""Exhaustive enumeration of a randomised program's choices (docs/engines.md, "Exact"): every execution with its
exact probability (:func:`enumerate_outcomes`), and one drafted round's ``E[τ]`` over the rule's own choices
(:func:`expected_acceptance`)."""

from __future__ import annotations

import contextlib
import numbers
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np

from simulator.errors import (ChoiceLimitError, ExactnessError, InvalidParameterError, LimitError,
                              SpecproofError)
from simulator.limits import MAX_CHOICES_PER_EXECUTION, active_count
from simulator.numeric import RATIONALS, Number, rational_type
from simulator.randomness import check_bernoulli, check_weights
from simulator.trees import DraftTree

T = TypeVar("T")

#: entries of a chooser's memo of branch lists (by weight vector, and by the identity of a row or probability object
#: seen before) before it is emptied
IDENTITY_MEMO = 100_000


class EnumeratingChooser:
    """Follows ``prefix`` of branch indices, then branch 0; multiplies the probabilities of the branches taken.

    A randomness handler that records each choice's width, so that :func:`enumerate_outcomes` can replay every
    other branch depth first (as Hypothesis's ``ChoiceTree`` does).
    """

    def __init__(self, prefix: Sequence[int], exact: bool,
                 cache: dict | None = None) -> None:
        self._prefix = prefix
        self._exact = exact
        self._rational = rational_type() if exact else float
        self._cache = {} if cache is None else cache
        self.taken: list[int] = []
        self.widths: list[int] = []
        # Under rationals the product is kept as an unreduced numerator and denominator, reduced once when read:
        # a rational's multiplication reduces at every factor, and that was most of an execution's time.
        self._num, self._den = 1, 1
        self._float = 1.0

    @property
    def prob(self) -> Number:
        """The product of the probabilities of the branches taken so far."""
        return self._rational(self._num, self._den) if self._exact else self._float

    def _check_exact(self, value: object, field: str) -> None:
        """Under rationals, a real number that is not exact (a float, or gmpy2's ``mpfr`` that a rational mixed
        with a float becomes) is refused as the float it came from."""
        if self._exact and isinstance(value, numbers.Real) and not isinstance(value, (int, *RATIONALS)):
            raise ExactnessError("arithmetic", f"a float ({value!r}, as {field}) reached the randomness interface "
                                               "under fraction arithmetic: this code computes in floats; pass "
                                               "--arithmetic float (or compute with exact rationals)")

    def _remember(self, value: object, branches: list) -> None:
        """Keep ``branches`` by the identity of ``value`` and hold ``value``, so its id is not reused meanwhile;
        values made afresh at every call never hit, so the memo is emptied past :data:`IDENTITY_MEMO` entries."""
        if len(self._cache) >= IDENTITY_MEMO:
            self._cache.clear()
        self._cache[id(value)] = (value, branches)

    def _choose(self, branches: list[tuple[object, Number]]) -> object:
        k = len(self.taken)
        if k >= MAX_CHOICES_PER_EXECUTION:
            raise ChoiceLimitError("rng", f"one execution made more than {MAX_CHOICES_PER_EXECUTION:,} random "
                                          "choices (an endless loop of rng calls?)")
        index = self._branch(k, len(branches))
        self.taken.append(index)
        self.widths.append(len(branches))
        value, prob = branches[index]
        if self._exact:
            self._num *= prob.numerator
            self._den *= prob.denominator
        else:
            self._float = self._float * prob
        return value

    def _branch(self, k: int, width: int) -> int:
        """The branch the ``k``-th choice takes (of ``width``): the prefix's, then the first."""
        return self._prefix[k] if k < len(self._prefix) else 0

    def bernoulli(self, prob: Number) -> bool:
        held = self._cache.get(id(prob))  # the same probability object again (a cached plan's step)
        if held is not None and held[0] is prob:
            return self._choose(held[1])  # type: ignore[return-value]
        self._check_exact(prob, "prob")
        checked = check_bernoulli(prob)
        one = self._rational(1)
        branches = [(v, w) for v, w in ((True, checked), (False, one - checked)) if w > 0]
        self._remember(prob, branches)
        return self._choose(branches)  # type: ignore[return-value]

    def categorical(self, weights: Sequence[Number]) -> int:
        held = self._cache.get(id(weights))  # the same row object again (a view's row, a cached plan's residual)
        if held is not None and held[0] is weights and type(weights) is tuple:  # a list may have changed since
            return self._choose(held[1])  # type: ignore[return-value]
        key = tuple(weights)
        branches = self._cache.get(key)
        if branches is None:
            for i, w in enumerate(weights):
                self._check_exact(w, f"weights[{i}]")
            check_weights(weights)
            conv = self._rational
            mass = conv(sum(weights))
            branches = [(i, conv(w) / mass) for i, w in enumerate(weights) if w > 0]
            self._cache[key] = branches
        if type(weights) is tuple:
            self._remember(weights, branches)
        return self._choose(branches)  # type: ignore[return-value]


@dataclass(frozen=True)
class Branch:
    """Where an execution failed: the probability of the branch it was on and the choices that led there, each
    ``(branch taken, of how many)`` (a user reads a probability of ``2^-52`` as float rounding at once)."""

    prob: Number
    choices: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, chooser: EnumeratingChooser) -> "Branch":
        return cls(chooser.prob, tuple(zip(chooser.taken, chooser.widths)))


@contextlib.contextmanager
def located(where: Callable[[], Branch], outer: bool = False) -> Iterator[None]:
    """A typed error raised inside says on which branch (``err.branch``; limits aside): ``where()`` at the time
    of the error. ``outer``: that branch was decided before the failing enumeration began (a draft, then its
    verification), so an error that already carries its branch is placed inside it."""
    try:
        yield
    except LimitError:
        raise
    except SpecproofError as err:
        here, inner = where(), getattr(err, "branch", None)
        if inner is None:
            err.branch = here  # type: ignore[attr-defined]
        elif outer:
            err.branch = Branch(here.prob * inner.prob, here.choices + inner.choices)  # type: ignore[attr-defined]
        raise


def replayed(run: Callable[[tuple[int, ...]], tuple[T, object]]) -> Iterator[tuple[T, object]]:
    """The depth-first walk of a tree of choices by replayed prefixes: ``run(prefix)`` runs one execution that
    follows ``prefix`` and then branch 0, and returns its result and the chooser that recorded the branches it
    ``taken`` and each choice's ``widths``; every execution is counted. Shared by this engine and the symbolic
    prover (:func:`exact.prove.symbolic.symbolic_paths`)."""
    count = active_count()
    stack: list[tuple[int, ...]] = [()]
    while stack:
        prefix = stack.pop()
        result, chooser = run(prefix)
        count.execution()
        yield result, chooser
        for depth in range(len(prefix), len(chooser.taken)):  # type: ignore[attr-defined]
            head = tuple(chooser.taken[:depth])  # type: ignore[attr-defined]
            for branch in range(chooser.widths[depth] - 1, 0, -1):  # type: ignore[attr-defined]
                stack.append(head + (branch,))


def enumerate_outcomes(program: Callable[[EnumeratingChooser], T], exact: bool = True
                       ) -> Iterator[tuple[T, Number]]:
    """Every execution of ``program`` with its probability, depth first.

    ``program`` receives an :class:`EnumeratingChooser` as its ``rng``; each execution replays a prefix of branch
    indices and takes branch 0 beyond it (as Hypothesis's ``ChoiceTree`` does), and branches of probability 0 are
    pruned, so a rule never runs on an impossible state. Executions count against :mod:`simulator.limits`.

    Parameters
    ----------
    program : callable
        ``program(rng) -> result``, drawing every random choice through ``rng.bernoulli`` and ``rng.categorical``.
    exact : bool
        Probabilities as exact rationals (a float reaching ``rng`` is then an error) or floats.

    Yields
    ------
    tuple
        ``(result, probability)`` of each execution; the probabilities sum to 1.

    Raises
    ------
    ExactnessError
        A float reached ``rng`` with ``exact`` set.
    RandomnessError, ChoiceLimitError
        A malformed ``rng`` call; one execution making more than :data:`simulator.limits.MAX_CHOICES_PER_EXECUTION`
        choices.
    ExecutionLimitError, TimeLimitError
        The enumeration passed a limit in force.
    """
    # a categorical's branch lists, per weight vector, for this enumeration: the same rows recur in thousands of
    # executions, and validating and dividing them again dominated the run time
    cache: dict = {}  # by weight vector, and by the identity of a row object seen before

    def run(prefix: tuple[int, ...]) -> tuple[T, EnumeratingChooser]:
        chooser = EnumeratingChooser(prefix, exact, cache)
        with located(lambda: Branch.of(chooser)):
            return program(chooser), chooser

    for result, chooser in replayed(run):
        yield result, chooser.prob  # type: ignore[attr-defined]

# ---- one drafted round's expectation ------------------------------------------------------------------------------
#
# A real round's rows are vectors over a large vocabulary (49,152 tokens for SmolLM2). Two reductions make the
# enumeration small, neither changing the expectation:
#
# * support (restrict_round): every row is restricted to the union of the tokens with mass in some row of the round
#   and the drafted tokens. Under top-k processing the others have zero mass in every row, so no rule's arithmetic
#   sees them (a zero adds nothing to a sum, a positive part or a minimum) and no draw can reach them: the
#   restriction drops no mass and renormalises nothing. A round with more than MAX_SUPPORT such tokens is refused;
# * undrafted outcomes (LumpingChooser): a draw over the vocabulary has one branch per drafted token and one for all
#   the others together. Exact for every rule whose acceptance after such a draw depends on the token only through
#   which drafted token it equals, if any: the built-in rules' vocabulary draws are the emitted token (nothing
#   follows) or sample-and-match's target draw (compared with the children's tokens). Tested against the
#   enumeration of every outcome on small vocabularies, rule by rule (tests/test_round_expectation.py).

#: the most tokens a restricted round may keep (each of the rule's row operations is a Python loop over them)
MAX_SUPPORT = 8192


@dataclass(frozen=True)
class DraftedRound:
    """One drafted tree over a (restricted) vocabulary: its rows as float tuples, ``None`` for a node the drafter
    sampled nothing from; ``support[i]`` is token ``i``'s id in the full vocabulary."""

    tree: DraftTree
    p: tuple[tuple[float, ...] | None, ...]
    q: tuple[tuple[float, ...], ...]
    support: tuple[int, ...]


def restrict_round(parents: Sequence[int], tokens: Sequence[int], p: np.ndarray, q: np.ndarray,
                   sampled: Sequence[bool]) -> DraftedRound:
    """A real round restricted to its support: every token with mass in some row of the round, and the drafted tokens.

    Under top-k processing the other tokens have zero mass in every row, so no rule's arithmetic sees them and no
    draw can reach them: the restriction drops no mass and renormalises nothing.

    Parameters
    ----------
    parents, tokens : sequence of int
        The drafted tree (``tokens[0]`` is unused).
    p, q : array of shape ``[n, V]``
        The draft's and the target's rows at each node; ``p[v]`` is read only where ``sampled[v]``.
    sampled : sequence of bool
        Which nodes the drafter sampled children from.

    Returns
    -------
    DraftedRound
        The tree and its rows over the support; ``support[i]`` is token ``i``'s id in the full vocabulary.

    Raises
    ------
    InvalidParameterError
        On ``top_k``: the support holds more than :data:`MAX_SUPPORT` tokens.
    """
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    inner = np.asarray(sampled, dtype=bool)
    mass = (q > 0).any(axis=0) | (p[inner] > 0).any(axis=0)
    mass[np.asarray(tokens[1:], dtype=np.int64)] = True
    support = np.flatnonzero(mass)
    if len(support) > MAX_SUPPORT:
        raise InvalidParameterError("top_k", f"the round's rows put mass on {len(support):,} tokens (at most "
                                             f"{MAX_SUPPORT:,} are enumerated): process them with a top-k")
    new_id = {int(x): i for i, x in enumerate(support)}
    tree = DraftTree(parents, [None] + [new_id[int(x)] for x in tokens[1:]], len(support))
    rows_p = tuple(tuple(p[v, support].tolist()) if inner[v] else None for v in range(len(parents)))
    rows_q = tuple(tuple(q[v, support].tolist()) for v in range(len(parents)))
    return DraftedRound(tree, rows_p, rows_q, tuple(int(x) for x in support))


class LumpingChooser:
    """``inner``'s choices, except that a draw over the whole vocabulary (a weight vector of ``vocab`` entries,
    ``vocab`` above the tree's ``nodes``, so that no draw over nodes or flows is taken for one) has a branch per
    token of ``kept`` and a single branch for every other token, which returns the smallest of them with weight."""

    def __init__(self, inner: EnumeratingChooser, vocab: int, nodes: int, kept: Sequence[int]) -> None:
        self.inner, self.vocab, self.nodes = inner, vocab, nodes
        self.kept = sorted(set(kept))

    def bernoulli(self, prob: Number) -> bool:
        return self.inner.bernoulli(prob)

    def categorical(self, weights: Sequence[Number]) -> int:
        if len(weights) != self.vocab or self.vocab <= self.nodes + 1:
            return self.inner.categorical(weights)
        kept = set(self.kept)
        rest = [x for x, w in enumerate(weights) if w > 0 and x not in kept]
        if len(rest) <= 1:
            return self.inner.categorical(weights)
        lumped = [weights[x] for x in self.kept] + [sum(weights[x] for x in rest)]
        branch = self.inner.categorical(lumped)
        return self.kept[branch] if branch < len(self.kept) else rest[0]


@dataclass(frozen=True)
class Expectation:
    """``E[τ | tree, rows]`` (accepted draft tokens), the total probability enumerated (1 up to rounding) and the
    executions it took."""

    accepted: float
    total: float
    executions: int


def expected_acceptance(verifier: Callable, drafted: DraftedRound, lump: bool = True) -> Expectation:
    """``E[τ | tree, rows]`` of one drafted round: the rule's own choices enumerated, the tree and rows fixed.

    This is a real round's expectation in ``specproof real-report`` (docs/engines.md, "One round's expectation"):
    its mean over rounds has the sampled mean's expectation and much less noise.

    Parameters
    ----------
    verifier : callable
        A reference rule ``verifier(tree, p, q, rng) -> (node, token)``.
    drafted : DraftedRound
        The round, restricted to its support (:func:`restrict_round`).
    lump : bool
        Merge a vocabulary draw's undrafted outcomes into one branch (:class:`LumpingChooser`): exact for every rule
        whose later acceptance depends on such a token only through which drafted token it equals.

    Returns
    -------
    Expectation
        ``accepted`` (``E[τ]``), ``total`` (the probability enumerated, 1 up to rounding) and ``executions``.

    Raises
    ------
    RandomnessError, ChoiceLimitError
        A malformed ``rng`` call, or an execution with too many choices.
    ExecutionLimitError
        The enumeration passed the execution limit in force.
    """
    tree = drafted.tree
    depth = [tree.depth(v) for v in range(len(tree))]
    kept = [x for x in tree.tokens[1:] if x is not None]

    def program(chooser: EnumeratingChooser) -> int:
        rng = LumpingChooser(chooser, len(drafted.support), len(tree), kept) if lump else chooser
        return depth[verifier(tree, drafted.p, drafted.q, rng)[0]]

    accepted = total = 0.0
    executions = 0
    for tau, prob in enumerate_outcomes(program, exact=False):
        accepted += tau * prob
        total += prob
        executions += 1
    return Expectation(accepted, total, executions)
