"""Triton kernels certified exactly on the CPU under Triton's interpreter (simulator/kernels/triton_capture.py):
the chain kernels of specproof/gate/triton_kernels.py, each correct one LOSSLESS and each bug twin LOSSY, a kernel
the capture cannot resolve refused naming its line, and the float32 rounding the capture inverts checked against
numpy's own rounding."""

from __future__ import annotations

import contextlib
import importlib.util
import operator
import os
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # not importorskip: triton is imported after TRITON_INTERPRET=1
    pytest.skip("triton is not installed: pip install -e '.[triton]'", allow_module_level=True)

import numpy as np  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from exact import certify  # noqa: E402
from simulator.drafting.drafter_registry import make_drafter  # noqa: E402
from simulator.errors import SpecproofError  # noqa: E402
from simulator.kernels.capture import _unrounded  # noqa: E402
from simulator.kernels.kernel import Kernel  # noqa: E402
from simulator.models import RandomRationalModel  # noqa: E402
from simulator.trees import make_topology  # noqa: E402
from specproof.cli import app as cli  # noqa: E402

ZOO = "specproof.gate.triton_kernels"
PAIRS = [RandomRationalModel(3, seed=s) for s in range(3)]


def _certificate(name: str, model, uniforms: str = "continuous", verifier=None):
    drafter = make_drafter("iid", make_topology("chain", 2, 1), model)
    return certify(model, drafter, verifier or Kernel(f"{ZOO}:{name}", "chain", uniforms=uniforms))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("name", "uniforms"), [("sps_chain", "continuous"), ("sps_chain", "grid"),
                                                ("sps_chain_triton_residual", "continuous"),
                                                ("sps_chain_triton_residual", "grid"),
                                                ("sps_chain_philox", "continuous"),
                                                ("sps_chain_triton_race", "continuous"),
                                                ("sps_chain_tiled_race", "continuous"),
                                                ("sps_chain_randn", "continuous")])
def test_correct_triton_kernels_are_lossless_with_the_reference_rules_acceptance(name, uniforms, seed):
    cert = _certificate(name, PAIRS[seed], uniforms)
    reference = _certificate(name, PAIRS[seed], verifier="tv-sps")  # specproof's own rule, written apart
    assert cert.lossless and cert.off_support == 0, (cert.tvd, cert.tolerance_reason)
    assert abs(float(cert.expected_accepted) - float(reference.expected_accepted)) < 1e-12


def test_coin_of_zero_with_le_is_a_support_violation_only_on_the_grid():
    lossy = _certificate("sps_chain_le", PAIRS[0], "grid")
    assert not lossy.lossless and lossy.off_support > 0 and lossy.counterexample is not None
    assert lossy.tvd <= lossy.tolerance  # caught by support alone: the grid's 2^-53 coin of 0
    assert _certificate("sps_chain_le", PAIRS[0], "continuous").lossless


@pytest.mark.parametrize("uniforms", ["continuous", "grid"])
def test_coin_rounding_to_one_is_lossy(uniforms):
    cert = _certificate("sps_chain_coin_float32", PAIRS[0], uniforms)
    assert not cert.lossless and cert.off_support > 0
    # the coin rounds to 1.0 on [1 − 2^-25, 1): the mass moved is at most that, once per execution
    assert cert.off_support <= Fraction(1, 2**25)


def test_reused_uniform_is_lossy():
    cert = _certificate("sps_chain_reused_uniform", PAIRS[1])
    assert not cert.lossless and cert.tvd > 0.01 and cert.counterexample is not None


@pytest.mark.parametrize("seed", [0, 1])
def test_a_reused_philox_offset_loses_what_the_torch_reused_uniform_loses(seed):
    # the residual drawn by the uniform that rejected: the torch twin, written apart, carries the same bug
    cert = _certificate("sps_chain_philox_reused_offset", PAIRS[seed])
    torch_twin = _certificate("", PAIRS[seed], verifier=Kernel("specproof.gate.torch_kernels:sps_chain_reused_uniform",
                                                               "chain"))
    assert not cert.lossless and cert.tvd > 0.01
    assert abs(float(cert.tvd) - float(torch_twin.tvd)) < 1e-12


@pytest.mark.parametrize("seed", [0, 1])
def test_a_race_on_the_target_row_loses_what_the_torch_twin_loses(seed):
    cert = _certificate("sps_chain_triton_race_target", PAIRS[seed])
    torch_twin = _certificate("", PAIRS[seed], verifier=Kernel("specproof.gate.torch_kernels:sps_chain_target_residual",
                                                               "chain"))
    assert not cert.lossless and cert.tvd > 0.01
    assert abs(float(cert.tvd) - float(torch_twin.tvd)) < 1e-12


