"""Multi-round generation: draft–verify rounds until ``N`` tokens exist, the drafter's state carried across rounds;
:meth:`GenerationState.after` is the one transition Monte Carlo (:func:`generate`) and the exact engine
(:func:`exact.generation_law.generation_law`) share."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from simulator.drafting import Drafter
from simulator.errors import InvalidParameterError
from simulator.models import ModelPair, ModelView
from simulator.randomness import CounterRandomness, Randomness
from simulator.speculation import RoundOutcome, speculate
from simulator.verifiers.registry import Verifier, check_pairing


@dataclass(frozen=True)
class Generation:
    """The first ``N`` generated tokens and the draft tokens accepted in each round (the last round may
    run past ``N``; its accepted tokens all count)."""

    tokens: tuple[int, ...]
    accepted: tuple[int, ...]

    @property
    def rounds(self) -> int:
        return len(self.accepted)


def check_length(length: object) -> int:
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise InvalidParameterError("tokens", f"must be an integer ≥ 1, got {length!r}")
    return length


@dataclass(frozen=True)
class GenerationState:
    """Where a generation stands between rounds: the next round's view and drafter, what was generated.

    After a round the drafter advances on the history (ADED's table) and the next view follows the round's
    completion rule (greedy BV's modified target, for its window).
    """

    view: ModelView
    drafter: Drafter
    tokens: tuple[int, ...] = ()
    accepted: tuple[int, ...] = ()

    def after(self, outcome: RoundOutcome) -> "GenerationState":
        """The state after a round: the view follows the round's completion rule, the drafter advances on
        the whole history."""
        block = outcome.path + (outcome.y,)
        view = outcome.completion.next_view(self.view, block)
        return GenerationState(view, self.drafter.advance(view.context), self.tokens + block,
                               self.accepted + (outcome.accepted,))

    def result(self, length: int) -> Generation:
        return Generation(self.tokens[:length], self.accepted)


def generate(view: ModelView, drafter: Drafter, verifier: Verifier, length: int, rng: Randomness) -> Generation:
    """Run rounds from ``view``'s context until at least ``length`` tokens are generated."""
    state = GenerationState(view, drafter)
    while len(state.tokens) < length:
        state = state.after(speculate(state.view, state.drafter, verifier, rng))
    return state.result(length)


@dataclass(frozen=True)
class GenerationSummary:
    """Monte Carlo over model seeds: accepted draft tokens per round (pooled within a seed: total accepted
    over total rounds), its standard error across seeds (``None`` from one seed, with the reason in
    ``se_note``), and the mean number of rounds."""

    verifier: str
    seeds: int
    trials: int
    tokens: int
    accepted_per_round: float
    accepted_per_round_se: float | None
    rounds_mean: float
    per_seed: list[dict]
    se_note: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def run_generations(model_for_seed: Callable[[int], ModelPair], drafter: Drafter, name: str, verifier: Verifier,
                    seeds: int, trials: int, length: int, progress: Callable[[int], None] | None = None,
                    first_seed: int = 0) -> GenerationSummary:
    """``trials`` generations of ``length`` tokens for each model seed ``first_seed … first_seed + seeds − 1``;
    trial ``t`` of seed ``s`` uses the counter stream ``(s, t)``, so results do not depend on order or batching.
    ``progress(1)`` after each generation."""
    check_length(length)
    check_pairing(name, drafter.scheme)
    for field, value, low in (("seeds", seeds, 1), ("trials", trials, 1), ("seed", first_seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidParameterError(field, f"must be an integer ≥ {low}, got {value!r}")
    per_seed = []
    for s in range(first_seed, first_seed + seeds):
        view = ModelView(model_for_seed(s), "float")
        accepted = rounds = 0
        for t in range(trials):
            run = generate(view, drafter, verifier, length, CounterRandomness(s, t))
            accepted += sum(run.accepted)
            rounds += run.rounds
            if progress is not None:
                progress(1)
        per_seed.append({"seed": s, "accepted_per_round": accepted / rounds, "rounds_mean": rounds / trials})
    values = np.array([r["accepted_per_round"] for r in per_seed])
    se, note = (float(values.std(ddof=1) / math.sqrt(seeds)), None) if seeds > 1 else (
        None, "one model seed: the standard error is across model seeds, so it needs at least two (--seeds 2)")
    return GenerationSummary(name, seeds, trials, length, float(values.mean()), se,
                             float(np.mean([r["rounds_mean"] for r in per_seed])), per_seed, note)
