"""The mutation zoo and the Monte Carlo test designs' pass probabilities (issue 16).

The pass probabilities are checked against hand computations (a binomial sum, the central chi-square's 1 − α,
the off-support factor) and against replications drawn from the exact law (a second method); the committed
zoo report is checked against the code (every mutant present) and each mutant's reference instance is certified
again here, independently of the report's verdicts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from exact.reproducer import parse_reproducer
from exact.subject import subject
from simulator.montecarlo.designs import chi_square_pass, serving_pass, simulated_pass, tvd_baseline_pass, vllm_l2_pass
from simulator.montecarlo.engine import ALPHA

ROOT = Path(__file__).resolve().parents[1]


def test_serving_pass_is_the_exact_binomial_sum_in_a_one_position_case():
    law = target = np.array([0.5, 0.5])
    # by hand: n = 100, tolerance 0.1 on both tokens' frequencies: 40 <= K <= 60 for K ~ Binomial(100, 1/2)
    exact = sum(math.comb(100, k) for k in range(40, 61)) / 2**100
    interval = serving_pass(law, target, 2, 1, n=100, tolerance=0.1)
    assert interval.high == pytest.approx(exact, abs=1e-12)
    assert interval.low == pytest.approx(1 - 2 * (1 - exact), abs=1e-12)  # Bonferroni over the two cells


def test_chi_square_pass_of_the_target_itself_is_one_minus_alpha_and_off_support_mass_costs_its_power():
    target = np.full(27, 1 / 27)
    assert chi_square_pass(target, target, 3, 3) == pytest.approx(1 - ALPHA, abs=1e-12)
    q = np.array([0.5, 0.5, 0.0, 0.0])
    leaky = np.array([0.5 - 5e-6, 0.5 - 5e-6, 1e-5, 0.0])
    assert chi_square_pass(leaky, q, 2, 2) == pytest.approx((1 - 1e-5) ** 10_000 * (1 - ALPHA), rel=1e-6)
    assert chi_square_pass(np.array([0.0, 0.0, 0.5, 0.5]), q, 2, 2) == 0.0  # all mass off support: never passes


@pytest.mark.parametrize("shift", [0.0, 0.002, 0.01])
def test_analytic_pass_probabilities_agree_with_draws_from_the_exact_law(shift):
    rng = np.random.default_rng(7)
    target = rng.dirichlet(np.ones(9))
    law = target + shift * (np.eye(9)[0] - np.eye(9)[1])
    sim = simulated_pass(law, target, 3, 2, 2000, rng)
    noise = 3 * 0.5 / math.sqrt(2000)
    serving = serving_pass(law, target, 3, 2)
    assert serving.low - noise <= sim[0] <= serving.high + noise
    assert abs(tvd_baseline_pass(law, target) - sim[1]) <= noise + 0.03  # the normal approximation's stated error
    assert abs(chi_square_pass(law, target, 3, 2) - sim[2]) <= noise + 0.03


@pytest.mark.slow
def test_every_mutant_of_the_zoo_is_in_the_report_and_lossy_on_its_reference_instance():
    from specproof.gate.zoo import MUTANTS

    assert len(MUTANTS) >= 20 and len({m.name for m in MUTANTS}) == len(MUTANTS)
    assert all(m.bug and m.seen for m in MUTANTS)
    report = json.loads((ROOT / "reports" / "mutation_zoo.json").read_text())
    rows = {r["name"]: r for r in report["rows"]}
    assert list(rows) == [m.name for m in MUTANTS]
    for mutant in MUTANTS:
        row = rows[mutant.name]
        assert row["flagged"], mutant.name
        case = parse_reproducer(row["reproducer"])
        cert = case.certify(subject(mutant.subject))
        assert not cert.lossless, mutant.name
        assert float(cert.tvd) == pytest.approx(row["tvd"], rel=1e-9, abs=1e-15)
        if "kernel" in mutant.subject:  # ordinary torch code: no rng interface anywhere in the mutant
            module, _, name = mutant.subject["kernel"].partition(":")
            source = (ROOT / Path(*module.split("."))).with_suffix(".py").read_text()
            assert "rng." not in source


def test_the_documented_zoo_table_is_the_committed_zoo_report():
    from specproof.gate.zoo import headline

    report = json.loads((ROOT / "reports" / "mutation_zoo.json").read_text())
    assert headline(report["rows"]) in (ROOT / "docs" / "gate.md").read_text()
    assert "reports/mutation_zoo.md" in (ROOT / "README.md").read_text()


def test_vllms_distribution_test_passes_the_target_and_fails_a_large_loss():
    # vLLM's ratio: for the exact law d_10 / d_100000 is about sqrt(10^4) = 100 (a root-n decay) against the
    # ratio about d_10 / b < 20, and fails
    rng = np.random.default_rng(3)
    q = np.array([0.5, 0.3, 0.2])
    target = np.einsum("i,j,k->ijk", q, q, q).ravel()
    biased = np.einsum("i,j,k->ijk", 0.6 * q + 0.4 * np.eye(3)[2], q, q).ravel()
    assert vllm_l2_pass(target, target, 3, 3, 200, rng) > 0.85
    assert vllm_l2_pass(biased, target, 3, 3, 200, rng) == 0.0
