"""MLX-LM's loops certified unmodified (docs/loops.md, "mlx-lm"): the reference's two processing orders derived by
hand where they differ; MLX's own sampler chain against the MLX-order reference; ``speculative_generate_step``
LOSSLESS against plain sampling in MLX's order and LOSSY, by the gap the two orders' laws have, against
transformers' order; its repetition penalty, which forgets the prompt but its last token, LOSSY against MLX's own
``generate_step``. The MLX tests skip, saying so, where mlx-lm is not installed."""

from __future__ import annotations

import importlib.util
import math
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from exact.generation_law import certify_loop, loop_law  # noqa: E402
from exact.law import law_distance  # noqa: E402
from simulator.errors import InvalidParameterError  # noqa: E402
from simulator.loops.builtin import load_loop, plain_sampling, plain_sampling_mlx_order, reference_of  # noqa: E402
from simulator.loops.models import tiny_llama_pair  # noqa: E402
from simulator.loops.sampling import MLX_ORDER, TRANSFORMERS_ORDER, Sampling  # noqa: E402

needs_mlx = pytest.mark.skipif(importlib.util.find_spec("mlx_lm") is None,
                               reason="mlx-lm is not installed: pip install -e '.[mlx]' (mlx-lm[cpu]==0.32.2 on Linux)")
ROW = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64))


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama_pair(4, 0)


@pytest.mark.parametrize("sampling, transformers_row, mlx_row", [
    # top-k 2 keeps {.3, .4} = {3/7, 4/7}, whose ascending mass 3/7 ≤ 1 − 0.5 top-p then drops: only the likeliest.
    # MLX's top-p first, on the full row: .1 and .1 + .2 are ≤ 0.5, dropped; top-k 2 keeps the other two.
    ({"top_k": 2, "top_p": 0.5}, (0, 0, 0, 1), (0, 0, Fraction(3, 7), Fraction(4, 7))),
    # temperature 0.5 squares the row (.01, .04, .09, .16)/.3; min-p 0.4 keeps ≥ .4 × .16: {.09, .16}. MLX's min-p
    # first keeps p ≥ .4 × .4 = .16: {.2, .3, .4}, then squares them: (.04, .09, .16)/.29.
    ({"min_p": 0.4, "temperature": 0.5}, (0, 0, Fraction(9, 25), Fraction(16, 25)),
     (0, Fraction(4, 29), Fraction(9, 29), Fraction(16, 29))),
    # one cut at temperature 1: the order cannot matter
    ({"top_k": 3}, (0, Fraction(2, 9), Fraction(3, 9), Fraction(4, 9)),
     (0, Fraction(2, 9), Fraction(3, 9), Fraction(4, 9))),
])
def test_the_two_orders_give_the_rows_derived_by_hand(sampling, transformers_row, mlx_row):
    chosen = Sampling.from_dict(sampling)
    for order, expected in ((TRANSFORMERS_ORDER, transformers_row), (MLX_ORDER, mlx_row)):
        got = chosen.probs(ROW, [], order).tolist()
        assert got == pytest.approx([float(e) for e in expected], abs=1e-12), (order, got)


def test_an_order_that_is_not_one_of_the_steps_is_refused():
    with pytest.raises(InvalidParameterError) as err:
        Sampling(top_k=2).probs(ROW, [], ("top_k", "temperature"))
    assert err.value.field == "order"


@needs_mlx
def test_the_mlx_copies_carry_the_torch_pairs_weights(tiny):
    """The same pair: the MLX Llamas' logits equal the transformers Llamas' to float32 rounding."""
    import mlx.core as mx
    import numpy as np

    from simulator.loops.mlx_loop import mlx_llama

    ids = [0, 3, 2, 1, 3]
    for model in tiny:
        mine = np.array(mlx_llama(model)(mx.array([ids]))).astype(np.float64)
        theirs = model(torch.tensor([ids]))[0].detach().double().numpy()
        assert np.abs(mine - theirs).max() < 1e-5


@needs_mlx
@pytest.mark.parametrize("sampling", [{"top_k": 2}, {"top_p": 0.6}, {"min_p": 0.3}, {"temperature": 0.7},
                                      {"temperature": 1.4, "top_p": 0.6, "min_p": 0.1, "top_k": 2}])
