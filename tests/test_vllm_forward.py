"""vLLM 0.11.0's ``RejectionSampler.forward`` through ``--adapter vllm-v1-forward`` on a batch of three requests,
unmodified, with its ``SamplingMetadata`` and top-k/top-p filter (``specproof fetch vllm-v1``; skipped, saying so,
where the artifact is not in the cache). The requests (examples/vllm_batch/):

* A, greedy (temperature written as -1, the sampler's ``GREEDY_TEMPERATURE``), two drafts from ``[1/2, 1/2, 0]``
  then ``[1/4, 3/4, 0]`` after token 1: the target's argmax is 1, then 0 after it, so a round accepts token 1 with
  probability 1/2 and then token 0 with probability 1/4: ``E[accepted] = 1/2 + 1/2 · 1/4 = 5/8``, TVD exactly 0.
* B, temperature 1/2, top-k 2, its own generator, one draft from ``[0, 1/2, 1/2]``: the target ``[1/2, 3/10, 1/5]``
  squared is ``[1/4, 9/100, 1/25]``, cut to its top two ``[25/34, 9/34, 0]``; the acceptance is
  ``min(1/2, 9/34) = 9/34``. After token 1 the row ``[2/5, 3/10, 3/10]`` squared ties its second and third tokens,
  and top-k 2 keeps both (``[8/17, 9/34, 9/34]``).
* C, top-p 3/4, one draft from ``[1/5, 2/5, 2/5]``: the target ``[1/10, 3/10, 3/5]`` in ascending order has
  cumulative masses 1/10, 2/5, 1, of which 1/10 ≤ 1/4 is cut: ``[0, 1/3, 2/3]``; the acceptance is
  ``1/3 + 2/5 = 11/15``.

Controls the same tests reject: a forward that drops the top-k (B's first token 2, which B's reference never
draws, gets ``(1/2)·(4/38)/(1/2) = 2/19``), one that reuses B's acceptance uniform for C (each request's law
unchanged; the joint off the product by ``P(B drafts 1, C drafts 1) · 3/17 = 3/85``), and B held to temperature 1.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import random
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # not importorskip: triton is imported after TRITON_INTERPRET=1
    pytest.skip("triton is not installed: pip install -e '.[triton]'", allow_module_level=True)

from exact.enumeration import enumerate_outcomes  # noqa: E402
from exact.pairs import batch_law  # noqa: E402
from simulator.errors import InvalidParameterError, KernelError  # noqa: E402
from simulator.kernels.batch import BatchRequest, ReferencePair, parse_request  # noqa: E402
from simulator.kernels.capture import capture  # noqa: E402
from simulator.kernels.kernel import Kernel  # noqa: E402
from simulator.models import TableModel  # noqa: E402
from simulator.real.fetch import cached  # noqa: E402
from specproof.cli import app as cli  # noqa: E402

FORWARD = "vllm.v1.sample.rejection_sampler:RejectionSampler.forward"
PRIVATE_DRAW = random.Random(0).random  # bound before any capture
ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "tests" / "kernel_modules"


def _table(name: str) -> TableModel:
    return TableModel.from_file(ROOT / "examples" / "vllm_batch" / f"{name}.json")


GREEDY = BatchRequest(_table("greedy"), depth=2, temperature=-1)
TOP_K = BatchRequest(_table("top_k"), depth=1, temperature=0.5, top_k=2, seed=7)
TOP_P = BatchRequest(_table("top_p"), depth=1, top_p=0.75)


@pytest.fixture(autouse=True)
def path_as_found(monkeypatch):
    """``sys.path`` left as each test found it: the kernels' import paths (tests/kernel_modules among them) are not
    for the tests that follow."""
    monkeypatch.setattr(sys, "path", list(sys.path))


def _folder() -> str:
    folder = cached("vllm-v1")
    if folder is None:
        pytest.skip("vLLM 0.11.0's rejection sampler is not in the cache: run `specproof fetch vllm-v1` to run "
                    "this test")
    return str(folder)


def _kernel(name: str = FORWARD) -> Kernel:
    return Kernel(name, "vllm-v1-forward", import_path=[_folder(), str(MODULES)])


# ---- the capture: a draw in place on a view --------------------------------------------------------------------

def _law(program) -> dict:
    law: dict = {}
    for outcome, prob in enumerate_outcomes(program):
        law[outcome] = law.get(outcome, Fraction(0)) + prob
    return law


def test_a_view_drawn_again_in_place_is_a_fresh_uniform_in_the_tensor_it_views():
    # vLLM draws a batch's uniforms, then draws a seeded request's slice again on its own generator
    def program(rng):
        with capture(rng):
            u = torch.rand(2, dtype=torch.float64)
            first = bool(u[0] < 0.5)
            u[0:1].uniform_(generator=torch.Generator().manual_seed(1))
            return first, bool(u[0] < 0.5)  # read through the tensor viewed

    # the second comparison is of a new uniform: independent of the first (the old one would give 1/2, 0, 0, 1/2)
    assert _law(program) == {(a, b): Fraction(1, 4) for a in (True, False) for b in (True, False)}


def test_a_concrete_tensor_drawn_row_by_row_races_on_its_draws():
    # vLLM's random_sample when every request has a generator: torch.empty_like, then each row drawn on its own
    weights = torch.tensor([[1.0, 2.0, 1.0], [1.0, 0.0, 3.0]])

    def program(rng, rows=(0, 1)):
        with capture(rng):
            q = torch.empty_like(weights)
            for i in rows:
                q[i].exponential_(generator=torch.Generator().manual_seed(i))
            return tuple(weights.clone().div_(q).argmax(dim=-1).tolist())

    first, second = [Fraction(1, 4), Fraction(1, 2), Fraction(1, 4)], [Fraction(1, 4), 0, Fraction(3, 4)]
    assert _law(program) == {(i, j): first[i] * second[j] for i in range(3) for j in range(3) if second[j]}
    with pytest.raises(KernelError, match="race key"):  # a row left undrawn holds whatever memory held
        _law(lambda rng: program(rng, rows=(0,)))


def test_a_view_drawn_again_over_values_maps_changed_is_refused():
    def program(rng):
        with capture(rng):
            u = torch.rand(2, dtype=torch.float64).mul_(2)
            u[0:1].exponential_()

    with pytest.raises(KernelError, match="maps have changed"):
        _law(program)


# ---- the requests and their references -------------------------------------------------------------------------

def test_each_reference_row_is_derived_by_hand():
    greedy, top_k, top_p = (ReferencePair(r, i) for i, r in enumerate((GREEDY, TOP_K, TOP_P)))
    assert greedy.q(()) == [0, 1, 0] and greedy.q((1,)) == [1, 0, 0]
    assert top_k.q(()) == pytest.approx([25 / 34, 9 / 34, 0], abs=1e-15)
    assert top_k.q((1,)) == pytest.approx([8 / 17, 9 / 34, 9 / 34], abs=1e-15)  # the tie with the 2nd kept
    assert top_p.q(()) == pytest.approx([0, 1 / 3, 2 / 3], abs=1e-15)


@pytest.mark.parametrize("top_p, rows, why", [
    (0.9, {"": ["1/10", "3/10", "3/5"]}, "within 1e-06 of a cumulative mass"),  # 1 − 0.9 is the first mass
    (0.6, {"": ["1/4", "1/4", "1/2"]}, "separates two equal probabilities")])  # cuts one of the two 1/4
def test_a_top_p_cut_float32_could_decide_otherwise_is_refused(top_p, rows, why):
    table = TableModel.from_json({"vocab": 3, "p": {"*": ["1/3", "1/3", "1/3"]}, "q": {"*": ["1/3", "1/3", "1/3"],
                                                                                    **rows}})
    with pytest.raises(InvalidParameterError, match=why) as err:
        ReferencePair(BatchRequest(table, depth=1, top_p=top_p), 2).q(())
    assert err.value.field == "request[2].top_p"


@pytest.mark.parametrize("text, field", [
    ("top_p=1.5", "request[1].top_p"), ("temperature=0.000001", "request[1].temperature"),
    ("temperature=0,top_k=2", "request[1].top_k"), ("depth=0", "request[1].depth"), ("seed=-1", "request[1].seed"),
    ("top-k=2", "request[1]"), ("topk=2", "request[1].topk")])
def test_a_bad_request_field_is_named(text, field):
    with pytest.raises(InvalidParameterError) as err:
        parse_request(text, 1, lambda index, seed, table: _table("top_p"), 2)
    assert err.value.field == field


def test_vllms_own_filter_cuts_as_the_reference_does():
    # a second method for the reference's order and tie rules: the artifact's apply_top_k_top_p on the same rows
    _kernel()  # the artifact on the path, its stand-ins installed
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

    for request, context in ((TOP_K, ()), (TOP_K, (1,)), (TOP_P, ()), (TOP_P, (2,))):
        logits = torch.tensor([[float(x) for x in request.model.q(context)]], dtype=torch.float64).log()
        cut = apply_top_k_top_p(logits / request.temperature, torch.tensor([request.top_k or 3]),
                                torch.tensor([request.top_p], dtype=torch.float64)).softmax(-1)[0]
        assert cut.tolist() == pytest.approx(ReferencePair(request, 0).q(context), abs=1e-12)


# ---- the batch, certified ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def law():
    saved = list(sys.path)
    try:
        return batch_law([GREEDY, TOP_K, TOP_P], _kernel())
    finally:
        sys.path[:] = saved


@pytest.mark.slow
def test_the_mixed_batch_is_lossless_request_by_request_with_the_hand_derived_acceptances(law):
    cert = law.certificate([GREEDY, TOP_K, TOP_P])
    assert cert.lossless and all(r.lossless and r.off_support == 0 for r in cert.requests), cert.to_json()
    greedy, top_k, top_p = cert.requests
    assert greedy.tvd == 0 and greedy.expected_accepted == 5 / 8
    assert abs(top_k.expected_accepted - 9 / 34) < 1e-6  # float32 rows
    assert abs(top_p.expected_accepted - 11 / 15) < 1e-6
    assert cert.joint_tvd == 0
    # drafts × draws: A 3 drafts; B (bonus 3 × accept or not) + 1; C 1 + 2 × 2 + 2
    assert cert.executions == 3 * 7 * 7


@pytest.mark.slow
def test_held_to_the_wrong_temperature_the_same_law_is_lossy_for_that_request_alone(law):
    cert = law.certificate([GREEDY, dataclasses.replace(TOP_K, temperature=1.0), TOP_P])
    assert not cert.lossless
    assert [r.lossless for r in cert.requests] == [True, False, True]
    assert cert.requests[1].tvd > 0.05


def test_a_forward_that_drops_the_top_k_is_lossy_for_the_request_that_cuts():
    cert = batch_law([GREEDY, TOP_K], _kernel("vllm_forward_bugs:ignores_top_k")).certificate([GREEDY, TOP_K])
    assert [r.lossless for r in cert.requests] == [True, False]
    assert abs(cert.requests[1].off_support - 2 / 19) < 1e-6  # token 2 first, which top-k 2 never keeps
    assert abs(cert.requests[1].tvd - 2 / 19) < 1e-6  # the first token by the uncut [25, 9, 4] / 38


def test_a_uniform_shared_between_requests_leaves_each_law_and_breaks_the_joint():
    cert = batch_law([TOP_K, TOP_P], _kernel("vllm_forward_bugs:shares_a_uniform")).certificate([TOP_K, TOP_P])
    assert all(r.lossless for r in cert.requests) and not cert.lossless
    assert abs(cert.joint_tvd - 3 / 85) < 1e-6


def test_greedy_written_as_vllm_0_11_0s_input_batch_writes_it_is_refused_at_the_nan_row():
    # InputBatch writes a greedy request's temperature as 0, the sampler compares with -1 (fixed in vllm#27077):
    # the greedy row is divided by 0, its probabilities NaN, read by the recovered-token kernel
    greedy = dataclasses.replace(GREEDY, temperature=0)
    with pytest.raises(KernelError, match=r"NaN read from memory.*rejection_sampler\.py:611"):
        batch_law([greedy, TOP_K], _kernel())
    # without a random request beside it, compute_probs is skipped and the 0 never divides
    alone = [greedy, dataclasses.replace(TOP_K, temperature=0, top_k=0, seed=None)]
    cert = batch_law(alone, _kernel()).certificate(alone)
    assert cert.lossless and cert.requests[0].expected_accepted == 5 / 8 and cert.executions == 3 * 2


def first_line_draws(*args):
    PRIVATE_DRAW()


def test_the_adapter_hands_over_to_the_kernel_watched():
    # the profiler is off while the adapter builds the arguments: it must be back on at the kernel's first line
    with pytest.raises(KernelError, match="random.Random.random: bound before the capture"):
        batch_law([TOP_P], _kernel(f"{__name__}:first_line_draws"))


# ---- the command line -------------------------------------------------------------------------------------------

def _certify(*args: str):
    return CliRunner().invoke(cli.main, ["certify", "--kernel", FORWARD, "--adapter", "vllm-v1-forward", "--import-path",
                                         _folder(), *args])


def test_the_command_line_gives_each_requests_verdict_and_the_joint(tmp_path):
    out = tmp_path / "batch.json"
    table = ROOT / "examples" / "vllm_batch"
    result = _certify("--request", f"table={table / 'greedy.json'},temperature=-1",
                      "--request", f"table={table / 'top_k.json'},temperature=0.5,top_k=2,seed=7,depth=1",
                      "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "request 0 (greedy (temperature written as -1), 2 draft(s)): LOSSLESS, TVD 0 to its argmax" in result.output
    assert "joint: TVD 0 of the batch's law" in result.output
    cert = json.loads(out.read_text())
    assert [r["lossless"] for r in cert["requests"]] == [True, True] and cert["executions"] == 3 * 7
    assert cert["requests"][0]["expected_accepted"] == 5 / 8 and cert["tvd"] < 1e-5


@pytest.mark.parametrize("args, message", [
    ((), "error: adapter: --adapter vllm-v1-forward verifies a batch of requests: give one --request"),
    (("--request", "top_p=0"), "error: request[0].top_p: must be a number in (0, 1], got 0"),
    (("--request", "top_p=0.5", "--seeds", "2"), "error: seeds: --seeds does not apply to a batch")])
def test_the_command_line_refuses_what_a_batch_cannot_be(args, message):
    result = _certify(*args)
    assert result.exit_code == 2 and message in result.output, result.output
