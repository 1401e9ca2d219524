"""The knobs of a lossy-by-design rule (docs/lossy.md): each a name, a default and a check, bound from what a user
gives (``--verifier-kwargs``, a gate check's ``verifier_kwargs``) by :func:`bind`; and :func:`parse_kwargs`, the
``NAME=VALUE,...`` text of such options (``--kernel-kwargs`` and ``--request`` too)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping

from ..errors import InvalidParameterError

#: the field a knob's error is named after: ``verifier-kwargs.NAME``
FIELD = "verifier-kwargs"


@dataclass(frozen=True)
class Knob:
    """One knob: its shipped ``name``, its shipped ``default``, what it does (``doc``), and ``check(value)``, which
    returns the value as the rule takes it or raises ``ValueError`` saying why it is refused."""

    name: str
    default: Any
    doc: str
    check: Callable[[Any], Any]


def decimal(value: object) -> Fraction:
    """A number as the exact rational its decimal text says (``0.09`` is 9/100, not the nearest binary float):
    knobs are typed as decimals; a bool or a non-number is refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise ValueError(f"must be a number, got {value!r}")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"must be finite, got {value!r}")
        return Fraction(repr(value))
    return Fraction(value)


def number_in(low: float, high: float | None = None, low_open: bool = False) -> Callable[[Any], Fraction]:
    """A check: a number in ``[low, high]`` (``(low, high]`` with ``low_open``; no upper end for ``None``), held as
    an exact rational (:func:`decimal`)."""
    def check(value: object) -> Fraction:
        x = decimal(value)
        if x < low or (low_open and x == low) or (high is not None and x > high):
            bracket = "(" if low_open else "["
            raise ValueError(f"must be in {bracket}{low}, {'∞)' if high is None else f'{high}]'}, got {value!r}")
        return x
    return check


def whole_in(low: int, high: int | None = None) -> Callable[[Any], int]:
    """A check: an integer in ``[low, high]`` (no upper end for ``None``)."""
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            raise ValueError(f"must be a whole number ≥ {low}{'' if high is None else f' and ≤ {high}'}, got {value!r}")
        return value
    return check


def bind(rule: str, knobs: tuple[Knob, ...], given: Mapping[str, object] | None) -> dict[str, Any]:
    """Every knob of ``rule``, its given value checked, else its default.

    Raises
    ------
    InvalidParameterError
        On field ``verifier-kwargs.NAME``: a name ``rule`` has no knob of (the message lists its knobs, or says it
        has none), or a value its check refuses.
    """
    given = dict(given or {})
    names = [k.name for k in knobs]
    for name in given:
        if name not in names:
            known = f"its knobs: {', '.join(names)}" if names else "it has no knobs"
            raise InvalidParameterError(f"{FIELD}.{name}", f"{rule} has no knob {name!r} ({known})")
    bound: dict[str, Any] = {}
    for knob in knobs:
        value = given.get(knob.name, knob.default)
        try:
            bound[knob.name] = knob.check(value)
        except ValueError as err:
            raise InvalidParameterError(f"{FIELD}.{knob.name}", f"{rule}: {err}") from None
    return bound


def split_items(text: str) -> list[str]:
    """``text`` split at the commas outside brackets, so that a list value (``[0.8,0.64]``) stays one item."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    return [*items, text[start:]]


def parse_kwargs(text: str | None, field_name: str = "kernel-kwargs") -> dict[str, object]:
    """``NAME=VALUE,...``: each value a Python literal (``0.5``, ``True``, ``'x'``, a list ``[0.8,0.64]``, its commas
    inside the brackets) or else a plain string; a malformed item is :class:`InvalidParameterError` on
    ``field_name``."""
    out: dict[str, object] = {}
    for item in split_items(text or ""):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise InvalidParameterError(field_name, f"expected NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[name.strip()] = value.strip()
    return out