def test_a_tiled_race_past_the_vocabulary_is_a_typed_error_naming_the_token_and_the_tile():
    # pair 1 reaches the residual of the last tile (its correct twin is LOSSLESS above): the id 3 = V emitted
    cli_run = CliRunner().invoke(cli.main, ["certify", "--kernel", f"{ZOO}:sps_chain_tiled_race_past_vocab",
                                            "--adapter", "chain", "--depth", "2", "--model", "random-rational",
                                            "--vocab", "3", "--seed", "1"])
    assert cli_run.exit_code == 2, cli_run.output
    assert "returned token 3 as emitted token" in cli_run.output and "outside the vocabulary 0..2" in cli_run.output
    assert "lane 1 of 2 in program (1, 0, 0)" in cli_run.output and "in _tile_race: idx = tl.argmax" in cli_run.output


def test_a_normal_compared_against_the_wrong_cut_is_lossy():
    # the twin of sps_chain_randn: accepted with probability 1 − min(1, q/p)
    cert = _certificate("sps_chain_randn_flipped", PAIRS[0])
    assert not cert.lossless and cert.tvd > 0.1


def test_in_kernel_draws_have_no_grid_model():
    with pytest.raises(SpecproofError, match="tl.rand has no grid model"):
        _certificate("sps_chain_philox", PAIRS[0], "grid")


def test_unrounded_threshold_agrees_with_numpys_float32_rounding():
    rng = random.Random(1)
    holds = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}
    for _ in range(2000):
        t = rng.choice([rng.random(), float(np.float32(rng.random())), 1.0, 0.0, 1 - 2**-25, 1 - 2**-24])
        cmp = rng.choice(sorted(holds))
        cut, cmp_x = _unrounded(Fraction(t), cmp, 32)
        for x in (np.nextafter(float(cut), -1), float(cut), np.nextafter(float(cut), 2), t, rng.random()):
            rounded = Fraction(float(np.float32(x)))
            assert holds[cmp](rounded, Fraction(t)) == holds[cmp_x](Fraction(x), cut), (t, cmp, x)
    # negative control: the rounding ignored (the threshold kept) disagrees at the midpoint below 1
    x = 1 - 2**-25
    assert float(np.float32(x)) == 1.0 and not (Fraction(x) >= 1)


MODULES = Path(__file__).resolve().parent / "kernel_modules"


@pytest.mark.parametrize(("kernel", "why"), [
    ("summed", "ReduceOps: a reduction or scan over random values is not modelled"),
    ("stored", "is read by torch code, which does not follow it"),
    ("branched", "bool: a random value used as a Python condition"),
    ("bits", "bitcast: this operation on a random value cannot be resolved exactly"),
    ("squared", "fmul: an operation on two random values cannot be resolved exactly"),
    ("normal", "fabs: this operation on a random value cannot be resolved exactly"),
    ("raw", "randint: raw random bits drawn in the kernel are not modelled exactly"),
    ("reciprocal", "rdiv: a comparison through this map is not modelled"),
])
def test_what_the_capture_cannot_follow_is_refused_naming_the_kernel_line(kernel, why):
    verifier = Kernel(f"kl_triton_refused:{kernel}", "chain", import_path=[str(MODULES)])
    with pytest.raises(SpecproofError) as refused:
        _certificate(kernel, PAIRS[0], verifier=verifier)
    assert why in str(refused.value) and "kl_triton_refused.py:" in str(refused.value), str(refused.value)


def _cli(kernel: str) -> object:
    return CliRunner().invoke(cli.main, ["certify", "--kernel", f"{ZOO}:{kernel}", "--adapter", "chain", "--depth",
                                         "2", "--model", "random-rational", "--vocab", "3"])


def test_an_unresolvable_kernel_exits_2_naming_its_line():
    refused = _cli("sps_chain_sqrt")
    assert refused.exit_code == 2, refused.output
    assert "sqrt: this operation on a random value cannot be resolved exactly" in refused.output
    assert "triton_kernels.py:" in refused.output and "in _accept_sqrt: " in refused.output
    assert "tl.sqrt(u)" in refused.output
    passed = _cli("sps_chain")  # negative control: its twin without sqrt certifies
    assert passed.exit_code == 0, passed.output


def test_without_triton_the_kernel_module_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    monkeypatch.delitem(sys.modules, ZOO, raising=False)
    result = _cli("sps_chain")
    assert result.exit_code == 2, result.output
    assert "pip install -e '.[triton]'" in result.output


