"""One context's draft rows when a model pair has several draft models (docs/models.md, "Several draft models"):
:class:`DraftRows` is draft model 0's row, so a rule that knows of one draft model reads it unchanged, and carries
every draft model's row for the rules and schemes that use them (the ``k-models`` scheme, Khisti et al.'s rule)."""

from __future__ import annotations

from typing import Sequence

from ..numeric import Number


class DraftRows(tuple):
    """Draft model 0's row (a tuple of its probabilities) with ``models``: every draft model's row, model 0 first.

    Equality and hashing are a tuple's (draft model 0's entries): a cache keyed by a row's value sees model 0 only,
    so code that reads ``models`` keys by ``models`` too. ``tuple(rows)`` is model 0's plain row.
    """

    models: tuple[tuple[Number, ...], ...]

    def __new__(cls, models: Sequence[Sequence[Number]]) -> "DraftRows":
        rows = tuple(tuple(row) for row in models)
        if not rows:
            raise ValueError("DraftRows needs at least one draft model's row")
        self = super().__new__(cls, rows[0])
        self.models = rows
        return self

    def __reduce__(self) -> tuple:  # pickled (worker processes) with every model's row
        return DraftRows, (self.models,)

    def __repr__(self) -> str:
        return f"DraftRows({list(self.models)!r})"
