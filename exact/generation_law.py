"""The exact law of the first ``N`` generated tokens over several rounds, against the target's joint over ``Σ^N``.

Each round's law is the exact engine's (:func:`exact.certificate.view_law`: every draft and verifier choice
of :func:`simulator.speculation.speculate`); rounds are chained by the same transition Monte Carlo uses,
:meth:`simulator.montecarlo.generations.GenerationState.after`. A round's law is computed once per (view, drafter).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from simulator.drafting import Drafter
from simulator.montecarlo.generations import GenerationState, check_length
from simulator.limits import computation
from simulator.models import Context, ModelPair, ModelView, sequence_law
from simulator.numeric import Number, check_arithmetic, rational
from simulator.verifiers.registry import Verifier, load_verifier

from exact.certificate import FLOAT_TOLERANCE, view_law
from exact.enumeration import enumerate_outcomes
from exact.law import Counterexample, law_distance


@dataclass(frozen=True)
class GenerationLaw:
    verifier: str
    tokens: int
    law: dict[tuple[int, ...], Number]
    target: dict[tuple[int, ...], Number]
    tvd: Number
    counterexample: Counterexample | None
    expected_rounds: Number
    expected_accepted: Number  # total draft tokens accepted over the generation
    rounds: dict[int, Number]  # P(number of rounds = r)
    round_laws: int  # distinct rounds solved exactly
    lossless: bool


def generation_law(model: ModelPair, drafter: Drafter, verifier: str | Verifier, length: int,
                   arithmetic: str = "fraction", context: Context = ()) -> GenerationLaw:
    """The exact law of the first ``length`` tokens over several draft–verify rounds: every execution of
    :func:`simulator.montecarlo.generations.generate`, with its probability, in one exact computation.

    Each round's law is computed once per distinct state (context, drafter state, completion rule) and applied to
    every outcome; the drafter advances between rounds as in generation (ADED's table). Round laws count against the
    same execution limit, and each generated sequence counts as one.

    Parameters
    ----------
    model : ModelPair
        The draft and target models.
    drafter : Drafter
        How each round's tree is drafted.
    verifier : str or callable
        A registry name (``"tv-sps"``, ``specproof list``), ``"module:function"``, or a function
        ``verify(tree, p, q, rng) -> (node, y)`` (docs/plugins.md).
    length : int
        The number of tokens generated, ``N ≥ 1``.
    arithmetic : {"fraction", "float"}
        Exact rationals or float64.
    context : tuple of int
        The prompt's tokens.

    Returns
    -------
    GenerationLaw
        The law of the ``N`` tokens beside the target's, their TVD and counterexample, ``lossless``, the expected
        number of rounds and of accepted draft tokens, and the law of the number of rounds.

    Raises
    ------
    InvalidParameterError
        An unknown verifier or arithmetic, or ``length`` out of range.
    VerifierFailure, VerifierOutputError, RandomSourceError, RandomnessError, ExactnessError
        The verifier raised, answered outside this tree and vocabulary, or drew wrongly: as
        :func:`exact.certificate.round_law`.
    ExecutionLimitError, TimeLimitError
        The computation passed a limit in force: as :func:`exact.certificate.round_law`.
    """
    with computation() as scope:
        return _generation_law(model, drafter, verifier, length, arithmetic, context, scope)


def _generation_law(model: ModelPair, drafter: Drafter, verifier: str | Verifier, length: int, arithmetic: str,
                    context: Context, scope) -> GenerationLaw:
    exact = check_arithmetic(arithmetic) == "fraction"
    check_length(length)
    name, fn = (getattr(verifier, "__name__", "verifier"), verifier) if callable(verifier) else load_verifier(verifier)
    view = ModelView(model, arithmetic, context)
    zero: Number = rational(0) if exact else 0.0
    law: dict[tuple[int, ...], Number] = {}
    rounds: dict[int, Number] = {}
    expected_rounds = expected_accepted = zero
    solved = 0
    round_laws: dict[tuple, list] = {}
    stack = [(GenerationState(view, drafter), zero + 1)]
    while stack:
        state, prob = stack.pop()
        if len(state.tokens) >= length:
            scope.sequence()
            scope.advance(float(prob))
            run = state.result(length)
            law[run.tokens] = law.get(run.tokens, zero) + prob
            rounds[run.rounds] = rounds.get(run.rounds, zero) + prob
            expected_rounds += prob * run.rounds
            expected_accepted += prob * sum(run.accepted)
            continue
        key = (state.view.key, state.drafter)
        if key not in round_laws:  # the round's law depends on the view and the drafter only
            round_laws[key] = [(o, p) for o, p in view_law(state.view, state.drafter, fn).outcomes.items() if p > 0]
            solved += 1
        for outcome, p in round_laws[key]:
            stack.append((state.after(outcome), prob * p))
    target = sequence_law(view.q, length, zero + 1)
    tvd, worst = zero, None
    for seq in sorted(set(law) | set(target)):
        gap = abs(law.get(seq, zero) - target.get(seq, zero))
        tvd += gap
        if gap > 0 and (worst is None or gap > worst[0]):
            worst = (gap, seq)
    tvd = tvd / 2
    lossless = tvd == 0 if exact else tvd <= FLOAT_TOLERANCE
    counterexample = None if lossless or worst is None else Counterexample(
        worst[1], law.get(worst[1], zero), target.get(worst[1], zero))
    return GenerationLaw(name, length, law, target, tvd, counterexample, expected_rounds, expected_accepted,
                         dict(sorted(rounds.items())), solved, lossless)


# ---- a whole generation loop, run as a black box -------------------------------------------------------------------

@dataclass(frozen=True)
class LoopLaw:
    """The exact law of a loop's new tokens: every run of it, one per outcome of the torch draws it makes, with its
    probability (:func:`loop_law`)."""

    law: dict[tuple[int, ...], Number]
    executions: int
    expected_passes: Number  # E[target forward passes per run]
    expected_tokens_per_pass: Number | None  # E[new tokens / target passes]; None where the target is never called
    precision: object  # simulator.kernels.capture.Precision: the lowest precision of the loop's arithmetic


def loop_law(loop, target, draft, prompt: tuple[int, ...], max_new_tokens: int, sampling: dict,
             uniforms: str = "continuous") -> LoopLaw:
    """The exact law of the ``max_new_tokens`` tokens ``loop`` generates after ``prompt``.

    The loop's ``prepare(target, draft)``, if it has one, runs first, outside the capture
    (:func:`simulator.loops.convention.prepare_loop`). The loop runs under the torch capture
    (:func:`simulator.kernels.capture.capture`): each of its draws — the
    draft's sampling, the acceptance tests, the correction and bonus draws — is a choice the enumeration takes
    every branch of, so each run of the loop is one execution, replayed from the start for every outcome. Branch
    probabilities are the loop's own float values taken exactly.

    Parameters
    ----------
    loop : callable
        In the convention of :class:`simulator.loops.convention.Loop`.
    target, draft : LoopModel
        The pair (:mod:`simulator.loops.models`); the target's forward passes are counted.
    prompt : tuple of int
        The prompt's token ids.
    max_new_tokens : int
        The tokens each run generates.
    sampling : dict
        The sampling parameters that are on (:class:`simulator.loops.sampling.Sampling`).
    uniforms : str
        How a torch uniform is modelled: ``continuous`` or ``grid`` (docs/kernels.md).

    Returns
    -------
    LoopLaw

    Raises
    ------
    LoopFailure, VerifierOutputError
        The loop raised, or returned something other than ``max_new_tokens`` token ids.
    KernelError, RandomSourceError
        The loop used a random value in a way the capture cannot follow exactly, or drew from another source.
    ExecutionLimitError, TimeLimitError
        The enumeration passed a limit in force (each run of the loop is one execution).
    """
    from simulator.kernels.capture import Precision, capture
    from simulator.loops.convention import prepare_loop, run_loop

    prepare_loop(loop, target, draft)  # outside the capture: what the loop builds from the pair is no draw of it
    precision = Precision()

    def program(rng) -> tuple[tuple[int, ...], int]:
        target.passes = draft.passes = 0
        with capture(rng, uniforms, precision):
            tokens = run_loop(loop, target, draft, prompt, max_new_tokens, sampling)
        return tokens, target.passes

    law: dict[tuple[int, ...], Number] = {}
    passes: Number = Fraction(0)
    per_pass: Number | None = Fraction(0)
    executions = 0
    with computation() as scope:
        for (tokens, count), prob in enumerate_outcomes(program, exact=True):
            law[tokens] = law.get(tokens, Fraction(0)) + prob
            passes += prob * count
            per_pass = None if per_pass is None or count == 0 else per_pass + prob * Fraction(max_new_tokens, count)
            executions += 1
            scope.advance(float(prob))
    return LoopLaw(law, executions, passes, per_pass, precision)


@dataclass(frozen=True)
class LoopCertificate:
    """A loop's law of ``N`` new tokens against its reference's (plain sampling with the same parameters)."""

    loop: str
    reference: str
    lossless: bool
    tvd: Number
    tolerance: float
    tolerance_reason: str
    off_support: Number  # mass on continuations the reference never produces (a -1 placeholder among them)
    counterexample: Counterexample | None
    marginal_tvds: tuple[Number, ...]  # position by position
    expected_passes: Number
    expected_tokens_per_pass: Number | None
    executions: int
    reference_executions: int
    config: dict

    @property
    def accepted_no_draft(self) -> bool:
        """True when every run took one token per target pass (``E[target passes]`` ≥ ``N``, each pass giving at
        least one token): no draft token was accepted with positive probability, so the verdict weighs the loop's
        plain sampling only, not its acceptance."""
        return self.expected_tokens_per_pass is not None and self.expected_passes >= len(self.marginal_tvds)

    def to_json(self) -> dict:
        ce = self.counterexample
        return {"loop": self.loop, "reference": self.reference, "lossless": self.lossless,
                "tvd": _exact_json(self.tvd), "tolerance": self.tolerance, "tolerance_reason": self.tolerance_reason,
                "off_support": _exact_json(self.off_support),
                "counterexample": None if ce is None else {
                    "sequence": list(ce.sequence), "loop_prob": _exact_json(ce.verifier_prob),
                    "reference_prob": _exact_json(ce.target_prob)},
                "marginal_tvds": [_exact_json(t) for t in self.marginal_tvds],
                "expected_target_passes": _exact_json(self.expected_passes),
                "expected_tokens_per_pass": None if self.expected_tokens_per_pass is None
                else _exact_json(self.expected_tokens_per_pass),
                "accepted_no_draft": self.accepted_no_draft,
                "executions": self.executions, "reference_executions": self.reference_executions,
                "config": self.config}


def _exact_json(value: Number) -> dict:
    """An exact rational of floats for JSON: its float and its exact ``num/den``."""
    exact = Fraction(value)
    return {"float": float(exact), "exact": f"{exact.numerator}/{exact.denominator}"}


def certify_loop(loop, reference, target, draft, prompt: tuple[int, ...], max_new_tokens: int, sampling: dict,
                 uniforms: str = "continuous", config: dict | None = None) -> LoopCertificate:
    """Certify a whole generation loop: the exact law of its ``max_new_tokens`` new tokens (:func:`loop_law`)
    against the law of ``reference`` enumerated the same way (plain sampling,
    :func:`simulator.loops.builtin.plain_sampling`, unless another is given).

    Lossless means TVD within the tolerance of the lower of the two runs' arithmetic (float64: 1e-10; anything
    lower is judged at float32's 1e-5) and no mass on a continuation the reference never produces.

    Parameters
    ----------
    loop, reference : callable
        Loops in the convention of :class:`simulator.loops.convention.Loop`.
    target, draft : LoopModel
        The model pair both run on.
    prompt, max_new_tokens, sampling, uniforms
        As :func:`loop_law`'s.
    config : dict, optional
        Recorded in the certificate as given.

    Returns
    -------
    LoopCertificate

    Raises
    ------
    SpecproofError
        As :func:`loop_law`, for either loop.
    """
    from simulator.kernels.kernel import FLOAT32_TOLERANCE, FLOAT64_TOLERANCE
    from simulator.loops.convention import loop_name

    mine = loop_law(loop, target, draft, prompt, max_new_tokens, sampling, uniforms)
    ref = loop_law(reference, target, draft, prompt, max_new_tokens, sampling, uniforms)
    distance = law_distance(mine.law, ref.law, Fraction(0))
    lowest = max((mine.precision, ref.precision), key=lambda p: p.eps)
    if lowest.dtype is None or lowest.name == "float64":
        tolerance, reason = FLOAT64_TOLERANCE, "float64 arithmetic throughout: rounding stays below 1e-10"
    else:
        line = lowest.line.split("site-packages/")[-1]  # a library's line, named from its package
        tolerance, reason = FLOAT32_TOLERANCE, (f"the arithmetic reaches {lowest.name} (first at {line}); judged at "
                                                "float32's tolerance, rounding below 1e-05")
    marginals = tuple(law_distance(_marginal(mine.law, i), _marginal(ref.law, i), Fraction(0)).tvd
                      for i in range(max_new_tokens))
    lossless = distance.tvd <= tolerance and not distance.off_support
    return LoopCertificate(loop_name(loop), loop_name(reference), lossless, distance.tvd, tolerance, reason,
                           distance.off_support, distance.counterexample, marginals, mine.expected_passes,
                           mine.expected_tokens_per_pass, mine.executions, ref.executions, dict(config or {}))


def _marginal(law: dict[tuple[int, ...], Number], position: int) -> dict[tuple[int, ...], Number]:
    out: dict[tuple[int, ...], Number] = {}
    for tokens, prob in law.items():
        out[(tokens[position],)] = out.get((tokens[position],), Fraction(0)) + prob
    return out
