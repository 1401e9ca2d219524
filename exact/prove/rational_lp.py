"""A small exact linear program (:func:`satisfiable`): is a system of linear sign conditions on non-negative rationals
satisfiable? Floats only ever propose: each answer rests on an exact point or an exact certificate."""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

#: Systems with at least this many variables are tried on the support of a float solution first.
GUIDED_SIZE = 64
#: A float solution's variable is in its support above this value (the exact solve decides what counts).
SUPPORT_TOLERANCE = 1e-9

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
    with every strict condition strict (a slack-maximising vertex, of the whole system or of the face where the
    variables a float solution leaves at 0 are 0).

    A condition is ``a·x + c  ⋈  0`` with ``⋈`` one of ``>``, ``>=``, ``=``. Strict conditions share one slack
    ``t``: the system holds iff ``max t`` subject to ``a·x + c ≥ t`` (strict ones), ``a·x + c ≥ 0``, ``= 0``,
    ``0 ≤ t ≤ 1`` is positive.

    The symbolic prover prunes a branch only when its conditions cannot hold together, so the decision must be exact:
    a float solver's "infeasible" near a degenerate system (``g > 0`` beside ``g < 0``) would drop a region that
    exists. A dense two-phase simplex in exact rationals with Bland's rule (no cycling) decides; a large system (a
    degenerate cell's certificate: hundreds of equalities in hundreds of unknowns, minutes of exact pivots) is first
    solved by scipy's HiGHS in floats. If HiGHS finds a point, the exact simplex runs on the variables that point
    uses, and a point found there is a point of the whole system. If HiGHS finds none and no condition is strict, it
    is asked for a Farkas certificate with a margin (multipliers whose combination is negative on every ``x ≥ 0``),
    converted to rationals and checked exactly. Only when neither settles it does the exact simplex run on the whole
    system.
    """
    if size >= GUIDED_SIZE:
        support = _float_support(forms, size)
        if support is not None and len(support) < size:
            ok, point = _exact(_restricted(forms, support), len(support))
            if ok:
                full = [Fraction(0)] * size
                for j, v in zip(support, point):  # type: ignore[arg-type]
                    full[j] = v
                return True, full
        if support is None and all(rel != ">" for _, _, rel in forms) and _farkas(forms, size):
            return False, None
    return _exact(forms, size)


def _farkas(forms: Sequence[Form], size: int) -> bool:
    """Whether an exact Farkas certificate shows the non-strict system unsatisfiable: multipliers ``u ≥ 0`` of the
    ``≥`` conditions and ``v`` of the equalities with ``Σ u·a + Σ v·a ≤ 0`` in every coordinate and
    ``Σ u·c + Σ v·c < 0``; on a feasible ``x ≥ 0`` the combination would be both ``≥ 0`` and ``< 0``. HiGHS
    proposes them with every coordinate ``≤ −δ`` (``δ`` maximised, at most 1), so that rounding cannot flip a sign; the
    proposal, taken exactly and with any negative ``u`` set to 0, is checked in rationals."""
    import numpy as np
    from scipy.optimize import linprog

    m = len(forms)
    signs = [rel == "=" for _, _, rel in forms]
    # variables (y_1..y_m, δ): Σ y_i a_i + δ·1 ≤ 0 per coordinate, Σ y_i c_i = −1, maximise δ ≤ 1
    upper = np.array([[float(forms[i][0][k]) for i in range(m)] + [1.0] for k in range(size)])
    equal = np.array([[float(c) for _, c, _ in forms] + [0.0]])
    res = linprog([0.0] * m + [-1.0], A_ub=upper, b_ub=np.zeros(size), A_eq=equal, b_eq=[-1.0],
                  bounds=[(None, None) if eq else (0, None) for eq in signs] + [(None, 1)], method="highs")
    if res.status != 0 or res.x[m] <= 0:
        return False
    y = [Fraction(float(v)) if eq or v > 0 else Fraction(0) for v, eq in zip(res.x[:m], signs)]
    combined = [sum(y[i] * forms[i][0][k] for i in range(m) if y[i]) for k in range(size)]
    return all(v <= 0 for v in combined) and sum(y[i] * forms[i][1] for i in range(m) if y[i]) < 0


def _restricted(forms: Sequence[Form], support: list[int]) -> list[Form]:
    """The system with every variable outside ``support`` fixed at 0."""
    return [([coeffs[j] for j in support], const, rel) for coeffs, const, rel in forms]


def _float_support(forms: Sequence[Form], size: int) -> list[int] | None:
    """The variables a float solution of the slack-maximising LP (HiGHS) leaves above :data:`SUPPORT_TOLERANCE`,
    or ``None`` when HiGHS finds no solution with positive slack (the exact simplex then decides alone)."""
    import numpy as np
    from scipy.optimize import linprog  # here: scipy.optimize costs every start 0.3 s, and few runs get here

    upper, upper_b, equal, equal_b = [], [], [], []
    for coeffs, const, rel in forms:  # −a·x (+ t) ≤ c ;  = : −a·x = c, over (x, t)
        row = [-float(c) for c in coeffs]
        if rel == "=":
            equal.append(row + [0.0]), equal_b.append(float(const))
        else:
            upper.append(row + [1.0 if rel == ">" else 0.0]), upper_b.append(float(const))
    strict = any(rel == ">" for _, _, rel in forms)
    res = linprog([0.0] * size + [-1.0 if strict else 0.0], A_ub=np.array(upper) if upper else None,
                  b_ub=upper_b or None, A_eq=np.array(equal) if equal else None, b_eq=equal_b or None,
                  bounds=[(0, None)] * size + [(0, 1)], method="highs")
    if res.status != 0 or (strict and res.x[size] <= 0):
        return None
    return [j for j in range(size) if res.x[j] > SUPPORT_TOLERANCE]


def _exact(forms: Sequence[Form], size: int) -> tuple[bool, list[Fraction] | None]:
    """:func:`satisfiable` by the exact two-phase simplex on the whole system."""
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