def test_the_sampler_processes_as_make_sampler_and_as_the_mlx_order_reference(sampling, monkeypatch):
    """Two second implementations: make_sampler's own chain, whose draw (categorical_sampling) is replaced by a
    recorder, gives the very logits the enumerating sampler draws from; and their softmax is the MLX-order
    reference's row to float32 rounding."""
    import mlx.core as mx
    import mlx_lm.sample_utils as sample_utils
    import numpy as np

    from simulator.loops.mlx_loop import mlx_filters

    recorded = []
    monkeypatch.setattr(sample_utils, "categorical_sampling",
                        lambda logits, temp: recorded.append(logits * (1.0 / temp)) or mx.zeros((1,), mx.uint32))
    chosen = Sampling.from_dict(sampling)
    make = sample_utils.make_sampler(temp=chosen.temperature, top_p=chosen.top_p, min_p=chosen.min_p,
                                     top_k=chosen.top_k)
    gen = torch.Generator().manual_seed(3)
    for _ in range(10):
        logits = torch.randn(1, 6, generator=gen) * 2
        logprobs = mx.array(torch.log_softmax(logits, -1).numpy())
        make(logprobs)
        mine = np.array(mlx_filters(sampling)(logprobs))
        assert np.array_equal(np.array(recorded[-1]), mine)
        row = torch.from_numpy(mine[0]).double().softmax(-1)
        assert torch.allclose(row, chosen.probs(logits[0], [], MLX_ORDER), atol=1e-6)


@needs_mlx
def test_speculative_generate_step_is_lossless_in_mlx_order_and_lossy_in_transformers(tiny):
    """Where the orders differ (top-k 2 with top-p 0.5), MLX-LM's speculative loop is LOSSLESS against plain
    sampling in MLX's order, its default reference, and LOSSY against transformers' order by the two references'
    own TVD. The first token's gap, by hand from the target's first row: transformers keeps only its likeliest
    token (3), MLX keeps tokens 2 and 3 renormalised, a TVD of q(2) / (q(2) + q(3))."""
    target, draft = tiny
    loop, sampling = load_loop("mlx-lm", 1), {"top_k": 2, "top_p": 0.5}
    assert reference_of(loop) is plain_sampling_mlx_order
    cert = certify_loop(loop, reference_of(loop), target, draft, (0,), 2, sampling)
    assert cert.lossless and cert.tvd < 1e-6 and cert.off_support == 0, cert
    assert cert.tolerance == 1e-5 and "mlx_lm/generate.py" in cert.tolerance_reason
    assert cert.expected_passes < 2  # drafts accepted: the verdict weighs the acceptance
    control = certify_loop(loop, plain_sampling, target, draft, (0,), 2, sampling)
    assert not control.lossless
    refs = [loop_law(ref, target, draft, (0,), 2, sampling).law for ref in (plain_sampling_mlx_order, plain_sampling)]
    assert abs(control.tvd - law_distance(*refs, Fraction(0)).tvd) < 1e-6
    q = torch.softmax(target(torch.tensor([[0]]))[0, -1].detach().double(), -1)
    assert q.argmax() == 3 and q.argsort()[-2] == 2
    assert control.marginal_tvds[0] == pytest.approx(float(q[2] / (q[2] + q[3])), abs=1e-6)


@needs_mlx
def test_mlx_plain_generation_is_the_mlx_order_reference(tiny):
    """MLX-LM's own generate_step, every filter on and a temperature, against plain sampling in MLX's order: the
    reference is MLX's law, end to end."""
    target, draft = tiny
    sampling = {"temperature": 0.6, "top_p": 0.7, "min_p": 0.3, "top_k": 2}
    cert = certify_loop(load_loop("mlx-lm-plain", 1), plain_sampling_mlx_order, target, draft, (0,), 2, sampling)
    assert cert.lossless and cert.tvd < 1e-6, cert


@pytest.mark.slow
@needs_mlx
def test_speculative_repetition_penalty_forgets_the_prompt(tiny):
    """mlx-lm 0.32.2's speculative_generate_step starts the tokens its repetition penalty sees from the prompt's
    last token (prev_tokens), where generate_step penalises the whole prompt. After the prompt (3, 1), token 3 is
    penalised by plain generation and not by speculative decoding: LOSSY against MLX's own generate_step, its first
    token off by the TVD between the rows penalising {1} and {3, 1}. After the one-token prompt (1,) the two see the
    same tokens: LOSSLESS."""
    target, draft = tiny
    loop, plain = load_loop("mlx-lm", 1), load_loop("mlx-lm-plain", 1)
    sampling = {"repetition_penalty": 1.8, "top_k": 2}
    cert = certify_loop(loop, plain, target, draft, (3, 1), 2, sampling)
    assert not cert.lossless and cert.tvd > 0.01, cert
    logits, chosen = target(torch.tensor([[3, 1]]))[0, -1], Sampling.from_dict(sampling)
    forgot, whole = chosen.probs(logits, [1], MLX_ORDER), chosen.probs(logits, [3, 1], MLX_ORDER)
    assert cert.marginal_tvds[0] == pytest.approx(float((forgot - whole).abs().sum() / 2), abs=1e-6)
    assert not math.isclose(float(cert.marginal_tvds[0]), 0, abs_tol=1e-3)
    assert certify_loop(loop, plain, target, draft, (1,), 2, sampling).lossless
