"""Arithmetic every engine shares: validation, normalisation and residuals of probability rows, written once for
floats and exact rationals, so that the exact engine certifies the very functions that sample."""

from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager
from decimal import Context as DecimalContext, Decimal
from fractions import Fraction
from functools import lru_cache, wraps
from typing import Iterable, Iterator, Literal, Sequence, Union

import numpy as np

from .errors import InvalidDistributionError, InvalidParameterError

try:
    from gmpy2 import mpq as _mpq
except ImportError:  # the optional extra ``specproof[gmpy2]`` is not installed
    _mpq = None

#: The exact rational types a row may hold: ``Fraction`` always, ``gmpy2.mpq`` where installed.
RATIONALS: tuple[type, ...] = (Fraction,) if _mpq is None else (Fraction, type(_mpq()))
#: Implementations of exact rationals, by the name ``SPECPROOF_RATIONALS`` takes.
RATIONAL_BACKENDS: tuple[str, ...] = ("gmpy2", "fraction")

Number = Union[float, Fraction]
Arithmetic = Literal["fraction", "float"]
ARITHMETICS: tuple[str, ...] = ("fraction", "float")

#: Rows given as floats must sum to 1 within this much (float rounding of a softmax is ~1e-16 per entry).
SUM_TOLERANCE = 1e-9


def check_arithmetic(arithmetic: str, field: str = "arithmetic") -> str:
    if arithmetic not in ARITHMETICS:
        raise InvalidParameterError(field, f"must be one of {ARITHMETICS}, got {arithmetic!r}")
    return arithmetic


def rational_backend() -> str:
    """The rationals exact rows are made of: ``SPECPROOF_RATIONALS`` (``gmpy2`` or ``fraction``) if set, else
    ``gmpy2`` where it is installed. Asking for ``gmpy2`` without it installed is an error, not a quiet fallback.

    ``gmpy2.mpq`` (GMP's integers) is several times faster than ``fractions.Fraction`` at the hundreds of digits an
    exact law reaches; the two are the same numbers (equal, with equal hashes, printed alike), so every output is
    the same with either.
    """
    return _backend(os.environ.get("SPECPROOF_RATIONALS", "").strip())


@lru_cache(maxsize=None)
def _backend(asked: str) -> str:
    if not asked:
        return "fraction" if _mpq is None else "gmpy2"
    if asked not in RATIONAL_BACKENDS:
        raise InvalidParameterError("SPECPROOF_RATIONALS", f"must be one of {RATIONAL_BACKENDS}, got {asked!r}")
    if asked == "gmpy2" and _mpq is None:
        raise InvalidParameterError("SPECPROOF_RATIONALS", "gmpy2 is not installed (pip install 'specproof[gmpy2]')")
    return asked


def rational_type() -> type:
    """The type :func:`rational` makes now (hot loops look it up once)."""
    return _mpq if rational_backend() == "gmpy2" else Fraction  # type: ignore[return-value]


def rational(value: object = 0, denominator: object = None) -> Number:
    """``value`` (an int, a float taken exactly, a rational or a ``"num/den"`` string), or ``value/denominator``
    for integers, as the current backend's rational (:func:`rational_backend`): the one constructor of the exact
    numbers that enter the engines' arithmetic."""
    make = rational_type()
    if isinstance(value, Fraction) and make is not Fraction:
        # a Fraction made from an mpq (``Fraction(mpq)``) keeps gmpy2's mpz parts, which gmpy2's mpq refuses
        # ("Object does not appear to be Fraction"): hand it the parts as ints
        value = make(int(value.numerator), int(value.denominator))
    return make(value) if denominator is None else make(value, denominator)


def is_rational(value: object) -> bool:
    """Whether ``value`` is an exact rational of either implementation (``int`` aside)."""
    return isinstance(value, RATIONALS)


def parse_probability(value: object, field: str) -> Number:
    """A probability from JSON: a number, or a string ``"3/10"`` / ``"0.3"`` read exactly."""
    if isinstance(value, bool):
        raise InvalidDistributionError(field, f"expected a probability, got {value!r}")
    if isinstance(value, int) or is_rational(value):
        return rational(value)
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        try:
            with unlimited_digits():
                return rational(Fraction(value.strip()))
        except (ValueError, ZeroDivisionError):
            raise InvalidDistributionError(field, f"cannot read {quoted(value)} as a probability") from None
    raise InvalidDistributionError(field, f"expected a number or a 'num/den' string, got {quoted(value)}")


