"""The bug twins of whole generation loops (issue 65, ``specproof/gate/loop_specimens.py``): the correct twin
LOSSLESS on every class's instance, each bug twin LOSSY there with the TVD the zoo reports, three of the losses
derived by hand on a context-free table, the twins reachable by ``certify --loop module:function`` and counted as
user code, and the zoo's loop section."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from exact.generation_law import certify_loop, loop_law  # noqa: E402
from simulator.loops.builtin import plain_sampling  # noqa: E402
from simulator.loops.models import prefix_table_pair, tiny_llama_pair  # noqa: E402
from simulator.models import RandomRationalModel, TableModel  # noqa: E402
from specproof.gate import loop_specimens as twins  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: a context-free pair: the draft p = (1/2, 1/2), the target q = (3/4, 1/4), after the prompt [0]
HALF, TARGET = [Fraction(1, 2), Fraction(1, 2)], [Fraction(3, 4), Fraction(1, 4)]


def certify(loop, pair, tokens, sampling):
    target, draft = pair
    return certify_loop(loop, plain_sampling, target, draft, twins.PROMPT, tokens, sampling)


@pytest.fixture(scope="module")
def hand_table():
    return prefix_table_pair(TableModel(2, {None: HALF}, {None: TARGET}), len(twins.PROMPT))


@pytest.fixture(scope="module")
def zoo_rows():
    report = json.loads((ROOT / "reports" / "mutation_zoo.json").read_text())
    return {r["name"]: r for r in report["loops"]["rows"]}


@pytest.mark.parametrize("twin", twins.TWINS, ids=lambda t: t.name)
def test_each_bug_twin_is_lossy_where_its_correct_twin_is_lossless(twin, zoo_rows):
    """On the class's instance, under the parameters that expose it: the correct twin's TVD is float64 rounding,
    the bug twin's the zoo's number; only the placeholder class puts mass off the reference's support."""
    good = certify(twins.speculative_loop, twin.pair(), twins.NEW_TOKENS, twin.sampling)
    assert good.lossless and good.tvd < 1e-12 and good.off_support == 0 and good.tolerance == 1e-10, good
    bad = certify(twin.loop, twin.pair(), twins.NEW_TOKENS, twin.sampling)
    assert not bad.lossless and bad.tvd > 0.05, bad
    assert (bad.off_support > 0) == (twin.name == "loop-placeholder")
    assert float(bad.tvd) == pytest.approx(zoo_rows[twin.name]["tvd"], rel=1e-9)
    assert float(bad.off_support) == pytest.approx(zoo_rows[twin.name]["off_support"], rel=1e-9)


def test_the_correct_twin_is_lossless_with_every_parameter_on():
    sampling = {"repetition_penalty": 1.5, "temperature": 0.7, "top_k": 2, "top_p": 0.9, "min_p": 0.2}
    pair = prefix_table_pair(RandomRationalModel(3, 1, zero_prob=0.0), len(twins.PROMPT))
    cert = certify(twins.speculative_loop, pair, twins.NEW_TOKENS, sampling)
    assert cert.lossless and cert.tvd < 1e-12, cert


def test_placeholder_by_hand(hand_table):
    """N = 2: round 1 drafts one token (the round's last token is the target's), slot 1 is padding. x = 0 (1/2)
    is accepted surely, x = 1 (1/2) with (1/4)/(1/2) = 1/2; after an acceptance (3/4) the bug tests the padded
    slot: q[-1]/p[-1] = (1/4)/(1/2), so -1 with 1/2, else the residual (q − p)+ = (1/4, 0): token 0. A rejection
    (1/4) emits 0, and round 2 is all padding: -1 with 1/2, else 0. Law: (0,-1) 3/8, (0,0) 3/8, (1,-1) 1/8,
    (1,0) 1/8 against q ⊗ q = 9/16, 3/16, 3/16, 1/16: TVD (6 + 3 + 3 + 2 + 1 + 1)/32 = 1/2, off support 1/2."""
    target, draft = hand_table
    law = loop_law(twins.placeholder_accepted, target, draft, twins.PROMPT, 2, {}).law
    expected = {(0, -1): Fraction(3, 8), (0, 0): Fraction(3, 8), (1, -1): Fraction(1, 8), (1, 0): Fraction(1, 8)}
    assert law.keys() == expected.keys()
    assert all(abs(law[k] - v) < 1e-12 for k, v in expected.items())
    cert = certify(twins.placeholder_accepted, hand_table, 2, {})
    assert abs(cert.tvd - Fraction(1, 2)) < 1e-12 and abs(cert.off_support - Fraction(1, 2)) < 1e-12


