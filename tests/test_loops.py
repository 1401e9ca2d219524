"""Whole generation loops certified end to end (``certify --loop``, docs/loops.md): the reference's processing
against transformers' own processors, the shipped loops and the example LOSSLESS, their twins LOSSY, on the tiny
Llama pair and on an exact prefix table, and the options a loop refuses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from exact.generation_law import certify_loop, loop_law  # noqa: E402
from examples import loops as example  # noqa: E402
from simulator.errors import InvalidParameterError, LoopFailure, VerifierOutputError  # noqa: E402
from specproof.cli.certify_loop import loop_lines  # noqa: E402
from simulator.loops.builtin import load_loop, plain_sampling  # noqa: E402
from simulator.loops.models import prefix_table_pair, tiny_llama_pair  # noqa: E402
from simulator.loops.processors import transformers_processors  # noqa: E402
from simulator.loops.sampling import Sampling  # noqa: E402
from simulator.models import TableModel  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def run(args, timeout=300):
    exe = shutil.which("specproof")
    cmd = [exe] if exe else [sys.executable, "-m", "specproof.cli"]
    return subprocess.run(cmd + args, capture_output=True, text=True, cwd=REPO, timeout=timeout)


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama_pair(4, 0)


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.7}, {"top_k": 2}, {"top_p": 0.6}, {"min_p": 0.5},
                                      {"repetition_penalty": 1.8}, {"repetition_penalty": 0.6, "temperature": 1.3,
                                                                    "top_k": 3, "top_p": 0.8, "min_p": 0.2}])
def test_the_reference_row_is_transformers_processing(sampling):
    """A second implementation: transformers' own processors, in generate's order, on random logits whose
    sequence repeats tokens. The rows agree to float64 rounding."""
    gen = torch.Generator().manual_seed(7)
    for _ in range(20):
        logits = torch.randn(6, generator=gen, dtype=torch.float64) * 2
        sequence = torch.randint(0, 6, (5,), generator=gen).tolist()
        expected = torch.softmax(transformers_processors(sampling)(torch.tensor([sequence]), logits[None])[0], -1)
        assert torch.allclose(Sampling.from_dict(sampling).probs(logits, sequence), expected, atol=1e-12)


@pytest.mark.parametrize("given, field", [({"temperature": 0}, "sampling.temperature"),
                                          ({"top_k": -1}, "sampling.top_k"), ({"top_p": 1.5}, "sampling.top_p"),
                                          ({"min_p": float("nan")}, "sampling.min_p"),
                                          ({"typical_p": 0.9}, "sampling.typical_p")])
def test_bad_sampling_parameters_name_the_field(given, field):
    with pytest.raises(InvalidParameterError) as err:
        Sampling.from_dict(given)
    assert err.value.field == field


@pytest.mark.slow
@pytest.mark.parametrize("name", ["transformers-assisted", "transformers-prompt-lookup"])
def test_transformers_loops_as_installed_are_lossless(tiny, name):
    """generate(assistant_model=...) and prompt lookup, unmodified, under top-k 2: their law of 3 tokens equals
    plain sampling's up to float32 rounding (the target's rows from a multi-token pass and from one-token passes
    differ in the last bits). Prompt lookup gets a prompt with a repeat, so that it drafts: fewer than 3 target
    passes expected, or the verdict would weigh no accepted draft."""
    target, draft = tiny
    prompt = (0,) if name == "transformers-assisted" else (3, 2, 3)
    cert = certify_loop(load_loop(name, 2), plain_sampling, target, draft, prompt, 3, {"top_k": 2})
    assert cert.lossless and cert.tvd < 1e-6 and cert.off_support == 0, cert
    assert cert.tolerance == 1e-5 and "float32" in cert.tolerance_reason
    assert 1 <= cert.expected_passes < 2.6, cert.expected_passes
    # the control: held to plain sampling at top-k 3 (a parameter one side misses, vllm#9834's class), LOSSY
    top_k_3 = lambda t, d, ids, *, max_new_tokens, sampling: plain_sampling(  # noqa: E731
        t, d, ids, max_new_tokens=max_new_tokens, sampling={**sampling, "top_k": 3})
    control = certify_loop(load_loop(name, 2), top_k_3, target, draft, prompt, 3, {"top_k": 2})
    assert not control.lossless and control.tvd > 0.1, control


def test_on_an_exact_table_the_example_is_exact_to_float64():
    """A prefix table of rational rows (float64 logits): the correct loop's TVD is float64 rounding, judged at
    1e-10; the twin's loss, hand-derived on the first token, is the whole TVD's lower bound."""
    table = TableModel(2, {None: [Fraction(3, 4), Fraction(1, 4)]}, {None: [Fraction(1, 4), Fraction(3, 4)]})
    target, draft = prefix_table_pair(table, 1)
    good = certify_loop(example.speculative_sampling, plain_sampling, target, draft, (0,), 3, {})
    assert good.lossless and good.tolerance == 1e-10 and good.tvd < 1e-12
    # plain sampling's first token is 1 w.p. 3/4 whatever the loop: the law of 3 i.i.d. tokens is the reference
    ref = loop_law(plain_sampling, target, draft, (0,), 3, {})
    assert abs(float(ref.law[(1, 1, 1)]) - 27 / 64) < 1e-12
    # the placeholder: a loop that emits -1 puts its mass where the target has none
    placeholder = certify_loop(lambda t, d, ids, *, max_new_tokens, sampling: [-1] * max_new_tokens,
                               plain_sampling, target, draft, (0,), 3, {})
    assert not placeholder.lossless and placeholder.off_support == 1


def test_a_verdict_that_accepted_no_draft_says_so():
    """Draft and target with disjoint supports (the draft always proposes 0, which the target never emits): the
    example loop rejects every draft, so each run takes one token per target pass, E[target passes] = 3, and the
    LOSSLESS verdict says it weighed plain sampling only. The control: rows that overlap, where a draft is
    accepted with probability 1/4 at the first slot, carry no such note."""
    disjoint = TableModel(2, {None: [Fraction(1), Fraction(0)]}, {None: [Fraction(0), Fraction(1)]})
    cert = certify_loop(example.speculative_sampling, plain_sampling, *prefix_table_pair(disjoint, 1), (0,), 3, {})
    assert cert.lossless and cert.expected_passes == 3 and cert.accepted_no_draft
    assert any(line.strip().startswith("note: one token per target pass") for line in loop_lines(cert))
    assert cert.to_json()["accepted_no_draft"] is True
    overlap = TableModel(2, {None: [Fraction(3, 4), Fraction(1, 4)]}, {None: [Fraction(1, 4), Fraction(3, 4)]})
    cert = certify_loop(example.speculative_sampling, plain_sampling, *prefix_table_pair(overlap, 1), (0,), 3, {})
    assert cert.lossless and cert.expected_passes < 3 and not cert.accepted_no_draft
    assert not any("note: one token per target pass" in line for line in loop_lines(cert))


def test_a_loop_that_raises_or_answers_wrongly_is_a_typed_error(tiny):
    target, draft = tiny

    def broken(target, draft, input_ids, *, max_new_tokens, sampling):
        raise RuntimeError("no")

    with pytest.raises(LoopFailure, match="RuntimeError: no"):
        loop_law(broken, target, draft, (0,), 3, {})
    with pytest.raises(VerifierOutputError, match="3 new token ids"):
        loop_law(lambda t, d, ids, *, max_new_tokens, sampling: [0], target, draft, (0,), 3, {})


@pytest.mark.slow
def test_the_example_is_lossless_and_its_raw_row_twin_is_not(tmp_path):
    """docs/loops.md's example, by ``certify --loop module:function``: exit 0; its twin that hands the acceptance
    test the draft's raw row while drafting from the top-k row: exit 1, the first token already off (its law is
    the first draft's)."""
    verdicts = {}
    for name in ("speculative_sampling", "raw_draft_row"):
        out = tmp_path / f"{name}.json"
        result = run(["certify", "--loop", f"examples.loops:{name}", "--model", "tiny-llama", "--vocab", "4",
                      "--top-k", "2", "--json", str(out)])
        verdicts[name] = (result.returncode, json.loads(out.read_text()), result.stdout)
    code, good, _ = verdicts["speculative_sampling"]
    assert code == 0 and good["lossless"] and good["tvd"]["float"] < 1e-6
    assert good["config"]["sampling"] == {"top_k": 2} and len(good["marginal_tvds"]) == 3
    code, bad, text = verdicts["raw_draft_row"]
    assert code == 1 and not bad["lossless"] and bad["tvd"]["float"] > 0.1, text
    assert bad["marginal_tvds"][0]["float"] > 0.01 and "continuation that differs most" in text


