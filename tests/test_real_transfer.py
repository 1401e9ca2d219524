"""The real-transfer report's maths, without a real model: the fit recovers the parameters of a synthetic "real"
sample (closed loop) and shows where they are not identified; the comparison's rank correlations and largest
errors on a hand-made table; predictions where every verifier must accept every draft token; the pair file's
errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from simulator.errors import InvalidParameterError
from simulator.models import SyntheticModel
from specproof.reports.real_transfer import (Compared, Fit, Plan, compare, fit_synthetic, predict, read_pair,
                                             spearman, synthetic_normals, synthetic_rows, wasserstein)


@pytest.fixture(scope="module")
def reference():
    """A small reference sample for the fit (5 model seeds, 1,205 contexts): fast, and still precise enough."""
    return synthetic_normals(range(5))


@pytest.fixture(scope="module")
def observed():
    """The "real" sample's contexts: other model seeds than the reference's."""
    return synthetic_normals(range(100, 105))


def test_normals_read_through_the_model_give_its_rows():
    normals = synthetic_normals([3], depth=1)
    rows = synthetic_rows(normals, 0.4, 0.7, 1.3)
    model = SyntheticModel(15, 0.4, 0.7, 1.3, seed=3)
    contexts = [()] + [(x,) for x in range(15)]
    expected = [sum(min(a, b) for a, b in zip(model.p(c), model.q(c))) for c in contexts]
    assert np.allclose(rows.overlap, expected, rtol=0, atol=1e-12)


def test_wasserstein_is_the_mean_gap_of_the_cdfs():
    # F_a − F_b is 1/2 on [0, 1) and on [2, 3), 0 elsewhere: W1 = 1/2 + 1/2
    assert wasserstein(np.array([0.0, 2.0]), np.array([1.0, 3.0])) == pytest.approx(1.0)
    assert wasserstein(np.array([0.2, 0.4]), np.array([0.4, 0.2])) == 0


def test_the_fit_recovers_rho_and_a_shared_temperature(reference, observed):
    """Closed loop: a sample drawn from ρ = 0.6, τ_p = τ_q = 0.3 (near the real pair's fit) on other seeds than
    the reference's is fitted back to within 0.03 in ρ and 10% in τ, and its distance lies within the noise floor."""
    sample = synthetic_rows(observed, 0.6, 0.3, 0.3).overlap
    fit = fit_synthetic(sample, "shared", reference)
    assert abs(fit.rho - 0.6) <= 0.03
    assert fit.tau_p == fit.tau_q and abs(math.log(fit.tau_p / 0.3)) <= math.log(1.1)
    assert fit.distance <= fit.noise
    assert fit.rho_range[0] <= fit.rho <= fit.rho_range[1] and fit.rho_range[1] - fit.rho_range[0] <= 0.1


def test_with_tau_q_fixed_the_fit_matches_the_law_but_not_rho(reference, observed):
    """With τ_q = 1 the law of Σ min(p, q) lies along a ridge in (ρ, τ_p): the fit matches the law (within the
    noise floor) while grid points a good 0.2 apart in ρ fit as well — so the report ties the temperatures."""
    sample = synthetic_rows(observed, 0.7, 0.25, 1.0).overlap
    fit = fit_synthetic(sample, "tau-q-1", reference)
    assert fit.tau_q == 1.0 and fit.distance <= fit.noise
    assert fit.rho_range[1] - fit.rho_range[0] >= 0.2


def _row(verifier: str, shape: str, predicted: float, real: float) -> Compared:
    return Compared(verifier, "iid", shape, "draft", real, 0.3, predicted, 0.4, "exact")


def test_comparison_on_a_hand_made_table():
    rows = [_row("a", "chain", 0.8, 0.5), _row("b", "chain", 1.2, 1.0), _row("c", "chain", 1.1, 1.2),
            _row("d", "complete", 2.0, 1.5), _row("e", "complete", 1.5, 1.6), _row("f", "complete", 1.8, 1.9)]
    stats = compare(rows)
    # chain: predicted ranks a1 c2 b3, real a1 b2 c3: Σd² = 2, ρ = 1 − 6·2/(3·8) = 1/2
    # complete: predicted e1 f2 d3, real d1 e2 f3: Σd² = 4 + 1 + 1 = 6, ρ = 1 − 36/24 = −1/2
    assert stats["spearman"] == {"chain": pytest.approx(0.5), "complete": pytest.approx(-0.5)}
    # all six: predicted a1 c2 b3 e4 f5 d6, real a1 b2 c3 d4 e5 f6: Σd² = 0+1+1+4+1+1 = 8, ρ = 1 − 48/210 = 27/35
    assert stats["spearman_overall"] == pytest.approx(27 / 35)
    # errors +0.3 +0.2 −0.1 +0.5 −0.1 −0.1; relative +0.6 (a) is the largest, +1/3 (d) the next
    assert stats["largest_error"] == {"row": "d complete", "error": pytest.approx(0.5)}
    assert stats["largest_relative_error"] == {"row": "a chain", "relative_error": pytest.approx(0.6)}
    assert stats["mean_absolute_error"] == pytest.approx(1.3 / 6)
    assert rows[0].sigmas == pytest.approx(0.3 / 0.5)  # √(0.3² + 0.4²) = 0.5


def test_rank_correlation_is_undefined_for_a_constant_column_or_two_rows():
    assert spearman([1.0, 1.0, 1.0], [0.1, 0.2, 0.3]) is None
    assert spearman([1.0, 2.0], [1.0, 2.0]) is None
    assert spearman([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]) == pytest.approx(-1.0)


def test_identical_draft_and_target_accept_every_token_exactly_and_by_monte_carlo():
    """ρ = 1, τ_p = τ_q: p = q, so every rule accepts the whole chain of depth 3 on every seed."""
    fit = Fit("shared", 1.0, 0.5, 0.5, 0.0, 0.0)
    plans = [Plan("tv-sps", "iid", "chain", 3, 1), Plan("bv", "iid", "chain", 3, 1)]
    predictions = predict(fit, plans, seeds=2, trials=20)
    assert [predictions[p].method for p in plans] == ["exact", "Monte Carlo"]
    for p in plans:
        assert predictions[p].mean == pytest.approx(3.0) and predictions[p].se == pytest.approx(0.0)


def _pair_file(tmp_path, rows, name: str = "real_pair") -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"command": "specproof real-report", "questions": [81], "rows": rows}))
    return str(path)


