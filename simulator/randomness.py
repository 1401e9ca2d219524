"""The one randomness interface (docs/randomness.md): drafters and verifiers make every random choice through
:class:`Randomness`, and handlers differ only in where each uniform comes from (a seeded generator, a replayed
array, a counter stream, the exact engine's enumeration). Rules never know which runs them."""

from __future__ import annotations

import functools
import math
from typing import Protocol, Sequence

import numpy as np
from array_api_compat import array_namespace

from .errors import RandomnessError
from .numeric import RATIONALS, Number, total


class Randomness(Protocol):
    """What a drafter or verifier may ask for. ``bernoulli(prob)`` is ``u < prob``, and ``prob == 1`` is always true
    (so ``u = 1``, possible only in replay, cannot fail a sure event); ``categorical(weights)`` is the smallest
    index whose running sum of weights exceeds ``u·Σw``, in index order (``u = 1`` picks the last positive
    weight)."""

    def bernoulli(self, prob: Number) -> bool:
        """One Bernoulli draw from the handler's next uniform ``u``: ``u < prob``, and ``prob == 1`` is always true.

        Parameters
        ----------
        prob : int, float or rational
            The probability of ``True``, in ``[0, 1]``. A float within :data:`BERNOULLI_FLOAT_SLACK` outside is taken as
            the end point; under the exact engine with ``fraction`` arithmetic it must be exact (an ``int``, a
            ``Fraction``).

        Returns
        -------
        bool
            ``True`` with probability ``prob``. Under the exact engine each outcome of positive probability is a branch
            enumerated with its probability.

        Raises
        ------
        RandomnessError
            ``prob`` is not a number, is NaN or lies outside ``[0, 1]``; or a replay ran out of uniforms.
        ExactnessError
            A float under ``fraction`` arithmetic (the exact engine).
        ChoiceLimitError
            One enumerated execution made more than :data:`simulator.limits.MAX_CHOICES_PER_EXECUTION` choices.
        """
        ...

    def categorical(self, weights: Sequence[Number]) -> int:
        """One categorical draw from the handler's next uniform ``u``: the smallest index whose running sum of weights
        exceeds ``u·Σw`` (a zero weight is never chosen; ``u = 1`` picks the last positive weight).

        Parameters
        ----------
        weights : sequence of int, float or rational
            Finite, non-negative weights with a positive sum; they need not be normalised. Exact under ``fraction``
            arithmetic, as for :meth:`bernoulli`.

        Returns
        -------
        int
            The index drawn, with probability ``weights[i] / Σw``.

        Raises
        ------
        RandomnessError
            An empty, negative, NaN or infinite weight, or no mass at all (the field names the weight, ``weights[2]``);
            or a replay ran out of uniforms.
        ExactnessError
            A float under ``fraction`` arithmetic (the exact engine).
        ChoiceLimitError
            One enumerated execution made too many choices.
        """
        ...


#: A float Bernoulli parameter within this much of [0, 1] is taken as the end point: float rounding of a
#: probability computed as a ratio or a sum (``0.1 + 0.2 + 0.7 = 1.0000000000000002``) stays far inside it.
#: Exact parameters get no tolerance.
BERNOULLI_FLOAT_SLACK = 1e-12


def check_bernoulli(prob: object) -> Number:
    """Validate a Bernoulli parameter; raise :class:`RandomnessError` naming ``prob``. A float within
    :data:`BERNOULLI_FLOAT_SLACK` outside [0, 1] is returned as 0 or 1."""
    if isinstance(prob, bool) or not isinstance(prob, (int, float, *RATIONALS)):
        raise RandomnessError("prob", f"bernoulli needs a number, got {prob!r}")
    if isinstance(prob, float):
        if math.isnan(prob):
            raise RandomnessError("prob", "bernoulli probability is NaN")
        if -BERNOULLI_FLOAT_SLACK <= prob < 0:
            return 0.0
        if 1 < prob <= 1 + BERNOULLI_FLOAT_SLACK:
            return 1.0
    if not 0 <= prob <= 1:
        slack = f" (floats get a slack of {BERNOULLI_FLOAT_SLACK:g})" if isinstance(prob, float) else ""
        raise RandomnessError("prob", f"bernoulli probability must lie in [0, 1]{slack}, got {prob!r}")
    return prob


def check_weights(weights: Sequence[object]) -> Sequence[Number]:
    """Validate categorical weights: finite, non-negative, with a positive sum."""
    if len(weights) == 0:
        raise RandomnessError("weights", "categorical needs at least one weight")
    positive = False
    for i, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, (int, float, *RATIONALS)):
            raise RandomnessError(f"weights[{i}]", f"not a number: {w!r}")
        if isinstance(w, float) and not math.isfinite(w):
            raise RandomnessError(f"weights[{i}]", f"not finite: {w!r}")
        if w < 0:
            raise RandomnessError(f"weights[{i}]", f"negative weight {w!r}")
        positive = positive or w > 0
    if not positive:
        raise RandomnessError("weights", "categorical weights have zero total mass")
    return weights  # type: ignore[return-value]


