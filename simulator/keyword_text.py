"""Keyword arguments typed on a command line, ``NAME=VALUE,...`` (``--kernel-kwargs``, ``--verifier-kwargs``,
``--request``): :func:`parse_kwargs`."""

from __future__ import annotations

import ast

from .errors import InvalidParameterError


def parse_kwargs(text: str | None, field_name: str = "kernel-kwargs") -> dict[str, object]:
    """``NAME=VALUE,...``: each value a Python literal (``0.5``, ``True``, ``'x'``) or else a plain string; a
    malformed item is :class:`InvalidParameterError` on ``field_name``."""
    out: dict[str, object] = {}
    for item in (text or "").split(","):
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
