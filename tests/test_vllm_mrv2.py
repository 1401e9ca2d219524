"""vLLM 0.33.0's Model Runner V2 ``rejection_sample`` through ``--adapter vllm-mrv2``, unmodified, under Triton's
interpreter (``specproof fetch vllm-mrv2``; skipped, saying so, where the modules are not in the cache).

What it must give, derived from its source: its acceptance coins are ``tl_rand32(seed, pos)`` (``tl.rand`` clamped
below, enumerated per key), a draft accepted when ``log q(x) > log u + log p(x)``: in token mode speculative
sampling, so LOSSLESS with ``tv-sps``'s acceptance; in block mode (``use_block_verification=True``) the Block
Verification paper's rule, LOSSLESS with ``bv``'s. Its rejected or bonus token is resampled by Gumbel-max on a
murmur3 hash of (seed, position, token), modelled as one uniform per key; with ``use_fp64=True`` the noise is
``−log(−log u)``, an exact Gumbel, while the default float32 path approximates ``log(1 − u)`` by a polynomial
series, which the capture refuses, naming gumbel.py's line.
"""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # not importorskip: triton is imported after TRITON_INTERPRET=1
    pytest.skip("triton is not installed: pip install -e '.[triton]'", allow_module_level=True)

from exact import certify  # noqa: E402
from simulator.drafting.drafter_registry import make_drafter  # noqa: E402
from simulator.errors import KernelError  # noqa: E402
from simulator.kernels.kernel import Kernel  # noqa: E402
from simulator.models import RandomRationalModel  # noqa: E402
from simulator.real.fetch import cached  # noqa: E402
from simulator.trees import make_topology  # noqa: E402

MRV2 = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils:rejection_sample"


def _certificate(model, verifier):
    return certify(model, make_drafter("iid", make_topology("chain", 2, 1), model), verifier)


def _mrv2(**kwargs) -> Kernel:
    folder = cached("vllm-mrv2")
    if folder is None:
        pytest.skip("vLLM 0.33.0's Model Runner V2 modules are not in the cache: run `specproof fetch vllm-mrv2` "
                    "to run this test")
    return Kernel(MRV2, "vllm-mrv2", import_path=[str(folder)], kwargs=kwargs)


def accept_all(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping, expanded_idx_mapping,
               expanded_local_pos, temperature, seed, num_speculative_steps):
    """Model Runner V2's convention, a planted bug: every draft accepted, then the target's argmax."""
    k = num_speculative_steps
    sampled = torch.cat([draft_sampled[1:], target_logits[-1].argmax().reshape(1)])[None]
    return sampled, torch.tensor([k + 1], dtype=torch.int32)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "reference"), [({}, "tv-sps"), ({"use_block_verification": True}, "bv")])
def test_model_runner_v2_is_lossless_with_the_reference_rules_acceptance(mode, reference):
    # pair 1: both positions reached, and block verification's acceptance (109/105) above tv-sps's (35/36)
    model = RandomRationalModel(3, seed=1)
    cert = _certificate(model, _mrv2(use_fp64=True, **mode))
    expected = _certificate(model, reference)  # specproof's own rule, written apart
    assert cert.lossless and cert.off_support == 0, (cert.tvd, cert.tolerance_reason)
    assert abs(float(cert.expected_accepted) - float(expected.expected_accepted)) < 1e-6  # float32 logits


def test_its_default_float32_noise_is_refused_naming_the_polynomial():
    with pytest.raises(KernelError, match=r"fmul: an operation on two random values.*gumbel\.py:\d+ in "
                                          r"_log1p_neg_stable"):
        _certificate(RandomRationalModel(3, seed=1), _mrv2())


def test_a_kernel_accepting_every_draft_through_the_adapter_is_lossy():
    # the negative control of the LOSSLESS verdicts above, through the same adapter and engine
    cert = _certificate(RandomRationalModel(3, seed=1), Kernel(f"{__name__}:accept_all", "vllm-mrv2"))
    assert not cert.lossless and cert.tvd > 0.01