def bernoulli_from_uniform(u: float, prob: Number) -> bool:
    """The Bernoulli of docs/randomness.md: ``u < prob``, and a sure event never fails."""
    return prob == 1 or u < prob


def categorical_from_uniform(u: float, weights: Sequence[Number]) -> int:
    """The categorical of docs/randomness.md: the first index whose running sum exceeds ``u·Σw``."""
    threshold = u * total(weights)  # left to right, as the batched engines' running sums
    running = 0
    last_positive = 0
    for i, w in enumerate(weights):
        if w > 0:
            running += w
            last_positive = i
            if running > threshold:
                return i
    return last_positive


class _UniformHandler:
    """Shared body of the handlers that turn one uniform into one decision."""

    def _next_uniform(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def bernoulli(self, prob: Number) -> bool:
        """The Bernoulli of :meth:`Randomness.bernoulli`, on this handler's next uniform."""
        return bernoulli_from_uniform(self._next_uniform(), check_bernoulli(prob))

    def categorical(self, weights: Sequence[Number]) -> int:
        """The categorical of :meth:`Randomness.categorical`, on this handler's next uniform."""
        return categorical_from_uniform(self._next_uniform(), check_weights(weights))


class SamplingRandomness(_UniformHandler):
    """Uniforms from ``numpy.random.default_rng(seed)``, drawn in blocks; same seed, same decisions."""

    _BLOCK = 256

    def __init__(self, seed: int | Sequence[int]) -> None:
        self._generator = np.random.default_rng(seed)
        self._buffer: list[float] = []
        self.consumed = 0

    def _next_uniform(self) -> float:
        if not self._buffer:
            self._buffer = self._generator.random(self._BLOCK).tolist()[::-1]
        self.consumed += 1
        return self._buffer.pop()


def _signed(constant: int) -> int:
    """A 64-bit constant as the int64 with the same bits."""
    return constant - 2**64 if constant >= 2**63 else constant


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)
#: uniforms a trial may draw from its counter stream (the index is packed into the low 20 bits)
MAX_UNIFORMS_PER_TRIAL = 2**20


def _shift_right(z, bits: int):
    """Logical right shift of int64 bit patterns. Torch has no uint64 arithmetic on CPU: an arithmetic shift with
    the copied sign bits masked off. A numpy array is shifted as the uint64 view of the same bits (no copy, five
    times faster than the mask); both give the same bits."""
    if isinstance(z, np.ndarray):
        return (z.view(np.uint64) >> np.uint64(bits)).view(np.int64)
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix(z):
    """SplitMix64's finaliser on int64 bit patterns (products and sums wrap modulo 2^64 in both libraries)."""
    z = z ^ _shift_right(z, 30)
    z = z * _MIX1
    z = z ^ _shift_right(z, 27)
    z = z * _MIX2
    return z ^ _shift_right(z, 31)


_MIX1_U64, _MIX2_U64 = np.uint64(_MIX1 % 2**64), np.uint64(_MIX2 % 2**64)