def test_shared_uniform_by_hand(hand_table):
    """N = 2, one draft: x = 0 when u < 1/2. x = 0 is accepted surely and the bonus reuses u < 1/2 < 3/4: token
    0, so (0,0) 1/2. x = 1 is accepted with 1/2 and its bonus reads u ∈ [1/2, 1): 0 when u < 3/4, so (1,0) and
    (1,1) 1/8 each; a rejection (1/4) emits the residual's 0, then a fresh draw from q: (0,0) 3/16, (0,1) 1/16.
    Law 11/16, 1/16, 1/8, 1/8 against 9/16, 3/16, 3/16, 1/16: TVD (2 + 2 + 1 + 1)/32 = 3/16."""
    cert = certify(twins.shared_uniform, hand_table, 2, {})
    assert abs(cert.tvd - Fraction(3, 16)) < 1e-12 and cert.off_support == 0


def test_penalty_prefix_only_by_hand(hand_table):
    """Repetition penalty 2 on negative logits log q squares the penalised entries. After the prompt [0] both
    rows are penalised at 0: q' = (9/13, 4/13), p' = (1/3, 2/3). N = 2, one draft; the first token is right (the
    round's first row sees the whole prefix). Token 1 comes only from an accepted draft 1 (the residual is
    (q' − p')+ ∝ (1, 0)), with probability 4/13; its bonus should be penalised at 0 and 1, ∝ (9/16, 1/16) =
    (9/10, 1/10), but the bug penalises 0 only: (9/13, 4/13). TVD 4/13 · (9/10 − 9/13) = 54/845."""
    cert = certify(twins.penalty_prefix_only, hand_table, 2, {"repetition_penalty": 2.0})
    assert abs(cert.tvd - Fraction(54, 845)) < 1e-12
    assert certify(twins.speculative_loop, hand_table, 2, {"repetition_penalty": 2.0}).tvd < 1e-12


def test_the_twins_are_user_code_and_certify_by_module_function(tmp_path):
    """Registered as specimens (their lines are the user's in messages; their randomness is watched), and named
    by ``certify --loop module:function`` like any loop: the correct twin exits 0, a bug twin 1."""
    from click.testing import CliRunner

    from simulator.usercode import is_own_frame, specimens
    from specproof.cli import app as cli

    assert str(Path(twins.__file__).resolve()) in specimens() and not is_own_frame(twins.__file__)
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"vocab": 2, "p": {"*": ["1/2", "1/2"]}, "q": {"*": ["3/4", "1/4"]}}))
    for name, code in (("speculative_loop", 0), ("shared_uniform", 1)):
        result = CliRunner().invoke(cli.main, ["certify", "--loop", f"specproof.gate.loop_specimens:{name}",
                                               "--model", "prefix-table", "--table", str(table)])
        assert result.exit_code == code, result.output


def test_the_zoo_report_and_docs_hold_every_loop_class(zoo_rows):
    from specproof.gate.zoo import loop_headline

    assert list(zoo_rows) == [t.name for t in twins.TWINS]
    for twin in twins.TWINS:
        row = zoo_rows[twin.name]
        assert (row["instance"], row["bug"], row["seen"]) == (twin.describe(), twin.bug, twin.seen)
        assert row["twin_tvd"] < 1e-12
        assert row["loop"] == f"specproof.gate.loop_specimens:{twin.loop.__name__}"
    report = json.loads((ROOT / "reports" / "mutation_zoo.json").read_text())
    assert loop_headline(report["loops"]["rows"]) in (ROOT / "docs" / "gate.md").read_text()


def test_the_zoo_counts_a_placeholder_as_one_more_token():
    """The designs' cells hold a -1 as token V, where the target has no mass: the chi-square design then
    rejects on any such sample, and the serving test sees the marginal of token V off by its mass."""
    from simulator.montecarlo.designs import cells, chi_square_pass
    from specproof.gate.zoo import _placeholder_last

    law = _placeholder_last({(0, -1): 0.5, (1, 0): 0.5}, 2)
    assert law == {(0, 2): 0.5, (1, 0): 0.5}
    ours, theirs = cells(law, 3, 2), cells({(0, 0): 0.5, (1, 0): 0.5}, 3, 2)
    assert chi_square_pass(ours, theirs, 3, 2) == 0.0


@pytest.mark.slow
def test_on_tiny_llama_the_correct_twin_is_lossless_and_the_top_p_twin_is_not():
    """transformers' Llamas in float32 (judged at 1e-5), two tokens (N = 3 takes ten times longer): the correct
    twin under top-p 0.6 LOSSLESS, its top-p-target-only twin LOSSY."""
    pair = tiny_llama_pair(4, 0)
    good = certify(twins.speculative_loop, pair, 2, {"top_p": 0.6})
    assert good.lossless and good.tolerance == 1e-5, good
    bad = certify(twins.top_p_target_only, pair, 2, {"top_p": 0.6})
    assert not bad.lossless and bad.tvd > 0.05, bad
