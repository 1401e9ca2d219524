"""The two implementations of exact rationals (``gmpy2.mpq`` and ``fractions.Fraction``) give the same outputs.

``SPECPROOF_RATIONALS`` picks the one :func:`simulator.numeric.rational` makes; every certificate below is
computed under each and compared field by field in its JSON form, exact fractions included. The comparison is
shown able to fail on a certificate that differs (another model seed)."""

from __future__ import annotations

from fractions import Fraction

import pytest

import simulator.numeric as numeric
from exact import certify
from exact.instances import random_instances
from simulator.errors import ExactnessError, InvalidParameterError
from simulator.models import ModelView, SyntheticModel
from simulator.drafting import FixedShape
from simulator.numeric import rational, rational_backend
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS

gmpy2 = pytest.importorskip("gmpy2")

#: every rule the exact engine runs in rationals, negative controls included
RULES = [name for name, spec in VERIFIERS.items() if not spec.float_only]


def certificates(monkeypatch, backend: str, name: str) -> list[dict]:
    monkeypatch.setenv("SPECPROOF_RATIONALS", backend)
    out = []
    for inst in random_instances(VERIFIERS[name], 6, seed=7):
        out.append(certify(inst.model, inst.drafter, name).to_json())
    return out


@pytest.mark.parametrize("name", RULES)
def test_mpq_and_fraction_certificates_are_identical(monkeypatch, name):
    with_fraction = certificates(monkeypatch, "fraction", name)
    with_mpq = certificates(monkeypatch, "gmpy2", name)
    assert with_mpq == with_fraction
    assert any("/" in c["expected_accepted"] for c in with_mpq)  # exact fractions were compared, not just floats


def test_the_comparison_rejects_a_different_certificate(monkeypatch):
    monkeypatch.setenv("SPECPROOF_RATIONALS", "gmpy2")
    drafter = FixedShape(make_topology("complete", 2, 2))
    one, other = (certify(SyntheticModel(3, seed=s), drafter, "tv-rrs").to_json() for s in (0, 1))
    assert one != other and one["expected_accepted"] != other["expected_accepted"]


def test_the_backend_decides_the_type_of_the_rows_and_the_law(monkeypatch):
    model, drafter = SyntheticModel(3, seed=0), FixedShape(make_topology("chain", 2))
    for backend, kind in (("fraction", Fraction), ("gmpy2", type(gmpy2.mpq()))):
        monkeypatch.setenv("SPECPROOF_RATIONALS", backend)
        assert rational_backend() == backend
        assert all(type(x) is kind for x in ModelView(model).q(()))
        cert = certify(model, drafter, "tv-sps")
        assert type(cert.expected_accepted) is kind and cert.tvd == 0


def test_a_float_mixed_into_exact_rows_is_refused_under_both(monkeypatch):
    # under gmpy2 a rational times a float is an mpfr, not a float: it must be refused all the same
    def halves(tree, p, q, rng):
        return 0, int(rng.bernoulli(q[0][0] * 0.5))

    drafter = FixedShape(make_topology("chain", 1))
    for backend in ("fraction", "gmpy2"):
        monkeypatch.setenv("SPECPROOF_RATIONALS", backend)
        with pytest.raises(ExactnessError) as err:
            certify(SyntheticModel(2, seed=0), drafter, halves)
        assert err.value.field == "arithmetic"
    # the control: with an exact half the law is computed, and it is the hand-derived one: the first token is 1
    # with probability q0/2 against the target's 1 − q0, so TVD = |1 − 3·q0/2|, exactly
    for backend in ("fraction", "gmpy2"):
        monkeypatch.setenv("SPECPROOF_RATIONALS", backend)
        q0 = ModelView(SyntheticModel(2, seed=0)).q(())[0]
        cert = certify(SyntheticModel(2, seed=0), drafter,
                       lambda tree, p, q, rng: (0, int(rng.bernoulli(q[0][0] * rational(1, 2)))))
        assert cert.tvd == abs(1 - 3 * q0 / 2) and not cert.lossless


@pytest.mark.parametrize("value", ["mpq", "Fraction ", "float"])
def test_an_unknown_backend_is_a_typed_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("SPECPROOF_RATIONALS", value)
    with pytest.raises(InvalidParameterError) as err:
        rational(1, 3)
    assert err.value.field == "SPECPROOF_RATIONALS" and "gmpy2" in str(err.value)


def test_asking_for_gmpy2_without_it_is_an_error_and_fraction_still_works(monkeypatch):
    monkeypatch.setattr(numeric, "_mpq", None)
    numeric._backend.cache_clear()
    try:
        monkeypatch.setenv("SPECPROOF_RATIONALS", "gmpy2")
        with pytest.raises(InvalidParameterError) as err:
            rational(1, 3)
        assert err.value.field == "SPECPROOF_RATIONALS" and "not installed" in str(err.value)
        monkeypatch.delenv("SPECPROOF_RATIONALS")
        assert rational_backend() == "fraction" and type(rational(1, 3)) is Fraction  # the default falls back
    finally:
        numeric._backend.cache_clear()  # the cached answers above are for a gmpy2 that is not there


def test_a_fraction_made_from_an_mpq_becomes_an_mpq(monkeypatch):
    """``Fraction(mpq)`` keeps gmpy2's mpz parts, and gmpy2's own ``mpq`` refuses such a Fraction with a
    SystemError (the gate's shrinker makes them); the one constructor takes it, as 7/3 exactly."""
    monkeypatch.setenv("SPECPROOF_RATIONALS", "gmpy2")
    mixed = Fraction(gmpy2.mpq(1, 3)) * 7
    assert type(mixed.numerator) is not int
    with pytest.raises(SystemError):  # the hazard itself: without the conversion, exit 3 in the gate
        gmpy2.mpq(mixed)
    value = rational(mixed)
    assert value == gmpy2.mpq(7, 3) and type(value) is type(gmpy2.mpq())
    assert rational(mixed, 2) == gmpy2.mpq(7, 6)
