"""vLLM 0.11.0's v1 ``rejection_sample`` through ``--adapter vllm-v1`` and ``--adapter vllm-v1-no-draft-probs``,
unmodified: its torch code draws the uniforms (float64) and one row of float32 exponentials per request, its
Triton kernels (``sample_recovered_tokens_kernel``, ``rejection_random_sample_kernel``) decide under Triton's
interpreter (``specproof fetch vllm-v1``; skipped, saying so, where the module is not in the cache).

What it must give, derived from its source: a draft ``x`` accepted when ``q(x) / p(x) >= u``, the recovered token
``argmax(max(q − p, 0) / E)``: speculative sampling, so LOSSLESS with ``tv-sps``'s acceptance. With
``draft_probs=None`` the draft is taken as certain: ``x`` accepted with probability ``q(x)``, recovered from ``q``
without ``x``; lossless for any draft, and on a point-mass draft (examples/point_mass_draft.json: drafts 1 then 2)
its acceptance is ``q(1 | ·) + q(1 | ·) q(2 | 1) = 1/3 + 1/3 · 3/4 = 7/12`` by hand.
"""

from __future__ import annotations

import importlib.util
import json
from fractions import Fraction
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # not importorskip: triton is imported after TRITON_INTERPRET=1
    pytest.skip("triton is not installed: pip install -e '.[triton]'", allow_module_level=True)

from exact import certify  # noqa: E402
from simulator.drafting.drafter_registry import make_drafter  # noqa: E402
from simulator.kernels.kernel import Kernel  # noqa: E402
from simulator.models import RandomRationalModel, TableModel  # noqa: E402
from simulator.real.fetch import cached  # noqa: E402
from simulator.trees import make_topology  # noqa: E402

VLLM = "vllm.v1.sample.rejection_sampler:rejection_sample"
POINT_MASS = Path(__file__).resolve().parents[1] / "examples" / "point_mass_draft.json"


def _certificate(model, verifier):
    return certify(model, make_drafter("iid", make_topology("chain", 2, 1), model), verifier)


def _vllm(adapter: str) -> Kernel:
    folder = cached("vllm-v1")
    if folder is None:
        pytest.skip("vLLM 0.11.0's rejection sampler is not in the cache: run `specproof fetch vllm-v1` to run "
                    "this test")
    return Kernel(VLLM, adapter, import_path=[str(folder)])


def accept_all(draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, target_probs,
               bonus_token_ids, sampling_metadata):
    """vLLM v1's convention, a planted bug: every draft accepted, then the bonus."""
    return torch.cat([draft_token_ids, bonus_token_ids.reshape(-1).to(draft_token_ids.dtype)])[None]


@pytest.mark.parametrize("seed", range(2))
def test_with_draft_probabilities_it_is_speculative_sampling(seed):
    model = RandomRationalModel(3, seed=seed + 1)
    cert = _certificate(model, _vllm("vllm-v1"))
    reference = _certificate(model, "tv-sps")  # specproof's own rule, written apart
    assert cert.lossless and cert.off_support == 0, (cert.tvd, cert.tolerance_reason)
    assert abs(float(cert.expected_accepted) - float(reference.expected_accepted)) < 1e-6  # float32 exponentials


def test_without_draft_probabilities_a_point_mass_draft_is_accepted_with_the_targets_probability():
    model = TableModel.from_json(json.loads(POINT_MASS.read_text()))
    cert = _certificate(model, _vllm("vllm-v1-no-draft-probs"))
    assert cert.lossless and cert.off_support == 0, (cert.tvd, cert.tolerance_reason)
    assert abs(Fraction(cert.expected_accepted) - Fraction(7, 12)) < 1e-12


def test_a_kernel_accepting_every_draft_through_the_adapter_is_lossy():
    # the negative control of the LOSSLESS verdicts above, through the same adapter and engine
    cert = _certificate(RandomRationalModel(3, seed=1), Kernel(f"{__name__}:accept_all", "vllm-v1"))
    assert not cert.lossless and cert.tvd > 0.01
