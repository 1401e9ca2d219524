"""The tiny models of transformers' other speculative decoders, each built seeded at the tiny Llamas' sizes: DFlash's
draft for the tiny Llama target (:func:`tiny_dflash_assistant`), a Gemma 4 target with its Gemma 4 assistant
(:func:`tiny_gemma4_pair`) and a DeepSeek-V3 with a multi-token-prediction layer (:func:`tiny_deepseek_v3_pair`);
:data:`SEEDED_PAIRS` names every seeded pair ``--model`` builds."""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Callable

from simulator.errors import InvalidParameterError
from simulator.loops.models import (TINY_INIT_RANGE, TINY_SIZES, LoopModel, check_vocab, quiet_transformers, seeded,
                                    tiny_llama_pair)

#: no special token: a loop generates exactly the tokens asked
_NO_SPECIAL_TOKENS = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}


def tiny_dflash_assistant(target: LoopModel, block_size: int, seed: int):
    """A DFlash draft for the tiny Llama ``target``: a one-layer transformers ``MuseGlimmerAssistantModel`` (the
    class ``generate(speculation_type="dflash")`` drafts with) of the target's hidden size, reading the hidden
    states of its one layer (``target_layer_ids=[0]``), drafting ``block_size − 1`` tokens a round, weights from
    torch seed ``seed`` at the tiny Llamas' scale, in float32. DFlash embeds a mask token with the target's own
    embedding; a tiny vocabulary has no spare id, so the mask is the last token, ``vocab − 1``."""
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

    config = MuseGlimmerAssistantConfig(vocab_size=target.vocab, **TINY_SIZES, head_dim=8, max_position_embeddings=64,
                                        block_size=block_size, mask_token_id=target.vocab - 1, target_layer_ids=[0],
                                        layer_types=["full_attention"], initializer_range=TINY_INIT_RANGE,
                                        **_NO_SPECIAL_TOKENS)
    return seeded(lambda: MuseGlimmerAssistantModel(config).eval(), seed)


def _no_logits(what: str) -> Callable:
    def logits(input_ids):
        raise InvalidParameterError("model", f"{what}: pass it to the target's generate, not token ids")

    return logits


def tiny_gemma4_pair(vocab: int, seed: int) -> tuple[LoopModel, LoopModel]:
    """``(target, draft)``: a two-layer ``Gemma4ForCausalLM`` (one sliding-window layer, one full-attention layer:
    its assistant reads the key-value states of both kinds) and a ``Gemma4AssistantForCausalLM`` of the same sizes
    drafting from them (``generate(assistant_model=draft.hf)`` picks transformers'
    ``SinglePositionMultiTokenCandidateGenerator``), hidden size 16, weights from torch seeds ``seed`` and
    ``seed + 1``, float32. The draft is no causal LM of its own: calling it on token ids raises."""
    from transformers import (Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM, Gemma4TextConfig,
                              GenerationConfig)

    check_vocab(vocab, "tiny-gemma4")

    def text_config():
        return Gemma4TextConfig(vocab_size=vocab, **{**TINY_SIZES, "num_hidden_layers": 2, "num_key_value_heads": 1},
                                head_dim=8, max_position_embeddings=64, sliding_window=8,
                                layer_types=["sliding_attention", "full_attention"], vocab_size_per_layer_input=0,
                                hidden_size_per_layer_input=0, initializer_range=TINY_INIT_RANGE,
                                tie_word_embeddings=False, **_NO_SPECIAL_TOKENS)

    target = seeded(lambda: Gemma4ForCausalLM(text_config()).eval(), seed)
    target.generation_config = GenerationConfig(**_NO_SPECIAL_TOKENS)
    config = Gemma4AssistantConfig(text_config=text_config(), backbone_hidden_size=TINY_SIZES["hidden_size"],
                                   tie_word_embeddings=False)
    draft = seeded(lambda: Gemma4AssistantForCausalLM(config).eval(), seed + 1)
    draft.generation_config = GenerationConfig(**_NO_SPECIAL_TOKENS)
    return (LoopModel(lambda ids: target(ids).logits, vocab, hf=target, name=f"tiny Gemma 4 (seed {seed})",
                      seed=seed),
            LoopModel(_no_logits("the Gemma 4 assistant drafts from the target's shared key-value states"), vocab,
                      hf=draft, name=f"tiny Gemma 4 assistant (seed {seed + 1})", seed=seed + 1))