@pytest.mark.parametrize("args, field", [
    (["--verifier", "tv-sps", "--top-p", "0.9"], "top_p"),
    (["--verifier", "tv-sps", "--max-new-tokens", "3"], "max_new_tokens"),
    (["--model", "tiny-llama"], "loop"),
    (["--loop", "transformers-assisted"], "model"),
    (["--loop", "transformers-assisted", "--model", "tiny-llama", "--verifier", "tv-sps"], "verifier"),
    (["--loop", "transformers-assisted", "--model", "tiny-llama", "--max-new-tokens", "2"], "max_new_tokens"),
    (["--loop", "transformers-assisted", "--model", "tiny-llama", "--vocab", "9"], "vocab"),
    (["--loop", "transformers-assisted", "--model", "tiny-llama", "--prompt-ids", "0,x"], "prompt_ids"),
    (["--loop", "transformers-assisted", "--model", "prefix-table"], "table"),
    (["--loop", "nomodule_here:loop", "--model", "tiny-llama"], "loop"),
])
def test_loop_options_are_refused_naming_the_field(args, field):
    from click.testing import CliRunner

    from specproof.cli import app as cli

    result = CliRunner().invoke(cli.main, ["certify", *args])
    assert result.exit_code == 2, result.output
    assert f"error: {field}:" in result.output, result.output
