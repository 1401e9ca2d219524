"""Typed errors. Every error raised on bad input names the offending field.

All of them derive from :class:`SpecproofError` (a ``ValueError``), so a caller can catch the family;
the CLI turns any of them into exit status 2 with the field in the message.
"""

from __future__ import annotations


class SpecproofError(ValueError):
    """Base class: a problem with an input, attributed to one named field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class InvalidDistributionError(SpecproofError):
    """A probability vector is negative, NaN, of the wrong length or does not sum to 1."""


class InvalidTreeError(SpecproofError):
    """A parent list or token list does not describe a BFS-ordered rooted tree."""


class InvalidParameterError(SpecproofError):
    """A scalar or named option is out of range or unknown."""


class UnsupportedDraftError(SpecproofError):
    """A verifier was given a draft it is not defined on (a tree for a chain-only rule, say)."""


class RandomnessError(SpecproofError):
    """A call of the randomness interface was malformed, or a replay ran out of uniforms."""


class VerifierOutputError(SpecproofError):
    """A verifier returned something that is not a valid ``(node, y)`` decision."""


class ExactnessError(SpecproofError):
    """A float entered a computation that was asked to be exact (``--arithmetic fraction``)."""
