"""SGLang 0.5.23's ``chain_speculative_sampling_triton`` through ``--adapter sglang``, chain and block modes,
unmodified.

The Triton kernel runs under Triton's interpreter on the CPU (``specproof fetch sglang-reject``; the certification
is skipped, saying so, where the module is not in the cache: the suite has no network). What it must give, derived
from its source: a draft accepted when ``coin · q(x) < p(x)`` (SGLang's ``q`` the draft row, ``p`` the target's),
the correction token drawn by an inverse-CDF walk of one more uniform over ``max(p − q, 0)`` (or over the target's
last row when every draft is accepted): speculative sampling, so LOSSLESS, with specproof's own ``tv-sps``
acceptance. With ``block_verification=True`` it runs the Block Verification paper's Algorithm 2: LOSSLESS, with
specproof's own ``bv`` acceptance. A torch kernel of the same convention that accepts every draft is the negative
control.
"""

from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("triton") is None:  # not importorskip: triton is imported after TRITON_INTERPRET=1
    pytest.skip("triton is not installed: pip install -e '.[triton]'", allow_module_level=True)

from exact import certify  # noqa: E402
from simulator.drafting.drafter_registry import make_drafter  # noqa: E402
from simulator.errors import KernelError, UnsupportedDraftError  # noqa: E402
from simulator.kernels.conventions import sglang_adapter  # noqa: E402
from simulator.kernels.kernel import Kernel  # noqa: E402
from simulator.models import RandomRationalModel  # noqa: E402
from simulator.real.fetch import cached  # noqa: E402
from simulator.trees import DraftTree, make_topology  # noqa: E402

SGLANG = "sglang.kernels.ops.speculative.reject_sampling:chain_speculative_sampling_triton"


def _certificate(model, verifier):
    return certify(model, make_drafter("iid", make_topology("chain", 2, 1), model), verifier)


def _sglang(**kwargs) -> Kernel:
    folder = cached("sglang-reject")
    if folder is None:
        pytest.skip("SGLang's reject_sampling module is not in the cache: run `specproof fetch sglang-reject` to "
                    "run this test")
    return Kernel(SGLANG, "sglang", import_path=[str(folder)], kwargs=kwargs)


def accept_all(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
               retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs, draft_probs,
               threshold_single, threshold_acc, deterministic):
    """SGLang's convention, a planted bug: every draft accepted, the bonus drawn from the last target row."""
    slots = candidates.shape[1]
    predicts[:slots - 1] = candidates[0, 1:]
    predicts[slots - 1] = torch.multinomial(target_probs[0, -1], 1)[0]
    accept_token_num[0] = slots - 1


def too_many(predicts, accept_index, accept_token_num, candidates, *rest):
    """SGLang's convention, a planted bad answer: more accepted than drafted."""
    accept_token_num[0] = candidates.shape[1]


@pytest.mark.parametrize(("seed", "mode", "reference"), [(s, m, r) for s in range(3) for m, r in
                                                         (({}, "tv-sps"), ({"block_verification": True}, "bv"))])
def test_sglang_is_lossless_with_the_reference_rules_acceptance(seed, mode, reference):
    model = RandomRationalModel(3, seed=seed)
    cert = _certificate(model, _sglang(**mode))
    expected = _certificate(model, reference)  # specproof's own rule, written apart
    assert cert.lossless and cert.off_support == 0, (cert.tvd, cert.tolerance_reason)
    assert abs(float(cert.expected_accepted) - float(expected.expected_accepted)) < 1e-12


def test_a_kernel_accepting_every_draft_through_the_adapter_is_lossy():
    # the negative control of the LOSSLESS verdict above, through the same adapter and engine
    cert = _certificate(RandomRationalModel(3, seed=1), Kernel(f"{__name__}:accept_all", "sglang"))
    assert not cert.lossless and cert.tvd > 0.01


def test_the_adapter_refuses_a_tree_and_a_count_past_the_drafts():
    p = q = [[0.5, 0.25, 0.25]] * 3
    with pytest.raises(UnsupportedDraftError, match="sglang adapter verifies a chain"):
        sglang_adapter(accept_all, DraftTree((-1, 0, 0), (None, 0, 1)), p, q, 3, torch.float64)
    with pytest.raises(KernelError, match="accept_token_num 3 for 2 drafts"):
        sglang_adapter(too_many, DraftTree((-1, 0, 1), (None, 0, 1)), p, q, 3, torch.float64)
