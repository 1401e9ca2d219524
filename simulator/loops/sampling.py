"""The sampling parameters a generation loop is certified under (:class:`Sampling`), and the plain-sampling row they
make of a model's logits (:meth:`Sampling.probs`), in transformers' processor order or in MLX-LM's."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Mapping, Sequence

from simulator.errors import InvalidParameterError

#: the keys of a sampling dict, in transformers' processor order (repetition penalty first, then the warpers)
KEYS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")
#: the order ``generate`` applies its processors in (transformers' ``_get_logits_processor``)
TRANSFORMERS_ORDER = KEYS
#: the order MLX-LM applies them in: its logits processors (the repetition penalty) before the log-softmax, then
#: ``make_sampler``'s chain, top-p, min-p, top-k, and the temperature last, in ``categorical_sampling``
#: (mlx_lm/sample_utils.py, mlx-lm 0.32.2, lines 55-73 and 273)
MLX_ORDER = ("repetition_penalty", "top_p", "min_p", "top_k", "temperature")


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

    def probs(self, logits, sequence: Sequence[int], order: Sequence[str] = TRANSFORMERS_ORDER):
        """The next-token row plain sampling draws from: ``logits`` (a 1-D torch tensor) processed step by step in
        ``order`` (:data:`TRANSFORMERS_ORDER`, the default, or :data:`MLX_ORDER`), in float64:

        * repetition penalty: the logit of every token of ``sequence`` (prompt and generated alike) divided by
          the penalty where positive, multiplied where negative;
        * temperature: every logit divided by it;
        * top-k: logits below the k-th largest removed (ties with it kept);
        * top-p: in ascending order, the tokens whose cumulative probability is ≤ 1 − top_p removed, the largest
          always kept (MLX's rule, a token dropped when the mass above it is ≥ top_p, is the same cut);
        * min-p: tokens of probability below ``min_p`` × the largest removed, the largest always kept;

        then a softmax. Each step's probabilities are those of the scores it receives (the earlier steps' cuts
        renormalised). Removed tokens get probability 0; a step at its "off" value changes nothing.

        Raises
        ------
        InvalidParameterError
            ``order`` is not an ordering of :data:`KEYS` (field ``order``).
        """
        import torch

        if sorted(order) != sorted(KEYS):
            raise InvalidParameterError("order", f"must order the steps {', '.join(KEYS)}, got {tuple(order)!r}")
        scores = logits.detach().to(torch.float64).clone()
        for step in order:
            scores = _STEPS[step](self, scores, sequence)
        return scores.softmax(-1)


def _repetition_penalty(chosen: Sampling, scores, sequence: Sequence[int]):
    import torch

    if chosen.repetition_penalty == 1.0 or not len(sequence):
        return scores
    seen = torch.tensor(sorted(set(int(t) for t in sequence)), dtype=torch.long)
    picked = scores[seen]
    scores[seen] = torch.where(picked < 0, picked * chosen.repetition_penalty, picked / chosen.repetition_penalty)
    return scores


def _temperature(chosen: Sampling, scores, sequence: Sequence[int]):
    return scores / chosen.temperature


def _top_k(chosen: Sampling, scores, sequence: Sequence[int]):
    import torch

    if not 0 < chosen.top_k < scores.numel():
        return scores
    kth = torch.topk(scores, chosen.top_k).values[-1]
    return scores.masked_fill(scores < kth, -math.inf)


def _top_p(chosen: Sampling, scores, sequence: Sequence[int]):
    import torch

    if chosen.top_p >= 1.0:
        return scores
    ascending, order = torch.sort(scores)
    cumulative = ascending.softmax(-1).cumsum(-1)
    remove = cumulative <= 1 - chosen.top_p
    remove[-1] = False
    return scores.masked_fill(remove.scatter(0, order, remove), -math.inf)


def _min_p(chosen: Sampling, scores, sequence: Sequence[int]):
    if chosen.min_p <= 0.0:
        return scores
    p = scores.softmax(-1)
    remove = p < chosen.min_p * p.max()
    remove[p.argmax()] = False
    return scores.masked_fill(remove, -math.inf)


#: each step of :meth:`Sampling.probs`, by its parameter's name
_STEPS = {"repetition_penalty": _repetition_penalty, "temperature": _temperature, "top_k": _top_k, "top_p": _top_p,
          "min_p": _min_p}
