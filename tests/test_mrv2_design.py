"""The fifth Monte Carlo design: vLLM Model Runner V2's chi-square test (vLLM 0.33.0,
``tests/v1/spec_decode/test_rejection_sampler_utils.py``), checked against hand counts, against the chi-square
laws it approximates (central under the target, noncentral under a planted loss), and for what it compares each
position with (the position-0 row) and what it drops (tokens the row excludes). The zoo's recomputation from
stored reference instances gives the committed columns."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from simulator.montecarlo.designs import MRV2_TRIALS, chi_square_pass, mrv2_chi_square_pass, mrv2_position_passes
from simulator.montecarlo.engine import ALPHA

ROOT = Path(__file__).resolve().parents[1]
Q = np.array([0.5, 0.3, 0.2])


def _iid(*rows: np.ndarray) -> np.ndarray:
    """The law of independent positions with these rows, over the sequences in lexicographic order."""
    out = rows[0]
    for row in rows[1:]:
        out = np.multiply.outer(out, row)
    return out.ravel()


def test_one_position_by_hand():
    # counts (110, 90) against (1/2, 1/2) of 200: chi² = 2·10²/100 = 2 below 1 + 10·sqrt(2) = 15.1; (200, 0): 200
    assert mrv2_position_passes(np.array([[110, 90], [200, 0]]), np.array([0.5, 0.5]), 200).tolist() == [True, False]
    # expected (36, 2.4, 1.6) of 40: the last two merged (4 < 5) and dropped; one bin left, df 0: passes whatever
    # the counts, here every token on the two dropped
    assert mrv2_position_passes(np.array([[0, 0, 40]]), np.array([0.9, 0.06, 0.04]), 40).tolist() == [True]


def test_the_target_passes_with_the_probability_derived():
    """Under the target each position's statistic is about chi²(2) (three bins); vLLM's threshold 2 + 10·sqrt(4)
    = 22 is exceeded with probability exp(−11) = 1.7e-5, so three positions pass with probability ≥ 0.99995."""
    assert scipy.stats.chi2.sf(22, 2) == pytest.approx(math.exp(-11), rel=1e-9)
    target = _iid(Q, Q, Q)
    assert mrv2_chi_square_pass(target, target, 3, 3, 1000, np.random.default_rng(1)) >= 0.998


@pytest.mark.parametrize("noncentrality", [12.0, 21.0, 30.0])
def test_a_planted_loss_passes_as_the_noncentral_chi_square_says(noncentrality):
    """Position 0 moved by d from token 1 to token 0: Pearson's statistic is about noncentral chi²(2, λ) with
    λ = n·d²·(1/q0 + 1/q1), and the test passes when it is below 22 (positions 1 and 2 pass with probability
    ≥ 0.99998). A second method: scipy's noncentral chi-square."""
    d = math.sqrt(noncentrality / (MRV2_TRIALS * (1 / Q[0] + 1 / Q[1])))
    law = _iid(Q + d * np.array([1, -1, 0]), Q, Q)
    simulated = mrv2_chi_square_pass(law, _iid(Q, Q, Q), 3, 3, 2000, np.random.default_rng(2))
    expected = scipy.stats.ncx2.cdf(22, 2, noncentrality)
    assert abs(simulated - expected) <= 3 * 0.5 / math.sqrt(2000) + 0.03, (simulated, expected)


def test_every_position_is_compared_with_the_position_0_row():
    """The second token copies the first: its rows depend on the prefix, its marginal is the first row, and the
    test passes it (it sees position 1's marginal only). The second token drawn from another row: the target's
    own law fails."""
    copy = np.diag(Q).ravel()
    assert mrv2_chi_square_pass(copy, copy, 3, 2, 200, np.random.default_rng(3)) == 1.0
    other = _iid(Q, Q[::-1])
    assert mrv2_chi_square_pass(other, other, 3, 2, 200, np.random.default_rng(3)) == 0.0
    assert mrv2_chi_square_pass(Q, Q, 3, 1, 200, np.random.default_rng(3)) == 1.0  # position 0 alone


def test_tokens_the_row_excludes_are_dropped_not_counted():
    """About 41 of the 40,960 tokens on a token the target excludes: merged into a bin expected at 0, which is
    dropped, so the test passes; specproof's chi-square rejects any such sample (10,000 draws hold none with
    probability 0.999^10,000 = e^-10). A target row of one token leaves
    one bin: the test passes a law that never emits that token."""
    q = np.array([0.5, 0.5, 0.0])
    leaky = np.array([0.4995, 0.4995, 0.001])
    assert mrv2_chi_square_pass(leaky, q, 3, 1, 500, np.random.default_rng(4)) == 1.0
    assert chi_square_pass(leaky, q, 3, 1) == pytest.approx(0.999**10_000 * (1 - ALPHA), rel=1e-9)  # e^-10
    assert mrv2_chi_square_pass(np.array([0.0, 1.0]), np.array([1.0, 0.0]), 2, 1, 50,
                                np.random.default_rng(4)) == 1.0


def test_the_zoo_recomputes_a_committed_row_from_its_stored_instance():
    """zoo --designs-only's recomputation: the first mutant's columns from its stored reproducer, with the run's
    generator, equal the committed report's (the first row is the first to draw)."""
    from exact.reproducer import parse_reproducer
    from exact.subject import subject
    from specproof.gate.zoo import MUTANTS, SEED, Row, reference_columns

    committed = json.loads((ROOT / "reports" / "mutation_zoo.json").read_text())["rows"][0]
    mutant = MUTANTS[0]
    row = Row(**{**committed, "simulated": [], "vllm_l2": None, "mrv2": None})
    reference_columns(row, parse_reproducer(committed["reproducer"]), subject(mutant.subject), "fraction",
                      np.random.default_rng(SEED))
    for key in ("tvd", "serving", "chi_square", "simulated", "vllm_l2", "mrv2"):
        assert getattr(row, key) == committed[key], key
