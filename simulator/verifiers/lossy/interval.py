"""Exact decisions of comparisons through ``exp`` and ``log`` (an entropy against a threshold, a log-probability
against another): both sides evaluated on exact inputs in interval arithmetic (mpmath's ``iv``) at rising
precision until the intervals part (:func:`greater`)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable

from mpmath import iv

from ...errors import UndecidedComparisonError

#: the working precisions tried, in bits; past the last, a comparison is a tie
PRECISIONS = (64, 256, 1024)

Side = Callable[[Any], Any]  # ctx -> an mpmath interval


def exact(ctx: Any, value: object) -> Any:
    """``value`` (an int, a Fraction, a float or any rational number) as an interval of ``ctx`` that contains it
    exactly: numerator and denominator are integers, so only their quotient rounds, outward."""
    frac = Fraction(value)  # type: ignore[arg-type]  # a float is a binary fraction, held exactly
    return ctx.mpf(frac.numerator) / ctx.mpf(frac.denominator)


def greater(left: Side, right: Side, rule: str, row: str, or_equal: bool = False) -> bool:
    """Whether ``left > right`` (``left >= right`` with ``or_equal``), decided exactly.

    Parameters
    ----------
    left, right : callable
        ``side(ctx)``: the side as an interval of the mpmath interval context ``ctx``, built from exact inputs
        (:func:`exact`) with ``ctx``'s functions (``ctx.exp``, ``ctx.log``).
    rule, row : str
        The rule and the row compared, named by the error of a tie.
    or_equal : bool
        Whether equality counts as greater.

    Returns
    -------
    bool
        The comparison's value: the first precision of :data:`PRECISIONS` at which the intervals are disjoint
        decides it.

    Raises
    ------
    UndecidedComparisonError
        The intervals still overlap at the highest precision: the sides are equal, or closer than ``2^-1000``
        relative; the field names the rule and the row.
    """
    saved = iv.prec
    try:
        for bits in PRECISIONS:
            iv.prec = bits
            a, b = left(iv), right(iv)
            if a.a > b.b:
                return True
            if a.b < b.a:
                return False
    finally:
        iv.prec = saved
    relation = ">=" if or_equal else ">"
    raise UndecidedComparisonError(f"{rule}.{row}", f"cannot decide {relation}: the two sides agree to "
                                                    f"{PRECISIONS[-1]} bits (a tie, or closer than intervals of "
                                                    "that precision tell apart); move the knob or the row off it")