def as_distribution(values: Iterable[object], vocab: int, field: str, arithmetic: str) -> tuple[Number, ...]:
    """Validate a probability row and return it in the requested arithmetic.

    Under ``fraction`` every entry becomes an exact :func:`rational`; a row that came from floats (a softmax, say)
    is converted exactly and renormalised exactly, so that it sums to 1 with no rounding. Under ``float`` the
    row is returned as floats. Negative, NaN or infinite entries, a wrong length, or a sum off 1 by more than
    :data:`SUM_TOLERANCE` (exactly 1 for rational input) raise :class:`InvalidDistributionError`.
    """
    row = list(values)
    if len(row) != vocab:
        raise InvalidDistributionError(field, f"has {len(row)} entries, expected vocab = {vocab}")
    if arithmetic == "float" and len(row) > 32 and all(type(v) is float for v in row):
        floats = np.asarray(row)  # a model's float row: checked in bulk (entry by entry only to name an error)
        if np.isfinite(floats).all() and (floats >= 0).all() and abs(math.fsum(row) - 1.0) <= SUM_TOLERANCE:
            return tuple(row)
    exact_input = True
    for i, v in enumerate(row):
        if isinstance(v, bool) or not isinstance(v, (int, float, *RATIONALS)):
            raise InvalidDistributionError(f"{field}[{i}]", f"not a number: {quoted(v)}")
        if isinstance(v, float):
            exact_input = False
            if not math.isfinite(v):
                raise InvalidDistributionError(f"{field}[{i}]", f"not finite: {v!r}")
        if v < 0:
            raise InvalidDistributionError(f"{field}[{i}]", f"negative probability {decimal_text(v)}")
    if not exact_input and arithmetic == "float":  # the correctly rounded sum suffices for the check
        mass = math.fsum(float(v) for v in row)
        if abs(mass - 1.0) > SUM_TOLERANCE:
            raise InvalidDistributionError(field, f"sums to {mass!r}, not 1 (tolerance {SUM_TOLERANCE})")
        return tuple(float(v) for v in row)
    total = sum(rational(v) for v in row)  # rational(): a Fraction with mpz parts included
    if exact_input and total != 1:
        off = total - 1
        raise InvalidDistributionError(field, f"sums to 1 {'+' if off > 0 else '-'} {decimal_text(abs(off))}, not 1")
    if not exact_input and abs(float(total) - 1.0) > SUM_TOLERANCE:
        raise InvalidDistributionError(field, f"sums to {float(total)!r}, not 1 (tolerance {SUM_TOLERANCE})")
    if arithmetic == "fraction":
        exact = [rational(v) for v in row]
        return tuple(v / total for v in exact) if total != 1 else tuple(exact)
    return tuple(float(v) for v in row)


def total(values: Sequence[Number]) -> Number:
    """Left-to-right sum (one rounding per term in float64, on every Python version: builtin ``sum``
    compensates from 3.12 on), which the batched engines reproduce term by term (``cumsum``, or a column
    at a time)."""
    out = values[0] * 0 if values else 0
    for v in values:
        out = out + v
    return out


def ipow(x: Number, k: int) -> Number:
    """``x**k`` for an integer ``k ≥ 1`` by repeated multiplication, left to right: ``pow`` rounds differently
    across libraries (numpy's vectorised ``pow`` is not libm's), this rounds identically in every engine."""
    out = x
    for _ in range(k - 1):
        out = out * x
    return out


def power_gap(a: Number, b: Number, k: int) -> Number:
    """``(b^k − a^k)/(b − a) = Σ_{j<k} b^j a^{k−1−j}`` for an integer ``k ≥ 1``, by Horner's rule: a sum of
    non-negative terms for ``a, b ≥ 0``, so no cancellation, where the difference of the two powers loses every
    digit once ``b − a`` falls below ``a``'s last bit (and is ``0/0`` when it rounds to nothing). Works element by
    element on arrays."""
    out = power = a * 0 + 1
    for _ in range(k - 1):
        power = power * b
        out = out * a + power
    return out


def normalise(weights: Sequence[Number]) -> tuple[Number, ...]:
    """``weights / sum(weights)``; the caller guarantees a positive sum."""
    s = total(weights)
    return tuple(w / s for w in weights)


def positive_part(values: Iterable[Number]) -> tuple[Number, ...]:
    return tuple(v if v > 0 else v * 0 for v in values)


