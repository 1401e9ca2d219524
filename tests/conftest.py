"""Shared helpers for the tests. Oracles here are computed independently of the code under test."""

from __future__ import annotations

from fractions import Fraction

import pytest

from simulator.models import TableModel


@pytest.fixture
def block_example() -> TableModel:
    """block_verification.txt §2: context-free, tokens A=0, B=1; M_b = q = (1/3, 2/3), M_s = p = (2/3, 1/3)."""
    return TableModel(2, {None: [Fraction(2, 3), Fraction(1, 3)]}, {None: [Fraction(1, 3), Fraction(2, 3)]})
