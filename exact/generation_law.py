"""The exact law of the first ``N`` generated tokens over several rounds, against the target's joint over ``Σ^N``.

Each round's law is the exact engine's (:func:`exact.certificate.view_law`: every draft and verifier choice
of :func:`simulator.speculation.speculate`); rounds are chained by the same transition Monte Carlo uses,
:meth:`simulator.montecarlo.generations.GenerationState.after`. A round's law is computed once per (view, drafter).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.drafting import Drafter
from simulator.montecarlo.generations import GenerationState, check_length
from simulator.limits import computation
from simulator.models import Context, ModelPair, ModelView, sequence_law
from simulator.numeric import Number, check_arithmetic, rational
from simulator.verifiers.registry import Verifier, load_verifier

from exact.certificate import FLOAT_TOLERANCE, view_law
from exact.law import Counterexample


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
        The verifier raised, answered outside this tree and vocabulary, or drew wrongly: as :func:`exact.certificate.round_law`.
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