GOOD_ROW = {"verifier": "tv-rrs", "drafting": "iid", "shape": "chain", "depth": 3, "branching": 1,
            "draft": "self:skip=12,14,16,18", "questions": 10, "tokens": 600, "block_efficiency": 1.8,
            "block_efficiency_se": 0.05, "tokens_per_s": 9.0, "speedup": 0.8, "draft_passes_per_step": 3.0}


def test_the_pair_file_is_read_and_its_faults_name_pair(tmp_path):
    _, rows = read_pair(_pair_file(tmp_path, [GOOD_ROW]))
    assert rows[0].accepted == pytest.approx(0.8)
    faults = {"missing": str(tmp_path / "absent.json"),
              "no rows": _pair_file(tmp_path, [], "empty"),
              "no field": _pair_file(tmp_path, [{k: v for k, v in GOOD_ROW.items() if k != "shape"}], "field"),
              "bad shape": _pair_file(tmp_path, [{**GOOD_ROW, "shape": "star"}], "shape"),
              "bad verifier": _pair_file(tmp_path, [{**GOOD_ROW, "verifier": "nope"}], "verifier"),
              "not a number": _pair_file(tmp_path, [{**GOOD_ROW, "block_efficiency": "1.8"}], "number")}
    for what, path in faults.items():
        with pytest.raises(InvalidParameterError) as err:
            read_pair(path)
        assert err.value.field == "pair", what


@pytest.mark.slow  # the command line's first start in a process: about 2 to 4 s
def test_the_command_refuses_a_missing_pair_file_before_loading_a_model(tmp_path):
    pytest.importorskip("transformers")
    from click.testing import CliRunner

    from specproof.cli import app as cli

    result = CliRunner().invoke(cli.main, ["real-transfer", "--pair", str(tmp_path / "absent.json"),
                                             "--out", str(tmp_path)])
    assert result.exit_code == 2 and "pair:" in result.output


