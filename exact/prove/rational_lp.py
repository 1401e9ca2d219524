"""A small exact linear program: is a system of linear sign conditions on non-negative rationals satisfiable?

The symbolic prover prunes a branch only when its conditions cannot hold together, so the decision must be exact:
a float solver's "infeasible" near a degenerate system (``g > 0`` beside ``g < 0``) would drop a region that
exists. The systems are tiny, so :func:`satisfiable` runs a dense two-phase simplex on
:class:`fractions.Fraction` with Bland's rule (no cycling).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

Form = tuple[Sequence[Fraction], Fraction, str]  # coefficients, constant, relation (">", ">=", "=")


def _pivot(table: list[list[Fraction]], basis: list[int], row: int, col: int) -> None:
    pivot = table[row][col]
    table[row] = [v / pivot for v in table[row]]
    for r, line in enumerate(table):
        if r != row and line[col] != 0:
            factor = line[col]
            table[r] = [a - factor * b for a, b in zip(line, table[row])]
    basis[row] = col


def _simplex(table: list[list[Fraction]], basis: list[int], objective: list[Fraction], columns: int) -> None:
    """Maximise ``objective · y`` over the tableau's first ``columns`` columns (Bland's rule), in place."""
    while True:
        reduced = [objective[j] - sum(objective[basis[r]] * table[r][j] for r in range(len(table)))
                   for j in range(columns)]
        entering = next((j for j in range(columns) if reduced[j] > 0), None)
        if entering is None:
            return
        best, leaving = None, None
        for r, line in enumerate(table):
            if line[entering] > 0:
                ratio = line[-1] / line[entering]
                if best is None or ratio < best or (ratio == best and basis[r] < basis[leaving]):
                    best, leaving = ratio, r
        if leaving is None:  # unbounded: cannot happen, t ≤ 1 bounds the only objective
            raise RuntimeError("exact LP unbounded")
        _pivot(table, basis, leaving, entering)


def satisfiable(forms: Sequence[Form], size: int) -> tuple[bool, list[Fraction] | None]:
    """Whether the conditions hold together for some ``x ≥ 0`` (``size`` variables), and such an ``x``: a point
    with every strict condition strict (the slack-maximising vertex).

    A condition is ``a·x + c  ⋈  0`` with ``⋈`` one of ``>``, ``>=``, ``=``. Strict conditions share one slack
    ``t``: the system holds iff ``max t`` subject to ``a·x + c ≥ t`` (strict ones), ``a·x + c ≥ 0``, ``= 0``,
    ``0 ≤ t ≤ 1`` is positive."""
    strict = [f for f in forms if f[2] == ">"]
    rows: list[tuple[list[Fraction], Fraction, bool]] = []  # A y (≤ or =) b over y = (x, t)
    for coeffs, const, rel in forms:
        a = [-Fraction(c) for c in coeffs] + [Fraction(1 if rel == ">" else 0)]
        rows.append((a, Fraction(const), rel == "="))  # −a·x (+ t) ≤ c ;  = : −a·x = c
    rows.append(([Fraction(0)] * size + [Fraction(1)], Fraction(1), False))  # t ≤ 1
    n = size + 1
    slacks = sum(1 for _, _, eq in rows if not eq)
    artificial = [i for i, (_, b, eq) in enumerate(rows) if eq or b < 0]
    width = n + slacks + len(artificial)
    table, basis = [], []
    slack_at, art_at = n, n + slacks
    for i, (a, b, eq) in enumerate(rows):
        line = a + [Fraction(0)] * (slacks + len(artificial)) + [b]
        if not eq:
            line[slack_at] = Fraction(1)
            own_slack = slack_at
            slack_at += 1
        if b < 0:
            line = [-v for v in line]
        if i in artificial:
            line[art_at] = Fraction(1)
            basis.append(art_at)
            art_at += 1
        else:
            basis.append(own_slack)
        table.append(line)
    if artificial:
        phase1 = [Fraction(0)] * (n + slacks) + [Fraction(-1)] * len(artificial)
        _simplex(table, basis, phase1, width)
        if sum(table[r][-1] for r in range(len(table)) if basis[r] >= n + slacks) != 0:
            return False, None
        for r in range(len(table)):  # drive artificial variables out of the basis where possible
            if basis[r] >= n + slacks:
                col = next((j for j in range(n + slacks) if table[r][j] != 0), None)
                if col is not None:
                    _pivot(table, basis, r, col)
    objective = [Fraction(0)] * width
    objective[size] = Fraction(1)
    _simplex(table, basis, objective, n + slacks)
    y = [Fraction(0)] * width
    for r, b in enumerate(basis):
        y[b] = table[r][-1]
    if strict and y[size] <= 0:
        return False, None
    return True, y[:size]
