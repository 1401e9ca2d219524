"""The lossy rules on a real pair's rounds (specproof/lossy_rounds.py, specproof/reports/lossy_real.py, ``specproof
lossy-real``): on a tiny seeded Llama pair through the same code path as SmolLM2's, each setting's TVD and ``E[τ]``
are the exact certificate's on the same rows, the best lossless rule and a lossless setting get TVD 0 at the same cut
while the lossy ones do not, forced-rate's ``E[τ]`` is its closed form, and the table's means and standard errors are
the hand-computed ones."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from click.testing import CliRunner  # noqa: E402

from exact.certificate import certify  # noqa: E402
from simulator.loops.models import tiny_llama_pair  # noqa: E402
from specproof.cli.app import main  # noqa: E402
from specproof.lossy_rounds import (SETTINGS, SHAPES, Setting, measure_round, question_rounds,  # noqa: E402
                                    round_positions)
from specproof.reports.lossy_real import real_section, summarise, write_lossy_real  # noqa: E402

#: the rule reads tree-pass rows and the TVD is to plain passes' joint: transformers' RMSNorm normalises in float32
#: whatever the dtype, so the two agree to float32 rounding (simulator.real.crosscheck.TOLERANCE's reason)
ROWS_TOLERANCE = 1e-6
PROMPT = [1, 2, 0]


@pytest.fixture(scope="module")
def tiny():
    """The tiny Llama pair (vocabulary 3, seed 0) in float64, top-k 2, and its support pair after ``PROMPT``: the
    rows are cut as SmolLM2's are, and every rule's round is enumerated in about a second."""
    from simulator.real.causal_lm import Processing
    from simulator.real.crosscheck import SupportPair

    target, draft = (m.hf.double() for m in tiny_llama_pair(3, 0))
    processing = Processing(top_k=2)
    pair = SupportPair(draft, target, PROMPT, processing, processing, max(s.depth for s in SHAPES))
    return {"draft": draft, "target": target, "processing": processing, "pair": pair,
            "round": measure_round(pair)}


def test_each_setting_is_the_certificate_of_the_same_rows(tiny):
    pair, measured = tiny["pair"], tiny["round"]
    assert set(measured) == {"chain", "complete"}
    for shape in SHAPES:
        cells = measured[shape.name]["settings"]
        assert set(cells) == {s.label for s in SETTINGS if shape.applies(s)}
        assert len(cells) == (10 if shape.name == "chain" else 5)  # every rule on the chain; the tree rules' own
        best = measured[shape.name]["best_expected_accepted"]
        for setting in SETTINGS:
            if not shape.applies(setting):
                continue
            cert = certify(pair, shape.drafter(), setting.verifier(pair.vocab), "float")  # against the tree rows
            cell = cells[setting.label]
            assert abs(cell["tvd"] - float(cert.tvd)) <= ROWS_TOLERANCE, setting.label
            assert cell["expected_accepted"] == pytest.approx(float(cert.expected_accepted), abs=1e-12)
            assert cell["gain"] == pytest.approx(cell["expected_accepted"] - best, abs=1e-12)


def test_lossless_at_the_same_cut_and_lossy_settings_are_not(tiny):
    measured = tiny["round"]
    chain, complete = measured["chain"], measured["complete"]
    assert chain["best"] == "bv"  # the chain's own rule of the tie (LV and TRV reach the same E[τ])
    assert chain["best_tvd"] <= ROWS_TOLERANCE and complete["best_tvd"] <= ROWS_TOLERANCE
    # SGLang at (1, 1) with distinct siblings is lossless: TVD 0 on the same rows
    lossless = complete["settings"]["sglang-threshold (threshold_single=1, threshold_acc=1)"]
    assert lossless["tvd"] <= ROWS_TOLERANCE
    # the negative controls: the same measurement sees the lossy settings
    for label in ("forced-rate (synthetic_acceptance_rates=0.8)", "sglang-threshold (threshold_single=1, "
                  "threshold_acc=0.5)"):
        assert chain["settings"][label]["tvd"] > 1e-2, label


def test_forced_rate_accepts_at_its_closed_form(tiny):
    """Acceptance forced at rate r per position on a chain of depth 3: E[τ] = r + r² + r³ whatever the rows."""
    cells = tiny["round"]["chain"]["settings"]
    for r in (0.8, 0.95):
        assert cells[f"forced-rate (synthetic_acceptance_rates={r})"]["expected_accepted"] == pytest.approx(
            r + r ** 2 + r ** 3, abs=1e-12)


def test_relaxed_topk_is_capped_at_the_vocabulary(tiny):
    capped = Setting("relaxed", (("relaxed_topk", 10), ("relaxed_delta", 0.01)), ("relaxed_topk",))
    assert capped.label == "relaxed (relaxed_topk=10 capped at V, relaxed_delta=0.01)"
    assert tiny["pair"].vocab < 10
    assert tiny["round"]["chain"]["settings"][capped.label]["tvd"] >= 0  # ran at relaxed_topk = V


def test_rounds_start_where_the_answer_reaches():
    assert round_positions([5, 6, 7, 0, 8], (0, 2, 3, 4, 5, 9), stop=[0]) == [0, 2, 3]
    assert round_positions([5, 6], (0, 2, 3), stop=[0]) == [0, 2]


def test_question_rounds_measure_the_sampled_contexts(tiny):
    """The rounds of one question: the target's own answer (top-k 2, seed 7), a round at each position reached."""
    from simulator.real.crosscheck import SupportPair
    from simulator.real.kv_cache import CachedLM
    from simulator.real.spec_bench import target_generate

    chain_only = (SHAPES[0],)
    settings = (SETTINGS[8],)  # forced-rate 0.8
    rounds = question_rounds(tiny["draft"], tiny["target"], PROMPT, tiny["processing"], (0, 2), 7, (), chain_only,
                             settings)
    assert [r["position"] for r in rounds] == [0, 2]
    answer = target_generate(CachedLM(tiny["target"], tiny["processing"]), PROMPT, 2, 7).tokens
    again = SupportPair(tiny["draft"], tiny["target"], PROMPT + answer, tiny["processing"], tiny["processing"], 3)
    assert rounds[1]["shapes"] == measure_round(again, chain_only, settings)
    label = settings[0].label  # round 0 is the fixture's context: the same numbers
    assert rounds[0]["shapes"]["chain"]["settings"] == {label: tiny["round"]["chain"]["settings"][label]}


