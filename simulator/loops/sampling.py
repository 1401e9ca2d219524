"""The sampling parameters a generation loop is certified under (:class:`Sampling`), and the plain-sampling row they
make of a model's logits, in transformers' processor order (:meth:`Sampling.probs`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Mapping, Sequence

from simulator.errors import InvalidParameterError

#: the keys of a sampling dict, in transformers' processor order (repetition penalty first, then the warpers)
KEYS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters; each at its "off" value unless given: ``temperature`` 1, ``top_k`` 0 (every token),
    ``top_p`` 1, ``min_p`` 0, ``repetition_penalty`` 1."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        for name, value, ok, what in (
                ("temperature", self.temperature, lambda v: v > 0, "a number > 0"),
                ("top_p", self.top_p, lambda v: 0 < v <= 1, "a number in (0, 1]"),
                ("min_p", self.min_p, lambda v: 0 <= v <= 1, "a number in [0, 1]"),
                ("repetition_penalty", self.repetition_penalty, lambda v: v > 0, "a number > 0")):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not ok(value):
                raise InvalidParameterError(name, f"must be {what}, got {value!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise InvalidParameterError("top_k", f"must be an integer ≥ 0 (0: every token), got {self.top_k!r}")

    @classmethod
    def from_dict(cls, given: Mapping[str, object] | None, field: str = "sampling") -> Sampling:
        """A :class:`Sampling` from a loop's ``sampling`` dict, whose absent keys are off; an unknown key or a
        bad value is refused naming ``field.key``."""
        given = {} if given is None else given
        if not isinstance(given, Mapping):
            raise InvalidParameterError(field, f"must be a dict of {', '.join(KEYS)}, got {given!r}")
        unknown = sorted(set(given) - set(KEYS))
        if unknown:
            raise InvalidParameterError(f"{field}.{unknown[0]}",
                                        f"unknown sampling parameter: one of {', '.join(KEYS)}")
        try:
            return cls(**given)  # type: ignore[arg-type]
        except InvalidParameterError as err:
            raise InvalidParameterError(f"{field}.{err.field}", err.message) from None

    def as_dict(self) -> dict[str, float | int]:
        """The parameters that are on, as the loop convention passes them (a key absent means off)."""
        off = Sampling()
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(off, f.name)}

    def describe(self) -> str:
        on = self.as_dict()
        return ", ".join(f"{k.replace('_', '-')} {v:g}" for k, v in on.items()) if on else "plain sampling, nothing cut"

    def probs(self, logits, sequence: Sequence[int]):
        """The next-token row plain sampling draws from: ``logits`` (a 1-D torch tensor) processed in transformers'
        order, each step as its ``LogitsProcessor`` defines it, in float64.

        1. repetition penalty: the logit of every token of ``sequence`` (prompt and generated alike) divided by
           the penalty where positive, multiplied where negative;
        2. temperature: every logit divided by it;
        3. top-k: logits below the k-th largest removed (ties with it kept);
        4. top-p: in ascending order, the tokens whose cumulative probability is ≤ 1 − top_p removed, the largest
           always kept;
        5. min-p: tokens of probability below ``min_p`` × the largest removed, the largest always kept;

        then a softmax. Removed tokens get probability 0."""
        import torch

        scores = logits.detach().to(torch.float64).clone()
        if self.repetition_penalty != 1.0 and len(sequence):
            seen = torch.tensor(sorted(set(int(t) for t in sequence)), dtype=torch.long)
            picked = scores[seen]
            scores[seen] = torch.where(picked < 0, picked * self.repetition_penalty, picked / self.repetition_penalty)
        scores = scores / self.temperature
        if 0 < self.top_k < scores.numel():
            kth = torch.topk(scores, self.top_k).values[-1]
            scores = scores.masked_fill(scores < kth, -math.inf)
        if self.top_p < 1.0:
            ascending, order = torch.sort(scores)
            cumulative = ascending.softmax(-1).cumsum(-1)
            remove = cumulative <= 1 - self.top_p
            remove[-1] = False
            scores = scores.masked_fill(remove.scatter(0, order, remove), -math.inf)
        if self.min_p > 0.0:
            p = scores.softmax(-1)
            remove = p < self.min_p * p.max()
            remove[p.argmax()] = False
            scores = scores.masked_fill(remove, -math.inf)
        return scores.softmax(-1)