@pytest.mark.parametrize("seed", range(2))
def test_a_loop_bound_loaded_from_a_tensor_runs_under_the_capture(seed):
    # triton_compat's fix, entered by the capture: the loop counts to the draft's id, so the kernel is sps_chain
    looped = _certificate("", PAIRS[seed], verifier=Kernel("kl_triton_loop:looped", "chain",
                                                           import_path=[str(MODULES)]))
    reference = _certificate("", PAIRS[seed], verifier="tv-sps")
    assert looped.lossless and looped.off_support == 0, (looped.tvd, looped.tolerance_reason)
    assert abs(float(looped.expected_accepted) - float(reference.expected_accepted)) < 1e-12
    # negative control: the loop one step short reads the previous token's probabilities
    short = _certificate("", PAIRS[seed], verifier=Kernel("kl_triton_loop:looped_short", "chain",
                                                          import_path=[str(MODULES)]))
    assert not short.lossless and short.tvd > 0.01


@pytest.mark.skipif(tuple(int(part) for part in np.__version__.split(".")[:2]) < (2, 4),
                    reason="NumPy before 2.4 converts a one-element array, with a warning")
def test_without_the_fix_the_loop_bound_stops_the_capture(monkeypatch):
    import simulator.kernels.triton_capture as triton_capture

    monkeypatch.setattr(triton_capture, "interpreter_scalar_index", contextlib.nullcontext)
    with pytest.raises(SpecproofError, match=r"only 0-dimensional arrays.*kl_triton_loop\.py:\d+"):
        _certificate("", PAIRS[0], verifier=Kernel("kl_triton_loop:looped", "chain", import_path=[str(MODULES)]))


def _memory_kernel(name: str) -> Kernel:
    return Kernel(f"kl_triton_memory:{name}", "chain", import_path=[str(MODULES)])


@pytest.mark.parametrize("name", ["stored_then_loaded", "shared_race"])
def test_random_values_through_memory_are_followed(name):
    # the uniform stored by one kernel and loaded by another; vLLM v1's shared race with one winner read
    for seed in range(2):
        cert = _certificate("", PAIRS[seed], verifier=_memory_kernel(name))
        reference = _certificate("", PAIRS[seed], verifier="tv-sps")
        assert cert.lossless and cert.off_support == 0, (name, seed, cert.tvd)
        assert abs(float(cert.expected_accepted) - float(reference.expected_accepted)) < 1e-12


def test_their_twins_are_lossy_or_refused():
    # negative controls: position 0's stored uniform read at every position (reused), and every shared race read
    reused = _certificate("", PAIRS[1], verifier=_memory_kernel("loaded_from_position_0"))
    assert not reused.lossless and reused.tvd > 1e-3
    with pytest.raises(SpecproofError, match="argmax: a race on a random value already compared or raced"):
        _certificate("", PAIRS[1], verifier=_memory_kernel("shared_race_all_read"))


#: a Triton kernel module with no interpreter setting of its own: nothing in it, nor in the environment, names
#: TRITON_INTERPRET
BARE_TRITON_MODULE = '''
import torch
import triton
import triton.language as tl

from specproof.gate.torch_kernels import chain_answer, chain_rows, inverse_cdf, residual_weights


@triton.jit
def _accept(drafts, draft_rows, target_rows, uniforms, accepted, V: tl.constexpr):
    i = tl.program_id(0)
    x = tl.load(drafts + i)
    u, p, q = tl.load(uniforms + i), tl.load(draft_rows + i * V + x), tl.load(target_rows + i * V + x)
    tl.store(accepted + i, (u * p < q).to(tl.int32))


def sps_chain(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    drafts, draft, target = chain_rows(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    gamma = int(candidate_length)
    accepted = torch.zeros(gamma, dtype=torch.int32)
    _accept[(gamma,)](drafts.contiguous(), draft.contiguous(), target.contiguous(),
                      torch.rand(gamma, dtype=torch.float64), accepted, V=draft.shape[-1])
    for i, ok in enumerate(accepted.tolist()):
        if not ok:
            return chain_answer(drafts, i, inverse_cdf(residual_weights(target[i], draft[i]), torch.rand(())))
    return chain_answer(drafts, gamma, torch.multinomial(target[gamma], 1))
'''


@pytest.mark.slow
def test_a_triton_kernel_with_no_interpreter_setting_of_its_own_certifies(tmp_path):
    """``specproof certify --kernel`` in a process whose environment has no ``TRITON_INTERPRET``, of a module that
    sets none: the loader asks for the interpreter before importing it (docs/kernels.md, "Triton kernels")."""
    (tmp_path / "bare_triton.py").write_text(BARE_TRITON_MODULE)
    assert "TRITON_INTERPRET" not in BARE_TRITON_MODULE
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-m", "specproof.cli", "certify", "--import-path", str(tmp_path),
                             "--kernel", "bare_triton:sps_chain", "--adapter", "chain", "--depth", "2", "--model",
                             "random-rational", "--vocab", "3"], capture_output=True, text=True, env=env,
                            cwd=Path(__file__).resolve().parent.parent, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "bare_triton:sps_chain: LOSSLESS" in result.stdout
