"""Exact laws and losslessness certificates of a verifier on a model pair and a drafting (:func:`certify`,
:func:`round_law`, :func:`fixed_tree_law`): the exact TVD of the completed output law to ``q^(H+1)``."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

from simulator.completion import REFERENCES
from simulator.errors import InvalidParameterError
from simulator.limits import computation
from simulator.models import Context, ModelPair, ModelView
from simulator.numeric import Number, check_arithmetic, rational, to_json_number
from simulator.speculation import decide, lazy_program
from simulator.trees import DraftTree
from simulator.drafting import Drafter
from simulator.verifiers import VERIFIERS
from simulator.verifiers.registry import Verifier, check_pairing, load_verifier, verifier_name

from .enumeration import Branch, enumerate_outcomes, located
from .recursions.laws import law_function
from .recursions.token_law import ArrayLaw
from .law import Counterexample, Distance, OutputLaw, reference_distances
from .reach import LineTracer, Reach, plugin_tracer, reach_of

FLOAT_TOLERANCE = 1e-10
METHODS = ("enumerate", "recursion")  # how certify computes a round's law


def _resolve(verifier: str | Verifier) -> tuple[str, Verifier]:
    if callable(verifier):
        return getattr(verifier, "__name__", "verifier"), verifier
    return load_verifier(verifier)


def round_law(model: ModelPair, drafter: Drafter, verifier: str | Verifier, arithmetic: str = "fraction",
              context: Context = ()) -> OutputLaw:
    """The exact law of one round: every draft tree and every verifier choice, enumerated.

    Parameters
    ----------
    model : ModelPair
        The draft and target models.
    drafter : Drafter
        How the tree is drafted.
    verifier : str or callable
        A registry name (``"tv-sps"``, ``specproof list``), ``"module:function"``, or a function
        ``verify(tree, p, q, rng) -> (node, y)`` (docs/plugins.md).
    arithmetic : {"fraction", "float"}
        Exact rationals or float64.
    context : tuple of int
        The tokens the round starts after.

    Returns
    -------
    OutputLaw
        The probability of every outcome ``(path, y, completion rule)``; :meth:`OutputLaw.distance` compares its
        completion with ``q^(H+1)``.

    Raises
    ------
    InvalidParameterError
        An unknown verifier or arithmetic, or a rule on a drafting it is undefined on.
    VerifierFailure
        The verifier raised: the message names its exception and its source line.
    VerifierOutputError
        The verifier returned something other than ``(node, y)`` or ``(node, y, completion)`` of this tree and
        vocabulary.
    RandomSourceError
        A plugin drew from a source other than its ``rng`` (Python's ``random``, ``numpy.random``, torch).
    RandomnessError
        A malformed ``rng`` call (a probability outside ``[0, 1]``, weights with no mass).
    ExactnessError
        A float reached ``rng`` under ``fraction`` arithmetic.
    ExecutionLimitError, TimeLimitError
        The computation passed the execution or wall-clock limit in force (:func:`simulator.limits.limits`,
        :func:`simulator.limits.time_limit`).
    """
    _, fn = _resolve(verifier)
    return view_law(ModelView(model, check_arithmetic(arithmetic), context), drafter, fn)


def view_law(view: ModelView, drafter: Drafter, verifier: Verifier) -> OutputLaw:
    """:func:`round_law` on a given view (its context and arithmetic)."""
    with computation() as scope:
        return _view_law(view, drafter, verifier, scope.advance)


def _view_law(view: ModelView, drafter: Drafter, verifier: Verifier, advance,
              tracer: LineTracer | None = None) -> OutputLaw:
    """``tracer``: the plugin's line tracer, on while the plugin runs and told where each execution ends (its lines
    count only when its probability is positive)."""
    check_pairing(verifier_name(verifier), drafter.scheme)  # every library caller gets the command line's check
    exact = view.arithmetic == "fraction"
    if tracer is None:
        return _checked(OutputLaw(_round_outcomes(view, drafter, verifier, exact, advance), drafter.height, view,
                                  exact))
    with tracer.active():
        outcomes = _round_outcomes(view, drafter, tracer.wrap(verifier), exact, advance)
        return _checked(OutputLaw(tracer.weighed(outcomes), drafter.height, view, exact))


def _round_outcomes(view: ModelView, drafter: Drafter, fn: Verifier, exact: bool, advance):
    """:func:`simulator.speculation.speculate`'s outcomes, enumerated; ``advance(mass)`` hears of the probability
    each finished part covers (progress).

    Where the drafter drafts on demand (:func:`~simulator.speculation.lazy_program`), one enumeration
    walks drafting and verification together and a token the verifier never reads is never a choice. Otherwise
    the drafting choices are enumerated first and the verifier's per draft: the same choice tree as
    ``speculate``'s single stream, with each tree drafted once.
    """
    program = lazy_program(view, drafter, fn)
    if program is not None:
        for outcome, prob in enumerate_outcomes(program, exact):
            yield outcome, prob
            advance(float(prob))
        return
    for draft, p_draft in enumerate_outcomes(lambda rng: drafter.draft(view, rng), exact):
        with located(lambda: Branch(p_draft), outer=True):
            for outcome, p_verify in enumerate_outcomes(
                    lambda rng: decide(draft.tree, draft.p, draft.q, fn, rng, view.vocab), exact):
                yield outcome, p_draft * p_verify
        advance(float(p_draft))


def recursion_law(view: ModelView, drafter: Drafter, verifier: str | Verifier) -> OutputLaw | ArrayLaw:
    """The round's law by the recursion the registry names for ``verifier`` (``VerifierSpec.exact_law``, its function
    from :mod:`exact.recursions.laws`: token verification's law over (prefix, shape node), TRV's over subtrees, LV's
    with the deepest level in closed form).

    The same law as enumeration (the tests compare them wherever enumeration finishes), at a cost that grows with the
    sub-problems rather than the draft trees; ``executions`` counts the sub-problems solved.

    Parameters
    ----------
    view : ModelView
        The model, context and arithmetic.
    drafter : Drafter
        How the tree is drafted.
    verifier : str or callable
        A built-in rule with a recursion.

    Returns
    -------
    OutputLaw or ArrayLaw
        The round's law (token verification's is already a law over ``Σ^(H+1)``).

    Raises
    ------
    InvalidParameterError
        On ``method``: the rule has no recursion; on ``verifier``: a rule on a drafting it is undefined on.
    ExecutionLimitError, TimeLimitError
        The recursion passed a limit in force.
    """
    _, fn = _resolve(verifier)
    name = verifier_name(fn)
    spec = VERIFIERS.get(name)
    if spec is None or spec.exact_law is None:
        covered = [n for n, s in VERIFIERS.items() if s.exact_law is not None]
        raise InvalidParameterError("method", f"no exact recursion for {name!r}; the recursion covers {covered}")
    check_pairing(name, drafter.scheme)
    result = law_function(spec.exact_law)(view, drafter)
    if isinstance(result, ArrayLaw):  # a law already over Σ^(H+1), beside the target's (token verification's)
        return _checked(result)
    outcomes, solved = result  # the round's outcomes and the sub-problems solved (TRV, LV)
    law = _checked(OutputLaw(outcomes.items(), drafter.height, view, view.arithmetic == "fraction"))
    law.executions = solved
    return law


def fixed_tree_law(tree: DraftTree, p: Sequence, q: Sequence, verifier: str | Verifier, vocab: int,
                   arithmetic: str = "fraction", view: ModelView | None = None,
                   height: int | None = None) -> OutputLaw:
    """The exact law of a verifier on one given tree: only the verifier's own choices are random.

    Parameters
    ----------
    tree : DraftTree
        The drafted tree.
    p, q : sequence of rows
        ``p[v]`` the draft's row at each inner node, ``q[v]`` the target's at every node.
    verifier : str or callable
        A registry name (``"tv-sps"``, ``specproof list``), ``"module:function"``, or a function
        ``verify(tree, p, q, rng) -> (node, y)`` (docs/plugins.md).
    vocab : int
        The vocabulary size; a returned token must lie in ``0..vocab-1``.
    arithmetic : {"fraction", "float"}
        Exact rationals or float64.
    view : ModelView, optional
        A model whose rows are the tree's: with it the law can be completed to ``height + 1`` tokens.
    height : int, optional
        The completion's height ``H`` (default: the tree's).

    Returns
    -------
    OutputLaw
        The law of ``(path, y)``; completing it needs ``view``.

    Raises
    ------
    InvalidParameterError
        An unknown verifier or arithmetic.
    VerifierFailure, VerifierOutputError, RandomSourceError, RandomnessError, ExactnessError
        The verifier raised, answered outside this tree and vocabulary, or drew wrongly: as :func:`round_law`.
    ExecutionLimitError, TimeLimitError
        The computation passed a limit in force: as :func:`round_law`.
    """
    exact = check_arithmetic(arithmetic) == "fraction"
    _, fn = _resolve(verifier)
    with computation() as scope:
        def outcomes():
            for outcome, prob in enumerate_outcomes(lambda rng: decide(tree, p, q, fn, rng, vocab), exact):
                scope.advance(float(prob))
                yield outcome, prob
        return _checked(OutputLaw(outcomes(), tree.height if height is None else height, view, exact))


def _completing(law, tracer: LineTracer | None):
    """Where the law's completion runs a plugin's completion rule, its lines are traced there too."""
    outcomes = getattr(law, "outcomes", {})
    if tracer is None or not tracer.completes(o.completion for o in outcomes):
        return contextlib.nullcontext()
    return tracer.tracing()


def _checked(law: OutputLaw) -> OutputLaw:
    mass = law.total()
    if (law.exact and mass != 1) or (not law.exact and abs(mass - 1) > FLOAT_TOLERANCE):
        raise RuntimeError(f"enumeration lost mass: total probability {mass}")  # an engine bug, not input
    return law


@dataclass(frozen=True)
class Certificate:
    """The verdict on one verifier and configuration, with its evidence (:func:`certify`).

    ``lossless``, ``tvd`` and ``tolerance`` (with ``tolerance_reason``) are the verdict; ``expected_accepted`` is
    ``E[τ]``, ``profile`` is ``[P(τ ≥ 1), …, P(τ ≥ H)]``; ``counterexample`` is the worst sequence of a lossy verdict;
    ``off_support`` the mass on sequences the target excludes; ``executions`` what was enumerated (or the recursion's
    sub-problems, ``method``); ``reach`` what the rule reached. :meth:`to_json` is the certificate's JSON
    (docs/certificates.md).
    """

    verifier: str
    arithmetic: str
    lossless: bool
    tvd: Number
    tolerance: Number
    expected_accepted: Number
    profile: list[Number]
    counterexample: Counterexample | None
    executions: int
    config: dict = field(default_factory=dict)
    #: mass on sequences the target gives probability 0: any makes the verdict LOSSY, whatever the tolerance
    off_support: Number = 0
    tolerance_reason: str = ""
    #: how the law was computed (:data:`METHODS`): ``executions`` counts enumerated executions, or the recursion's
    #: sub-problems
    method: str = "enumerate"
    #: what the rule reached on this instance: P(τ ≥ 1), P(inner), P(leaf), a plugin's lines (:mod:`exact.reach`)
    reach: Reach | None = None
    #: the TVD of each position's marginal, position 0 (the round's first token) first
    position_tvd: tuple = ()
    #: ``KL(law ‖ target)`` in nats, a float computed from the exact law; ``inf`` with mass off the target's support
    kl: float = 0.0
    #: the distance to each further reference law the registry names for the rule (``VerifierSpec.references``:
    #: ``"greedy"``, greedy decoding), by name
    references: dict[str, Distance] = field(default_factory=dict)

    def lossless_against(self, reference: str) -> bool:
        """The verdict against a further reference law: its TVD within the tolerance and no mass off its support."""
        distance = self.references[reference]
        return distance.tvd <= self.tolerance and distance.off_support == 0

    def to_json(self) -> dict:
        num = lambda v: to_json_number(v, self.arithmetic)  # noqa: E731
        ce = None
        if self.counterexample is not None:
            ce = {"sequence": list(self.counterexample.sequence),
                  "verifier_prob": num(self.counterexample.verifier_prob),
                  "target_prob": num(self.counterexample.target_prob)}
        return {"verifier": self.verifier, "arithmetic": self.arithmetic, "lossless": self.lossless,
                "tvd": num(self.tvd), "tolerance": self.tolerance if isinstance(self.tolerance, float) else num(self.tolerance),
                "tolerance_reason": self.tolerance_reason,
                "off_support": num(self.off_support),
                "expected_accepted": num(self.expected_accepted),
                "block_efficiency": num(self.expected_accepted + 1),
                "accept_profile": [num(v) for v in self.profile], "counterexample": ce,
                "position_tvd": [num(v) for v in self.position_tvd],
                "kl": "inf" if self.kl == float("inf") else self.kl,
                "executions": self.executions, "method": self.method, "config": self.config,
                "reach": None if self.reach is None else self.reach.to_json(num),
                "references": {name: {"law": REFERENCES[name][0], "tvd": num(d.tvd), "off_support": num(d.off_support),
                                      "lossless": self.lossless_against(name)} for name, d in self.references.items()}}


def certify(model: ModelPair, drafter: Drafter, verifier: str | Verifier, arithmetic: str = "fraction",
            context: Context = (), config: dict | None = None, method: str = "enumerate") -> Certificate:
    """Certify ``verifier`` on one model pair and drafting: the exact TVD of its completed output law to ``q^(H+1)``,
    ``E[τ]``, the worst sequence when they differ, each position's marginal TVD and the KL divergence from the
    target.

    Lossless means a TVD within the tolerance (0 under fractions, :data:`FLOAT_TOLERANCE` under floats, or what a
    verifier computing in floats states through ``float_tolerance()``, as a torch kernel does) and no mass on a
    sequence of target probability 0. The verdict covers this pair only: :func:`exact.pairs.certify_pairs` tries
    several, :func:`exact.prove.prover.prove` decides every pair of a shape.

    Why ``1e-10`` under floats: the completed law is a sum of at most a few ``10^5`` products of a dozen rounded
    factors, each with a relative error near ``1e-16``, so rounding stays below ``1e-12`` (the tests compare float64
    with exact rationals to that bound); the tolerance leaves a margin of 100.

    Parameters
    ----------
    model : ModelPair
        The draft ``p`` and the target ``q`` (:mod:`simulator.models`).
    drafter : Drafter
        How the round's tree is drafted: ``FixedShape(topology, scheme)``, DySpec's or ADED's drafter
        (:mod:`simulator.drafting`).
    verifier : str or callable
        A registry name (``"tv-sps"``, ``specproof list``), ``"module:function"``, or a function
        ``verify(tree, p, q, rng) -> (node, y)`` (docs/plugins.md).
    arithmetic : {"fraction", "float"}
        Exact rationals (lossless: TVD = 0) or float64.
    context : tuple of int
        The tokens the round starts after.
    config : dict, optional
        Recorded in the certificate as given.
    method : {"enumerate", "recursion"}
        ``enumerate`` runs the rule on every draft and every choice; ``recursion`` computes the same law by the
        rule's recursion in the registry (:func:`recursion_law`).

    Returns
    -------
    Certificate
        ``lossless``, ``tvd``, ``tolerance`` with its reason, ``expected_accepted`` (``E[τ]``), the acceptance profile
        ``[P(τ ≥ 1), …]``, the counterexample of a lossy verdict, ``executions``, and ``reach``, what the rule reached
        on this instance (:mod:`exact.reach`).

    Raises
    ------
    InvalidParameterError
        An unknown verifier, arithmetic or method; a rule on a drafting it is undefined on (Layer Verification on
        a dynamic tree); ``method="recursion"`` for a rule with no recursion.
    InvalidDistributionError
        A model row that is not a probability vector.
    VerifierFailure, VerifierOutputError, RandomSourceError, RandomnessError, ExactnessError
        The verifier raised, answered outside this tree and vocabulary, or drew wrongly: as :func:`round_law`.
    ExecutionLimitError, TimeLimitError
        The computation passed a limit in force: as :func:`round_law`.
    """
    name, fn = _resolve(verifier)
    if method not in METHODS:
        raise InvalidParameterError("method", f"unknown method {method!r}; choose from {METHODS}")
    tracer = plugin_tracer(fn) if method == "enumerate" else None  # a plugin has no recursion
    with computation() as scope:  # the round's law and its completion count together
        view = ModelView(model, check_arithmetic(arithmetic), context)
        law = (_view_law(view, drafter, fn, scope.advance, tracer) if method == "enumerate"
               else recursion_law(view, drafter, fn))
        with _completing(law, tracer):
            distance = law.distance()
            spec = VERIFIERS.get(verifier_name(fn))
            references = reference_distances(law, spec.references) if spec is not None else {}
    tolerance, reason = _tolerance(fn, law.exact)
    reason = getattr(law, "tolerance_reason", reason)  # a recursion's own rounding argument
    lossless = distance.tvd <= tolerance and distance.off_support == 0
    return Certificate(name, arithmetic, lossless, distance.tvd, tolerance, law.expected_accepted(), law.profile(),
                       None if lossless else distance.counterexample, law.executions, dict(config or {}),
                       distance.off_support, reason, method, reach_of(law, tracer), distance.position_tvd,
                       distance.kl, references)


def certify_against(model: ModelPair, drafter: Drafter, verifier: str | Verifier,
                    reference: Callable[[int], dict[tuple[int, ...], float]], tolerance: float, reason: str,
                    config: dict | None = None) -> Certificate:
    """:func:`certify` in float64 against a reference law of the first ``H + 1`` tokens computed another way, instead of
    the view's own ``q^(H+1)``: a causal LM's joint from plain forward passes, while the rule reads the rows a tree
    pass computes (:mod:`simulator.real.crosscheck`).

    Parameters
    ----------
    model : ModelPair
        The pair whose rows the rule reads.
    drafter : Drafter
        How the tree is drafted.
    verifier : str or callable
        A registry name, ``"module:function"`` or a verifier function.
    reference : callable
        ``reference(H + 1)``: the law to compare with, sequence → probability.
    tolerance : float
        Lossless means TVD ≤ ``tolerance`` and no mass on a sequence the reference gives probability 0.
    reason : str
        Why that much tolerance, recorded in the certificate.
    config : dict, optional
        Recorded in the certificate as given.

    Returns
    -------
    Certificate
        As :func:`certify`'s, in float64.

    Raises
    ------
    SpecproofError
        As :func:`certify`: an invalid verifier or row, a failing verifier, a draw outside ``rng``, a limit passed.
    """
    name, fn = _resolve(verifier)
    tracer = plugin_tracer(fn)
    with computation() as scope:
        law = _view_law(ModelView(model, "float"), drafter, fn, scope.advance, tracer)
        with _completing(law, tracer):
            distance = law.distance(reference(drafter.height + 1))
    lossless = distance.tvd <= tolerance and distance.off_support == 0
    return Certificate(name, "float", lossless, distance.tvd, tolerance, law.expected_accepted(), law.profile(),
                       None if lossless else distance.counterexample, law.executions, dict(config or {}),
                       distance.off_support, reason, reach=reach_of(law, tracer),
                       position_tvd=distance.position_tvd, kl=distance.kl)


def _tolerance(fn: Verifier, exact: bool) -> tuple[Number, str]:
    stated = getattr(fn, "float_tolerance", None)
    if callable(stated):
        return stated()
    if exact:
        return rational(0), "exact rationals: lossless means TVD = 0"
    return FLOAT_TOLERANCE, ("float64 enumeration: rounding of a few hundred thousand products of a dozen factors "
                             "stays below 1e-12")