def _splitmix_inplace(u: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """:func:`_splitmix` on a numpy uint64 array, overwriting it: the same bits without a temporary per step
    (uint64 products wrap modulo 2^64 as the int64 ones do; the shifts go to ``scratch``, an array like ``u``);
    five times faster on the engine's blocks."""
    t = np.empty_like(u) if scratch is None else scratch
    u ^= np.right_shift(u, np.uint64(30), out=t)
    u *= _MIX1_U64
    u ^= np.right_shift(u, np.uint64(27), out=t)
    u *= _MIX2_U64
    u ^= np.right_shift(u, np.uint64(31), out=t)


@functools.lru_cache(maxsize=256)
def _stream_key(seed: int) -> np.uint64:
    """The seed's key, ``splitmix(seed·φ + φ)`` (:func:`counter_uniform`), as a uint64."""
    with np.errstate(over="ignore"):
        key = _splitmix(np.asarray(_signed(seed & 0xFFFFFFFFFFFFFFFF), dtype=np.int64) * _GOLDEN + _GOLDEN)
    return np.uint64(int(key) % 2**64)


def counter_uniform(seed: int, trials, index):
    """Uniform ``index`` of trial ``trials``'s counter stream under ``seed``, elementwise (the arrays broadcast):
    a SplitMix64 hash of ``(seed, trial, index)``, 53 random bits, in ``[0, 1)``. A pure function, so any batch
    of trials, in any order or size, sees the same numbers, and a batched engine can compute the uniforms a
    trial actually reads, when it reads them.

    One implementation for numpy and torch (any device): ``trials`` and ``index`` are integer arrays of either
    library (``array-api-compat`` picks the namespace), the result a float64 array of the same library, bit for
    bit the same numbers. The hash runs on int64 bit patterns with masked shifts (module ``_splitmix``)."""
    if type(index) is np.ndarray and index.dtype == np.int64 and (
            type(trials) is np.ndarray and trials.dtype == np.int64 or isinstance(trials, int)):
        # numpy: the same steps in place on the uint64 view of a fresh array (a 0-d result too is an array we own)
        if index.size and int(index.max()) >= MAX_UNIFORMS_PER_TRIAL:
            raise RandomnessError("uniforms", f"a trial may draw at most {MAX_UNIFORMS_PER_TRIAL} uniforms")
        u = np.asarray(np.left_shift(trials, 20) | index).view(np.uint64)
        scratch = np.empty_like(u)
        _splitmix_inplace(u, scratch)
        u += _stream_key(seed)
        _splitmix_inplace(u, scratch)
        u >>= np.uint64(11)
        out = u.astype(np.float64)
        out *= 1.0 / 2**53
        return out
    xp = array_namespace(trials, index) if not isinstance(trials, int) else array_namespace(index)
    index = xp.asarray(index, dtype=xp.int64)
    trials = xp.asarray(trials, dtype=xp.int64)
    if index.shape != (0,) and int(xp.max(index)) >= MAX_UNIFORMS_PER_TRIAL:
        raise RandomnessError("uniforms", f"a trial may draw at most {MAX_UNIFORMS_PER_TRIAL} uniforms")
    if isinstance(index, np.ndarray):
        return counter_uniform(seed, trials, index)  # now int64 arrays: the path above
    with np.errstate(over="ignore"):
        key = _splitmix(xp.asarray(_signed(seed & 0xFFFFFFFFFFFFFFFF), dtype=xp.int64) * _GOLDEN + _GOLDEN)
        z = _splitmix(_splitmix((trials << 20) | index) + key)
    return xp.astype(_shift_right(z, 11), xp.float64) * (1.0 / 2**53)


def counter_uniforms(seed: int, trials: np.ndarray, start: int, count: int) -> np.ndarray:
    """Uniforms ``start..start+count−1`` of each trial's counter stream (:func:`counter_uniform`):
    ``[len(trials), count]``."""
    if start < 0 or start + count > MAX_UNIFORMS_PER_TRIAL:
        raise RandomnessError("uniforms", f"a trial may draw at most {MAX_UNIFORMS_PER_TRIAL} uniforms")
    xp = array_namespace(trials)
    trials = xp.asarray(trials)
    return counter_uniform(seed, trials[:, None], xp.arange(start, start + count, dtype=xp.int64)[None, :])


class CounterRandomness(_UniformHandler):
    """Trial ``trial``'s counter stream under ``seed`` (:func:`counter_uniforms`), read in blocks: the
    reference path of the Monte Carlo engine, whose batched paths read the same numbers in bulk."""

    _BLOCK = 64

    def __init__(self, seed: int, trial: int) -> None:
        self.seed, self.trial = seed, trial
        self._buffer: list[float] = []
        self.consumed = 0

    def _next_uniform(self) -> float:
        if not self._buffer:
            block = counter_uniforms(self.seed, np.array([self.trial]), self.consumed, self._BLOCK)[0]
            self._buffer = block.tolist()[::-1]
        self.consumed += 1
        return self._buffer.pop()


class ReplayRandomness(_UniformHandler):
    """Uniforms read in order from a given array, as the torch path feeds a batch's.

    Parameters
    ----------
    uniforms : sequence of float
        The uniforms, each in ``[0, 1]``.

    Raises
    ------
    RandomnessError
        A uniform outside ``[0, 1]`` (or NaN), naming it (``uniforms[3]``); a draw past the last uniform.
    """

    def __init__(self, uniforms: Sequence[float]) -> None:
        values = [float(u) for u in uniforms]
        for i, u in enumerate(values):
            if not 0.0 <= u <= 1.0:  # also rejects NaN
                raise RandomnessError(f"uniforms[{i}]", f"must lie in [0, 1], got {u!r}")
        self._uniforms = values
        self.consumed = 0

    def _next_uniform(self) -> float:
        if self.consumed >= len(self._uniforms):
            raise RandomnessError("uniforms", f"replay exhausted after {self.consumed} uniforms")
        u = self._uniforms[self.consumed]
        self.consumed += 1
        return u