def residual(target: Sequence[Number], draft: Sequence[Number], scale: Number = 1) -> tuple[Number, ...]:
    """``norm((scale·target − draft)_+)``: the correction distribution after a rejection.

    When the positive part has no mass, ``scale·target ≤ draft`` everywhere; every lossless rule of the
    project reaches that state only on branches of probability zero (the exact engine prunes them), and in
    float64 only through rounding. ``target`` is returned there, the limit as the two rows meet.
    """
    diff = positive_part(scale * t - d for t, d in zip(target, draft))
    if total(diff) > 0:
        return normalise(diff)
    return tuple(target)


def ratio(numerator: Number, denominator: Number) -> Number:
    """``min(1, numerator/denominator)`` with ``x/0 = 1`` for ``x > 0`` and ``0/0 = 0``.

    A drafted token of zero draft probability can only come from a hand-written tree; the limit keeps the
    acceptance probability defined without a division by zero.
    """
    if denominator == 0:
        return 1 if numerator > 0 else 0
    r = numerator / denominator
    return r if r < 1 else 1


#: A fraction printed for people is written out when numerator and denominator together have at most this many
#: digits; a longer one is shown as a decimal, with its size (the JSON keeps it exact).
SHORT_FRACTION_DIGITS = 16


def decimal_text(value: Number, digits: int = 6) -> str:
    """``value`` to ``digits`` significant digits, without float underflow or overflow (``1e-400`` stays itself)."""
    if is_rational(value) and value != 0 and not 1e-300 < abs(value) < 1e300:
        ctx = DecimalContext(prec=digits + 2, Emin=-10**9, Emax=10**9)
        exact = ctx.divide(Decimal(int(value.numerator)), Decimal(int(value.denominator)))
        return f"{exact:.{digits}g}"
    return f"{float(value):.{digits}g}"


def human_number(value: Number, digits: int = 6) -> str:
    """How a number is shown to a person: a short fraction as ``11/9 (1.22222)``, a long one as a decimal with
    its size (``0.0123457, exactly a fraction of 312/315 digits``), a float to ``digits`` digits. Works at any
    size: digits are counted without converting the integers to text (Python refuses past 4,300 digits)."""
    if not is_rational(value):
        return decimal_text(value, digits)
    num, den = digit_count(value.numerator), digit_count(value.denominator)
    if num + den <= SHORT_FRACTION_DIGITS:
        return str(value) if value.denominator == 1 else f"{value} ({decimal_text(value, digits)})"
    return f"{decimal_text(value, digits)}, exactly a fraction of {num}/{den} digits"


def digit_count(n: int) -> int:
    """The number of decimal digits of ``|n|`` (1 for 0), from its bit length: no conversion to text."""
    n = abs(int(n))
    estimate = max(1, int(n.bit_length() * 0.30102999566398120))  # log10(2); off by at most one below
    return estimate + 1 if n >= 10 ** estimate else estimate


@contextmanager
def unlimited_digits() -> Iterator[None]:
    """Integer ↔ text conversion without Python's 4,300-digit limit (a guard against hostile input that an exact
    certificate's own fractions pass: a law over thousands of sequences has denominators of thousands of digits)."""
    get = getattr(sys, "get_int_max_str_digits", None)
    if get is None:  # Python < 3.11: no limit
        yield
        return
    previous = get()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(previous)


def quoted(value: object, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages that quote what a user wrote."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def to_json_number(value: Number, arithmetic: str) -> object:
    """``"num/den"`` under fraction arithmetic, a float otherwise."""
    if arithmetic == "fraction":
        v = Fraction(value)
        with unlimited_digits():
            return f"{v.numerator}/{v.denominator}"
    return float(value)


def row_cache(maxsize: int):
    """``functools.lru_cache`` for functions of probability rows that keeps arithmetics apart.

    ``Fraction(1, 2) == 0.5`` with equal hashes, so a plain cache would hand a float result to an exact
    caller (or the reverse); the key here also records the type of the first row argument's entries.
    """
    def decorate(fn):
        @lru_cache(maxsize=maxsize)
        def cached(exact: bool, *args):
            return fn(*args)

        @wraps(fn)
        def wrapper(*args):
            row = next((a for a in args if isinstance(a, tuple) and a), ())
            if row and not isinstance(row[0], (int, float, *RATIONALS)):  # symbolic rows (exact.prove.symbolic):
                return fn(*args)  # the result depends on the path's sign assumptions, so it is never reused
            return cached(type(row[0]) if row else None, *args)

        wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return wrapper
    return decorate
