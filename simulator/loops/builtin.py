"""The loops specproof knows by name (:data:`LOOPS`): transformers' assisted generation, prompt lookup, DFlash, the
Gemma 4 assistant and multi-token prediction as installed, MLX-LM's speculative decoding, all called unmodified, and
plain sampling, the reference every loop is held to (:func:`plain_sampling`; MLX-LM's order: ``plain-mlx``)."""

from __future__ import annotations

from typing import Callable

from simulator.errors import InvalidParameterError
from simulator.loops.models import quiet_transformers
from simulator.loops.sampling import MLX_ORDER, TRANSFORMERS_ORDER, Sampling
from simulator.verifiers.registry import load_callable

#: the shipped loops by name: what each runs (its draft depth is ``--depth``)
LOOPS = {
    "transformers-assisted": "transformers' generate(assistant_model=draft, do_sample=True), the draft length "
                             "fixed at the depth (num_assistant_tokens, constant schedule, no confidence stop)",
    "transformers-prompt-lookup": "transformers' generate(prompt_lookup_num_tokens=depth, do_sample=True): "
                                  "deterministic drafts matched in the prompt and text so far, no draft model",
    "transformers-dflash": "transformers' generate(assistant_model=<a tiny DFlash draft>, speculation_type="
                           "\"dflash\", do_sample=True): depth tokens drafted in one pass of the draft, which reads "
                           "the target's hidden states",
    "transformers-gemma4-assistant": "transformers' generate(assistant_model=<the Gemma 4 assistant>, do_sample=True)"
                                     " on --model tiny-gemma4: depth tokens drafted from one position, from the "
                                     "target's shared key-value states",
    "transformers-mtp": "transformers' generate(use_mtp=True, do_sample=True) on --model tiny-deepseek-v3: one token "
                        "a round drafted by the target's own MTP layer",
    "plain": "plain sampling from the target, one token a pass (the reference)",
    "mlx-lm": "MLX-LM's speculative_generate_step (sample-and-match, num_draft_tokens=depth) on MLX copies of the "
              "tiny Llamas, its sampler's filters in MLX's order; held to plain-mlx by default",
    "mlx-lm-plain": "MLX-LM's generate_step on the MLX copy of the target, the same sampler: MLX's own plain sampling",
    "plain-mlx": "plain sampling from the target in MLX-LM's processing order (top-p, min-p, top-k, then "
                 "temperature): the mlx-lm loops' reference",
}


