"""Sampling mode: run rounds with seeded randomness, one independent stream per trial.

Trial ``t`` of seed ``s`` draws its uniforms from ``SeedSequence([s, t])``, so a trial's outcome depends
only on ``(seed, t)`` and the configuration — never on how many trials run, in what order or in what batch.
This is the reference (unbatched) path; batched engines are checked against it.
"""

from __future__ import annotations

from typing import Iterator

from .drafting import Drafter
from .models import ModelPair, ModelView
from .randomness import SamplingRandomness
from .speculation import RoundOutcome, speculate
from .verifiers.registry import Verifier


def sample_rounds(model: ModelPair, drafter: Drafter, verifier: Verifier, trials: range,
                  seed: int = 0, arithmetic: str = "float") -> Iterator[RoundOutcome]:
    """Outcomes of the given trial indices (a ``range``), each from its own seeded stream."""
    view = ModelView(model, arithmetic)
    for t in trials:
        yield speculate(view, drafter, verifier, SamplingRandomness([seed, t]))