def tiny_deepseek_v3_pair(vocab: int, seed: int) -> tuple[LoopModel, LoopModel]:
    """``(target, draft)``: a one-layer ``DeepseekV3ForCausalLM`` (a dense layer, multi-head latent attention) with
    one multi-token-prediction layer (``num_mtp_layers=1``; ``generate(use_mtp=True)`` picks transformers'
    ``MTPCandidateGenerator``), hidden size 16, weights from torch seed ``seed``, the MTP layer's from ``seed + 1``,
    float32. The draft stands for the MTP layer and is no causal LM of its own: calling it raises.

    transformers' ``MtpModel.from_pretrained`` reads the MTP layer from the checkpoint folder of the target (its
    ``name_or_path``) at every ``generate``. So the pair is written to a temporary folder, in DeepSeek-V3's own
    layout (the MTP layer as ``model.layers.<num_hidden_layers>``), and the target loaded from it; the folder goes
    when the model does. The class names the MTP weights by the full model's layer count (``model\\.layers\\.61``);
    the tiny model's count, 1, is set on the instance.

    Raises
    ------
    InvalidParameterError
        The transformers imported loads other weights for the MTP layer than those written (field ``model``).
    """
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, GenerationConfig
    from transformers.modeling_layers import MtpModel

    check_vocab(vocab, "tiny-deepseek-v3")
    config = DeepseekV3Config(vocab_size=vocab, **TINY_SIZES, moe_intermediate_size=8, n_routed_experts=2,
                              num_experts_per_tok=1, n_group=1, topk_group=1, first_k_dense_replace=1,
                              q_lora_rank=None, kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8,
                              max_position_embeddings=64, initializer_range=TINY_INIT_RANGE, tie_word_embeddings=False,
                              num_mtp_layers=1, **_NO_SPECIAL_TOKENS)
    built = seeded(lambda: DeepseekV3ForCausalLM(config).eval(), seed)
    mtp = seeded(lambda: _drawn(MtpModel(built, 1)), seed + 1)
    folder = Path(tempfile.mkdtemp(prefix="specproof-mtp-"))
    _write_checkpoint(built, mtp, folder, config.num_hidden_layers)
    with quiet_transformers():
        target = DeepseekV3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    weakref.finalize(target, shutil.rmtree, folder, True)
    target._keys_to_ignore_on_load_unexpected = [rf"model\.layers\.{config.num_hidden_layers}\..*"]
    target.generation_config = GenerationConfig(**_NO_SPECIAL_TOKENS)
    with quiet_transformers():
        loaded = MtpModel.from_pretrained(target, device_map={"": torch.device("cpu")}).state_dict()
    unloaded = [name for name, weight in mtp.items() if name in loaded and not torch.equal(loaded[name], weight)]
    if unloaded:
        import transformers

        raise InvalidParameterError("model", f"transformers {transformers.__version__} left the tiny MTP layer's "
                                             f"{', '.join(unloaded)} other than written (unloaded memory?): its MTP "
                                             "drafting cannot be certified on these weights; run again")
    return (LoopModel(lambda ids: target(ids).logits, vocab, hf=target, name=f"tiny DeepSeek-V3 (seed {seed})",
                      seed=seed),
            LoopModel(_no_logits("the MTP layer drafts from the target's last hidden states"), vocab,
                      name=f"tiny DeepSeek-V3's MTP layer (seed {seed + 1})", seed=seed + 1))


def _drawn(mtp) -> dict:
    """The MTP layer's weights, each drawn here: norms 1, the router's correction bias 0, every other weight
    normal with standard deviation :data:`TINY_INIT_RANGE`. transformers' generic ``MtpModel`` initialises the
    layers it knows and leaves the MoE experts' fused weights as allocated, memory that differs between runs."""
    import torch

    weights = {}
    with torch.no_grad():
        for name, weight in mtp.state_dict().items():
            if name.startswith(("embed_tokens.", "shared_head.")):
                continue  # the target's own
            if "norm" in name.rsplit(".", 2)[-2]:
                weights[name] = torch.ones_like(weight)
            elif name.endswith("e_score_correction_bias"):
                weights[name] = torch.zeros_like(weight)
            else:
                weights[name] = torch.randn_like(weight) * TINY_INIT_RANGE
    return weights


def _write_checkpoint(model, mtp: dict, folder: Path, layers: int) -> None:
    """``model`` saved in ``folder`` with the MTP layer's weights ``mtp`` beside its own, named as DeepSeek-V3's
    checkpoints name them: ``model.layers.<layers>.…``, the post norm as ``shared_head.norm``."""
    from safetensors.torch import load_file, save_file

    with quiet_transformers():
        model.save_pretrained(folder)
    weights = load_file(folder / "model.safetensors")
    for name, weight in mtp.items():
        stored = name.replace("layers.0.mtp_block.", f"model.layers.{layers}.").replace("layers.0.",
                                                                                       f"model.layers.{layers}.")
        weights[stored.replace(".post_norm.", ".shared_head.norm.")] = weight.contiguous()
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


#: the seeded tiny pairs by ``--model`` name: ``build(vocab, seed) -> (target, draft)``
SEEDED_PAIRS: dict[str, Callable[[int, int], tuple[LoopModel, LoopModel]]] = {
    "tiny-llama": tiny_llama_pair, "tiny-gemma4": tiny_gemma4_pair, "tiny-deepseek-v3": tiny_deepseek_v3_pair}
