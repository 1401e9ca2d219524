"""MLX-LM's generation loops as installed and unmodified: its speculative decoding
(``mlx_lm.generate.speculative_generate_step``, sample-and-match) and its plain generation (``generate_step``), on MLX
Llamas carrying the tiny torch pair's weights (:func:`mlx_llama`), with a sampler that applies MLX-LM's own filters
in ``make_sampler``'s order and draws the token through torch, where the loop certificate enumerates it
(:func:`mlx_sampler`; docs/loops.md, "mlx-lm")."""

from __future__ import annotations

from typing import Callable

from simulator.errors import InvalidParameterError
from simulator.loops.models import LoopModel
from simulator.loops.sampling import Sampling
from simulator.usercode import require


def mlx_llama(model: LoopModel):
    """An ``mlx_lm.models.llama.Model`` with the config and weights of ``model.hf`` (a transformers Llama), in
    float32; each forward pass counts as one of ``model``'s passes.

    Raises
    ------
    InvalidParameterError
        ``model`` has no transformers Llama behind it (a prefix table; field ``model``).
    """
    import mlx.core as mx
    from mlx_lm.models import llama

    hf = getattr(model, "hf", None)
    if hf is None:
        raise InvalidParameterError("model", "the mlx-lm loops copy the tiny Llamas' weights into MLX: use --model "
                                             "tiny-llama")
    c = hf.config
    args = llama.ModelArgs(model_type="llama", hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
                           intermediate_size=c.intermediate_size, num_attention_heads=c.num_attention_heads,
                           num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim,
                           rms_norm_eps=c.rms_norm_eps, vocab_size=c.vocab_size,
                           rope_theta=c.rope_parameters["rope_theta"], tie_word_embeddings=c.tie_word_embeddings,
                           max_position_embeddings=c.max_position_embeddings)

    class Counted(llama.Model):
        def __call__(self, *given, **options):
            model.passes += 1
            return super().__call__(*given, **options)

    mlx = Counted(args)
    # numpy(force=True) of the parameters themselves: no torch op returns a tensor, so the certificate's precision
    # record starts at the sampler, where MLX's float32 rows enter torch
    weights = {name: mx.array(w.numpy(force=True)) for name, w in hf.state_dict(keep_vars=True).items()}
    mlx.load_weights(list(mlx.sanitize(weights).items()), strict=True)
    return mlx


def mlx_filters(sampling: dict) -> Callable:
    """``make_sampler``'s processing of a row, MLX-LM's own functions in its order (mlx-lm 0.32.2,
    mlx_lm/sample_utils.py lines 55-71): ``apply_top_p`` when ``0 < top_p < 1``, ``apply_min_p`` when ``min_p`` is
    not 0, ``apply_top_k`` when ``top_k > 0`` (MLX refuses a ``top_k`` of the vocabulary or more), then the
    logits times ``1 / temperature`` as ``categorical_sampling`` scales them (line 273). Log-probabilities ``[B, V]``
    in, the logits ``mx.random.categorical`` would receive out (MLX arrays, float32)."""
    from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

    chosen = Sampling.from_dict(sampling)
    cuts = []
    if 0 < chosen.top_p < 1.0:
        cuts.append(lambda x: apply_top_p(x, chosen.top_p))
    if chosen.min_p != 0.0:
        cuts.append(lambda x: apply_min_p(x, chosen.min_p))
    if chosen.top_k > 0:
        cuts.append(lambda x: apply_top_k(x, chosen.top_k))

    def process(logprobs):
        for cut in cuts:
            logprobs = cut(logprobs)
        return logprobs * (1.0 / chosen.temperature)

    return process


def mlx_sampler(sampling: dict) -> Callable:
    """A sampler for MLX-LM's ``generate_step`` and ``speculative_generate_step``: log-probabilities ``[B, V]`` in,
    one token per row out (``uint32 [B]``). The row is processed as ``make_sampler``'s sampler processes it
    (:func:`mlx_filters`); only the draw differs: ``torch.multinomial`` of the softmax, where
    ``mx.random.categorical`` races Gumbel noise, the same law. The row enters torch as MLX's float32 values, so the
    certificate is judged at float32's tolerance."""
    import mlx.core as mx
    import numpy as np
    import torch

    process = mlx_filters(sampling)

    def sampler(logprobs):
        logits = torch.tensor(np.array(process(logprobs)), dtype=torch.float32)
        tokens = torch.multinomial(logits.double().softmax(-1).reshape(-1, logits.shape[-1]), 1)
        return mx.array(tokens.reshape(-1).tolist(), dtype=mx.uint32)

    return sampler


def mlx_processors(sampling: dict) -> list | None:
    """MLX-LM's logits processors for the sampling dict (``make_logits_processors``): its repetition penalty, over
    the last 20 tokens (MLX-LM's default window), where one is on; else ``None``."""
    from mlx_lm.sample_utils import make_logits_processors

    penalty = Sampling.from_dict(sampling).repetition_penalty
    return make_logits_processors(repetition_penalty=penalty) if penalty != 1.0 else None


def mlx_lm_speculative(depth: int) -> Callable:
    """MLX-LM's speculative decoding, unmodified: ``speculative_generate_step(prompt, target, draft,
    num_draft_tokens=depth, max_tokens=N, sampler=mlx_sampler(sampling), logits_processors=...)``. Sample-and-match:
    the target samples a token at every drafted position and the drafts are kept while they equal its samples."""
    require("mlx_lm", "--loop mlx-lm", "loop")

    def loop(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
        import mlx.core as mx
        from mlx_lm.generate import speculative_generate_step

        steps = speculative_generate_step(mx.array(input_ids[0].tolist(), dtype=mx.uint32), mlx_llama(target),
                                          mlx_llama(draft), num_draft_tokens=depth, max_tokens=max_new_tokens,
                                          sampler=mlx_sampler(sampling), logits_processors=mlx_processors(sampling))
        return [int(token) for token, _, _ in steps]

    loop.loop_name = "mlx-lm"  # type: ignore[attr-defined]
    return loop


def mlx_lm_plain() -> Callable:
    """MLX-LM's plain generation, unmodified: ``generate_step(prompt, target, max_tokens=N,
    sampler=mlx_sampler(sampling), logits_processors=...)``, one token a target pass (the draft unused). It samples
    one token past the ``N``-th before stopping, a draw that changes no returned token."""
    require("mlx_lm", "--loop mlx-lm-plain", "loop")

    def loop(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
        import mlx.core as mx
        from mlx_lm.generate import generate_step

        steps = generate_step(mx.array(input_ids[0].tolist(), dtype=mx.uint32), mlx_llama(target),
                              max_tokens=max_new_tokens, sampler=mlx_sampler(sampling),
                              logits_processors=mlx_processors(sampling))
        return [int(token) for token, _ in steps]

    loop.loop_name = "mlx-lm-plain"  # type: ignore[attr-defined]
    return loop