def plain_sampling(target: Callable, draft: Callable, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
    """Plain sampling from ``target``, one token a forward pass, each from :meth:`Sampling.probs` of the last row
    (``draft`` unused): the law every lossless loop must have. Draws with ``torch.multinomial``."""
    return _plain(target, input_ids, max_new_tokens, sampling, TRANSFORMERS_ORDER)


def plain_sampling_mlx_order(target: Callable, draft: Callable, input_ids, *, max_new_tokens: int,
                             sampling: dict) -> list[int]:
    """:func:`plain_sampling` with the row processed in MLX-LM's order (:data:`MLX_ORDER`): the law MLX-LM's own
    sampler gives, the mlx-lm loops' reference."""
    return _plain(target, input_ids, max_new_tokens, sampling, MLX_ORDER)


def _plain(target: Callable, input_ids, max_new_tokens: int, sampling: dict, order: tuple[str, ...]) -> list[int]:
    import torch

    chosen = Sampling.from_dict(sampling)
    ids, out = input_ids, []
    for _ in range(max_new_tokens):
        row = chosen.probs(target(ids)[0, -1], ids[0].tolist(), order)
        token = int(torch.multinomial(row, 1))
        out.append(token)
        ids = torch.cat([ids, torch.tensor([[token]], dtype=ids.dtype)], dim=1)
    return out


plain_sampling.loop_name = "plain"  # type: ignore[attr-defined]
plain_sampling_mlx_order.loop_name = "plain-mlx"  # type: ignore[attr-defined]


def reference_of(loop: Callable) -> Callable:
    """The reference a loop is held to unless told otherwise: its ``reference`` attribute (a shipped loop whose
    engine processes rows in another order carries its own), else :func:`plain_sampling`."""
    return getattr(loop, "reference", plain_sampling)


def _hf(model, role: str):
    hf = getattr(model, "hf", None)
    if hf is None:
        raise InvalidParameterError("model", f"transformers' loops call generate() on the {role}'s transformers "
                                             "model: use --model tiny-llama (or the pair the loop names)")
    return hf


def _generate_options(sampling: dict) -> dict:
    """``generate``'s sampling arguments for a sampling dict: every parameter given, off where absent (top-k 0,
    which transformers reads as no cut; its own default is 50)."""
    chosen = Sampling.from_dict(sampling)
    return {"do_sample": True, "temperature": chosen.temperature, "top_k": chosen.top_k, "top_p": chosen.top_p,
            "min_p": chosen.min_p or None, "repetition_penalty": chosen.repetition_penalty}


def transformers_assisted(depth: int) -> Callable:
    """transformers' assisted generation, as installed: ``target.generate(input_ids, assistant_model=draft,
    do_sample=True, ...)`` with ``num_assistant_tokens=depth``, ``num_assistant_tokens_schedule="constant"`` and
    ``assistant_confidence_threshold=0``, so that every round drafts ``depth`` tokens."""

    def loop(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
        import torch

        with quiet_transformers():
            out = _hf(target, "target").generate(
                input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=_hf(draft, "draft"),
                max_new_tokens=max_new_tokens, min_new_tokens=0, num_assistant_tokens=depth,
                num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0,
                **_generate_options(sampling))
        return out[0, input_ids.shape[1]:].tolist()

    loop.loop_name = "transformers-assisted"  # type: ignore[attr-defined]
    return loop


def transformers_prompt_lookup(depth: int) -> Callable:
    """transformers' prompt lookup decoding, as installed: ``target.generate(input_ids,
    prompt_lookup_num_tokens=depth, do_sample=True, ...)``; the draft model is not used."""

    def loop(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
        import torch

        with quiet_transformers():
            out = _hf(target, "target").generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                                 prompt_lookup_num_tokens=depth, max_new_tokens=max_new_tokens,
                                                 min_new_tokens=0, **_generate_options(sampling))
        return out[0, input_ids.shape[1]:].tolist()

    loop.loop_name = "transformers-prompt-lookup"  # type: ignore[attr-defined]
    return loop


def transformers_dflash(depth: int) -> Callable:
    """transformers' DFlash speculative decoding, as installed (or as ``--import-path`` puts first):
    ``target.generate(input_ids, assistant_model=assistant, speculation_type="dflash", do_sample=True, ...)`` with
    ``assistant`` a tiny ``MuseGlimmerAssistantModel`` of block size ``depth + 1``, so that every round drafts
    ``depth`` tokens, weights from the draft's seed (:func:`simulator.loops.models.tiny_dflash_assistant`). The
    assistant is built by the loop's ``prepare(target, draft)``, before the loop runs."""
    assistants: dict = {}

    def prepare(target, draft) -> None:
        from simulator.loops.tiny_pairs import tiny_dflash_assistant

        _hf(target, "target")
        assistants[target] = tiny_dflash_assistant(target, depth + 1, draft.seed)

    def loop(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
        import torch

        if target not in assistants:
            raise InvalidParameterError("loop", "transformers-dflash builds its draft model before it runs: call "
                                                "its prepare(target, draft) first (certify_loop does)")
        with quiet_transformers():
            out = _hf(target, "target").generate(
                input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=assistants[target],
                speculation_type="dflash", max_new_tokens=max_new_tokens, min_new_tokens=0,
                **_generate_options(sampling))
        return out[0, input_ids.shape[1]:].tolist()

    loop.loop_name = "transformers-dflash"  # type: ignore[attr-defined]
    loop.prepare = prepare  # type: ignore[attr-defined]
    return loop


def transformers_gemma4_assistant(depth: int) -> Callable:
    """transformers' Gemma 4 assistant, as installed: ``target.generate(input_ids, assistant_model=draft.hf,
    do_sample=True, ...)`` on ``--model tiny-gemma4``, which drafts with ``SinglePositionMultiTokenCandidateGenerator``
    the assistant's ``num_assistant_tokens`` tokens a round, set to ``depth`` by the loop's ``prepare``."""

    def prepare(target, draft) -> None:
        _hf(draft, "draft").generation_config.num_assistant_tokens = depth

    def loop(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
        import torch

        with quiet_transformers():
            out = _hf(target, "target").generate(
                input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=_hf(draft, "draft"),
                max_new_tokens=max_new_tokens, min_new_tokens=0, **_generate_options(sampling))
        return out[0, input_ids.shape[1]:].tolist()

    loop.loop_name = "transformers-gemma4-assistant"  # type: ignore[attr-defined]
    loop.prepare = prepare  # type: ignore[attr-defined]
    return loop


def transformers_mtp(depth: int) -> Callable:
    """transformers' multi-token prediction, as installed: ``target.generate(input_ids, use_mtp=True,
    do_sample=True, ...)`` on ``--model tiny-deepseek-v3``: ``MTPCandidateGenerator`` drafts one token a round with
    the target's one MTP layer (``depth`` does not apply: the layers set the draft length)."""

    def loop(target, draft, input_ids, *, max_new_tokens: int, sampling: dict) -> list[int]:
        import torch

        with quiet_transformers():
            out = _hf(target, "target").generate(input_ids, attention_mask=torch.ones_like(input_ids), use_mtp=True,
                                                 max_new_tokens=max_new_tokens, min_new_tokens=0,
                                                 **_generate_options(sampling))
        return out[0, input_ids.shape[1]:].tolist()

    loop.loop_name = "transformers-mtp"  # type: ignore[attr-defined]
    return loop


def load_loop(name: str, depth: int, field: str = "loop") -> Callable:
    """A shipped loop by name (:data:`LOOPS`), built for draft depth ``depth``, or ``module:function`` imported.

    Raises
    ------
    InvalidParameterError
        An unknown name, or a module or function that cannot be imported (naming ``field``).
    """
    shipped = {"transformers-assisted": transformers_assisted, "transformers-prompt-lookup": transformers_prompt_lookup,
               "transformers-dflash": transformers_dflash, "transformers-gemma4-assistant": transformers_gemma4_assistant,
               "transformers-mtp": transformers_mtp}
    if name in shipped:
        return shipped[name](depth)
    if name == "plain":
        return plain_sampling
    if name == "plain-mlx":
        return plain_sampling_mlx_order
    if name in ("mlx-lm", "mlx-lm-plain"):
        from simulator.loops.mlx_loop import mlx_lm_plain, mlx_lm_speculative

        built = mlx_lm_speculative(depth) if name == "mlx-lm" else mlx_lm_plain()
        built.reference = plain_sampling_mlx_order  # type: ignore[attr-defined]
        return built
    if ":" not in name:
        raise InvalidParameterError(field, f"unknown loop {name!r}: one of {', '.join(LOOPS)}, or module:function")
    return load_callable(name, field)
