"""The exact LP that prunes the prover's branches (exact/prove/rational_lp.py): hand-derived systems, including the
degenerate ones a float solver cannot decide, and random systems against scipy's HiGHS where its answer has a
clear margin; every point returned satisfies every condition exactly."""

from __future__ import annotations

import random
from fractions import Fraction as F

import numpy as np
import pytest
from scipy.optimize import linprog

from exact.prove.rational_lp import satisfiable


def _holds(forms, point) -> bool:
    for coeffs, const, rel in forms:
        value = sum(c * x for c, x in zip(coeffs, point)) + const
        if (rel == ">" and not value > 0) or (rel == ">=" and not value >= 0) or (rel == "=" and value != 0):
            return False
    return all(x >= 0 for x in point)


def test_hand_derived_systems():
    simplex = ([F(-1), F(-1)], F(1), ">=")  # x + y ≤ 1
    both_ways = [simplex, ([F(1), F(-1)], F(0), ">"), ([F(-1), F(1)], F(0), ">")]  # x > y and y > x: empty, slack 0
    assert satisfiable(both_ways, 2) == (False, None)
    ok, point = satisfiable([simplex, ([F(1), F(-1)], F(0), ">")], 2)  # x > y on the simplex
    assert ok and point[0] > point[1]
    assert not satisfiable([simplex, ([F(1), F(1)], F(-2), ">=")], 2)[0]  # x + y ≥ 2 on the simplex
    on_line = [simplex, ([F(1), F(-1)], F(0), "="), ([F(1), F(0)], F(-1, 3), ">")]  # x = y, x > 1/3: x = y ≤ 1/2
    ok, point = satisfiable(on_line, 2)
    assert ok and point[0] == point[1] and F(1, 3) < point[0] <= F(1, 2)
    assert not satisfiable([simplex, ([F(1), F(-1)], F(0), "="), ([F(1), F(0)], F(-1, 2), ">")], 2)[0]  # x > 1/2


def test_random_systems_agree_with_highs_and_points_are_exact():
    rng = random.Random(3)
    checked = 0
    for _ in range(150):
        n = rng.randint(2, 4)
        forms = [([F(-1)] * n, F(1), ">=")]
        for _ in range(rng.randint(1, 5)):
            forms.append(([F(rng.randint(-3, 3)) for _ in range(n)], F(rng.randint(-2, 2), rng.randint(1, 3)),
                          rng.choice([">", ">=", "="])))
        ok, point = satisfiable(forms, n)
        if ok:
            assert _holds(forms, point)
        # HiGHS: maximise the slack t of the strict conditions (t ≤ 1), decided only with a clear margin
        a_ub, b_ub, a_eq, b_eq = [], [], [], []
        for coeffs, const, rel in forms:
            row = [-float(c) for c in coeffs]
            if rel == "=":
                a_eq.append(row + [0.0]), b_eq.append(float(const))
            else:
                a_ub.append(row + [1.0 if rel == ">" else 0.0]), b_ub.append(float(const))
        res = linprog([0.0] * n + [-1.0], A_ub=a_ub, b_ub=b_ub, A_eq=a_eq or None, b_eq=b_eq or None,
                      bounds=[(0, None)] * n + [(0, 1)])
        if res.status == 2:
            assert not ok
            checked += 1
        elif res.status == 0 and abs(res.fun) > 1e-6:
            assert ok
            checked += 1
        elif res.status == 0 and any(rel == ">" for _, _, rel in forms) and abs(res.fun) < 1e-9:
            assert not ok  # best slack 0: no point with every strict condition strict
            checked += 1
    assert checked > 100


def _large_system(rng: random.Random, n: int, feasible: bool) -> list:
    """``n`` unknowns with ``Σ x = 1`` and 12 random equalities ``a·x = 0`` that a planted point of small support
    satisfies; the infeasible variant also asks ``Σ x ≤ 1/2``."""
    support = rng.sample(range(n), 5)
    planted = [F(0)] * n
    for j in support:
        planted[j] = F(rng.randint(1, 4))
    total = sum(planted)
    planted = [v / total for v in planted]
    forms = [([F(1)] * n, F(-1), "=")]
    for _ in range(12):
        coeffs = [F(rng.randint(-3, 3)) for _ in range(n)]
        coeffs[support[0]] -= sum(c * v for c, v in zip(coeffs, planted)) / planted[support[0]]
        forms.append((coeffs, F(0), "="))
    if not feasible:
        forms.append(([F(-1)] * n, F(1, 2), ">="))
    return forms


def test_large_systems_are_decided_by_exact_checks_of_float_proposals(monkeypatch):
    import exact.prove.rational_lp as lp
    rng = random.Random(5)
    whole = []
    real_exact = lp._exact
    monkeypatch.setattr(lp, "_exact", lambda forms, size: whole.append(size) or real_exact(forms, size))
    for feasible in (True, False) * 2:
        forms = _large_system(rng, 80, feasible)
        ok, point = satisfiable(forms, 80)
        assert ok is feasible
        if ok:
            assert _holds(forms, point)  # exactly, with Fractions
            assert sum(1 for x in point if x) < 80  # found on the float solution's support
    assert 80 not in whole  # neither answer needed the exact simplex on the whole system


@pytest.mark.slow
def test_a_wrong_float_proposal_never_decides(monkeypatch):
    import scipy.optimize

    import exact.prove.rational_lp as lp
    rng = random.Random(6)
    feasible, infeasible = _large_system(rng, 80, True), _large_system(rng, 80, False)
    # HiGHS "finds no point" of a satisfiable system: no Farkas certificate exists, the exact simplex decides
    monkeypatch.setattr(lp, "_float_support", lambda forms, size: None)
    ok, point = satisfiable(feasible, 80)
    assert ok and _holds(feasible, point)
    # a bogus certificate (every multiplier 1) fails the exact check: still satisfiable
    bogus = type("Result", (), {"status": 0, "x": np.ones(len(feasible) + 1)})
    monkeypatch.setattr(scipy.optimize, "linprog", lambda *args, **kwargs: bogus)
    assert satisfiable(feasible, 80)[0]
    # a wrong support for an unsatisfiable system: unsatisfiable all the same
    monkeypatch.setattr(lp, "_float_support", lambda forms, size: list(range(10)))
    assert satisfiable(infeasible, 80) == (False, None)