@pytest.mark.slow
def test_the_report_is_written_from_measured_samples(tmp_path, reference, observed):
    """Stages (b)–(d) and the files, on "real" samples drawn from synthetic pairs: a main draft with two rows and a
    contrast draft with one, which gets its own fit and stays out of the ranks."""
    from specproof.reports.real_pair import RealRow
    from specproof.reports.real_transfer import run_transfer, write_transfer_report

    def row(verifier, shape, depth, branching, draft, accepted):
        return RealRow(verifier, "iid", shape, depth, branching, draft, 10, 600, 1 + accepted, 0.05, 9.0, 0.8, 3.0)

    rows = [row("tv-sps", "chain", 3, 1, "main", 0.8), row("tv-rrs", "complete", 3, 2, "main", 1.1),
            row("tv-sps", "chain", 3, 1, "close", 1.2)]
    samples = {"main": synthetic_rows(observed, 0.6, 0.3, 0.3), "close": synthetic_rows(observed, 0.75, 0.3, 0.3)}
    transfer = run_transfer(rows, samples, [81], seeds=2, normals=reference)
    assert transfer.main_draft == "main" and set(transfer.fits) == {"main", "close"}
    assert transfer.fits["close"].rho > transfer.fits["main"].rho
    assert [c.draft for c in transfer.compared] == ["main", "main", "close"]
    write_transfer_report(tmp_path, transfer, "real_pair.json", {"command": "x", "questions": [81]}, "cmd")
    data = json.loads((tmp_path / "real_transfer.json").read_text())
    assert data["fits"]["main"]["mode"] == "shared" and len(data["rows"]) == 3
    assert len(data["real_overlap_values"]["main"]) == len(samples["main"].overlap)
    assert (tmp_path / "real_transfer.png").stat().st_size > 0
    assert "Spearman" in (tmp_path / "real_transfer.md").read_text()


def test_the_report_renders_a_fixed_record():
    """The rendering on a hand-made :class:`Transfer` (no fit, no model): header, fit table, rows, the contrast
    draft's line, and the JSON's header fields."""
    from specproof.reports.real_transfer import (OverlapSample, Transfer, TransferRun, transfer_json,
                                                 transfer_markdown)

    def sample(values):
        values = np.array(values)
        return OverlapSample(values, values + 0.1, values + 0.2)

    fit = Fit("shared", 0.5, 0.4, 0.4, 0.01, 0.02, (0.4, 0.6), (0.3, 0.5))
    other = Fit("shared", 0.7, 0.3, 0.3, 0.03, 0.02)
    rows = [Compared("tv-sps", "iid", "chain", "main", 0.8, 0.05, 0.9, 0.02, "exact"),
            Compared("tv-sps", "iid", "chain", "close", 1.0, 0.05, 1.1, 0.02, "exact")]
    transfer = Transfer("main", [81, 82], {"main": fit, "close": other}, {"shared": fit},
                        {"statistic": 0.1, "p_value": 0.5}, {"main": sample([0.2, 0.4, 0.6]), "close": sample([0.5])},
                        {"main": sample([0.3, 0.5]), "close": sample([0.5])}, rows, compare(rows[:1]), 2, 400,
                        {"measure": 12.0, "fit": 3.0, "predict": 4.0})
    run = TransferRun("cmd", "2026-01-02", "a machine", "real_pair.json", "x", [81, 82])
    text = transfer_markdown(transfer, run)
    assert text.startswith("# Does the toy study transfer to a real pair?\n\nGenerated by `cmd` on 2026-01-02 "
                           "(a machine), from `real_pair.json` (made by `x`).")
    assert "| real | 3 | 0.400 | 0.300 | 0.400 | 0.500 | 0.500 | 0.600 |" in text
    assert "| shared | 0.500 | 0.400 | 0.400 | 0.0100 | 0.0200 | 0.40–0.60 | 0.30–0.50 |" in text
    assert "| `tv-sps` | iid | chain | `main` | 0.800 ± 0.050 | 0.900 ± 0.020 | exact | +0.100 | +12.5% | +1.9 |" in text
    assert "Contrast `close`: its own fit ρ = 0.700" in text
    assert "Stage times: measure 12 s, fit 3 s, predict 4 s." in text
    data = transfer_json(transfer, run)
    assert (data["command"], data["date"], data["pair_questions"]) == ("cmd", "2026-01-02", [81, 82])
    assert data["real_overlap_values"]["main"] == [0.2, 0.4, 0.6]