def _round(tvd: float, accepted: float, base: float) -> dict:
    return {"shapes": {"chain": {"best": "bv", "tied": [], "best_expected_accepted": base, "best_tvd": 0.0,
                                 "settings": {"fly (defaults)": {"tvd": tvd, "expected_accepted": accepted,
                                                                 "gain": accepted - base}}}}}


def test_means_and_standard_errors_are_over_question_means(tmp_path):
    """Question A has rounds of TVD 0.1 and 0.3 (mean 0.2), question B one of 0.4: the mean is 0.3, and the
    standard error of the two question means is sqrt((0.1² + 0.1²) / 1 / 2) = 0.1."""
    records = [{"question_id": "A", "rounds": [_round(0.1, 1.5, 1.0), _round(0.3, 1.2, 1.0)]},
               {"question_id": "B", "rounds": [_round(0.4, 2.0, 1.2)]}]
    rows = summarise(records, (SHAPES[0],), (Setting("fly"),))
    best, fly = rows
    assert best["rule"] == "bv" and best["best_rounds"] == {"bv": 3} and best["setting"] is None and best["gain"] == 0
    assert (fly["rounds"], fly["questions"], fly["refused"]) == (3, 2, 0)
    assert fly["tvd"] == pytest.approx(0.3) and fly["tvd_se"] == pytest.approx(0.1)
    assert fly["tvd_max"] == pytest.approx(0.4)
    # gains 0.5 and 0.2 (mean 0.35) for A, 0.8 for B: mean 0.575, SE |0.8 − 0.35| / 2
    assert fly["gain"] == pytest.approx(0.575) and fly["gain_se"] == pytest.approx(0.225)
    meta = {"date": "d", "machine": "m", "load_average": [1.0, 1.0], "question_seconds": 6.0, "load_seconds": 0.5, "question_loads": [0.5, 2.0],
            "target": "smollm2", "draft": "self:skip=1", "questions": 2, "top_k": 3, "positions": [0, 16],
            "shapes": [{"name": "chain", "tree": SHAPES[0].describe()}]}
    text = real_section(rows, meta, "specproof lossy-real")
    assert "top-3 rows" in text and "Best lossless rule `bv`: E[τ] 1.100 ± 0.100" in text and "| `fly (defaults)` | 0.300 ± 0.100 | 0.400 |" in text
    assert "+0.575 ± 0.225 | 3 (2) |" in text and "(2 s a round)" in text and "load average 0.5 to 2.0" in text
    out = tmp_path / "real.md"
    write_lossy_real(out, records, meta, "specproof lossy-real", (SHAPES[0],), (Setting("fly"),))
    data = json.loads(out.with_suffix(".json").read_text())  # the section again from the JSON alone
    assert real_section(data["rows"], data, data["command"]) == out.read_text() == text


def test_bad_positions_are_refused_before_any_model_loads():
    result = CliRunner().invoke(main, ["lossy-real", "--positions", "0,x"])
    assert result.exit_code == 2 and "positions" in result.output


@pytest.mark.slow
def test_smollm2_one_round_per_question(tmp_path):
    """Two questions, one round each, on SmolLM2 (30 s on 2 cores); a second run reads the store."""
    from simulator.real.fetch import cached

    if cached("smollm2") is None or cached("mt-bench") is None:
        pytest.skip("needs SmolLM2 and MT-bench: specproof fetch smollm2; specproof fetch mt-bench")
    out, store = tmp_path / "real.md", tmp_path / "store"
    args = ["lossy-real", "--max-questions", "2", "--positions", "0", "--out", str(out), "--store", str(store)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.with_suffix(".json").read_text())
    chain = [r for r in data["rows"] if r["shape"] == "chain"]
    assert chain[0]["rule"] == "bv" and chain[0]["tvd_max"] <= 1e-6 and len(chain) == 11
    assert all(r["rounds"] == 2 and r["questions"] == 2 for r in chain)
    assert all(0 <= r["tvd"] <= 1 and not math.isnan(r["gain"]) for r in chain[1:])
    assert CliRunner().invoke(main, args).exit_code == 0  # from the store: no model loads, the same numbers
    again = json.loads(out.with_suffix(".json").read_text())
    assert again["rows"] == data["rows"] and again["load_seconds"] == 0
