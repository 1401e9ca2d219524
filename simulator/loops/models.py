"""The model pairs a generation loop is certified on: two tiny transformers Llamas with seeded weights
(:func:`tiny_llama_pair`; the other seeded pairs are in :mod:`simulator.loops.tiny_pairs`) and a causal LM whose
next-token rows are an explicit table of the prefix (:func:`prefix_table_pair`), each side a :class:`LoopModel` that
counts its forward passes."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Iterator

from simulator.errors import InvalidParameterError
from simulator.models import TableModel

#: the model pairs a loop runs on, by ``--model`` name (certify --loop only)
LOOP_MODELS = {
    "tiny-llama": "two one-layer transformers Llamas of a few kilobytes, seeded weights (--vocab 2..8, --seed), "
                  "certify --loop only",
    "prefix-table": "a causal LM whose rows are --model table's JSON of the prefix (--table), certify --loop only",
    "tiny-gemma4": "a two-layer transformers Gemma 4 and its Gemma 4 assistant (loop transformers-gemma4-assistant), "
                   "seeded weights (--vocab 2..8, --seed), certify --loop only",
    "tiny-deepseek-v3": "a one-layer transformers DeepSeek-V3 with one MTP layer (loop transformers-mtp), seeded "
                        "weights (--vocab 2..8, --seed), certify --loop only",
}
#: the vocabularies the seeded tiny pairs build: large enough for top-k and top-p to cut, small enough to enumerate
TINY_VOCABS = range(2, 9)
#: the tiny models' sizes: one layer of hidden size 16, two heads
TINY_SIZES = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
              "num_key_value_heads": 2}
#: the initial weights' scale: rows far from uniform but not peaked (at V = 4, seed 0 the target's first row is
#: 0.15, 0.24, 0.28, 0.33), so that cuts and rejections matter and no two logits of a row tie in float32
TINY_INIT_RANGE = 0.1


class LoopModel:
    """A causal LM as a loop sees it: ``model(input_ids [1, T]) -> logits [1, T, V]``. ``hf`` is the transformers
    model behind it, where there is one (the shipped loops call ``generate`` on it), and ``seed`` the torch seed of
    its weights; ``passes`` counts the forward passes since it was last reset, ``hf``'s own included."""

    def __init__(self, logits: Callable, vocab: int, hf=None, name: str = "", seed: int | None = None) -> None:
        self._logits, self.vocab, self.hf, self.name, self.seed = logits, vocab, hf, name, seed
        self.passes = 0
        if hf is not None:
            hf.register_forward_pre_hook(lambda module, args, kwargs=None: self._count(), with_kwargs=False)

    def _count(self) -> None:
        self.passes += 1

    def __call__(self, input_ids):
        if self.hf is None:
            self._count()
        return self._logits(input_ids)


def tiny_llama_pair(vocab: int, seed: int) -> tuple[LoopModel, LoopModel]:
    """``(target, draft)``: two one-layer ``LlamaForCausalLM`` of a few kilobytes, vocabulary ``vocab``, weights
    drawn from torch seeds ``seed`` (target) and ``seed + 1`` (draft), in float32, no end-of-sequence token (a
    loop generates exactly the tokens asked).

    Raises
    ------
    InvalidParameterError
        ``vocab`` outside :data:`TINY_VOCABS` (field ``vocab``).
    """
    check_vocab(vocab, "tiny-llama")
    return _tiny_llama(vocab, seed, "target"), _tiny_llama(vocab, seed + 1, "draft")


def check_vocab(vocab: int, kind: str) -> None:
    """Refuse a vocabulary outside :data:`TINY_VOCABS` for ``--model kind`` (field ``vocab``)."""
    if vocab not in TINY_VOCABS:
        raise InvalidParameterError("vocab", f"{kind} builds vocabularies {TINY_VOCABS.start}.."
                                             f"{TINY_VOCABS.stop - 1} (every continuation is enumerated), got {vocab}")


def _tiny_llama(vocab: int, seed: int, name: str) -> LoopModel:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, **TINY_SIZES, max_position_embeddings=64,
                         initializer_range=TINY_INIT_RANGE, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None, tie_word_embeddings=False)
    model = seeded(lambda: LlamaForCausalLM(config).eval(), seed)
    model.generation_config = GenerationConfig(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LoopModel(lambda ids: model(ids).logits, vocab, hf=model, name=f"tiny-llama {name} (seed {seed})",
                     seed=seed)


def seeded(build: Callable, seed: int):
    """``build()`` with its weights drawn from torch seed ``seed``; the caller's torch seed is left as it was."""
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build()


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' warnings and progress bars off in the block (its assisted path warns of its own internal
    calls; a model loaded from a folder shows a bar)."""
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()


def prefix_table_pair(table: TableModel, prompt_length: int) -> tuple[LoopModel, LoopModel]:
    """``(target, draft)`` whose next-token rows are the table's: after a prompt of ``prompt_length`` tokens, the
    row at each position is the table's row of the tokens generated so far (``q`` for the target, ``p`` for the
    draft; ``--model table``'s JSON, docs/models.md), as logits ``log(row)`` in float64 (``-inf`` where the row is
    0). Rows inside the prompt, which no loop samples from, are uniform."""
    return (LoopModel(_table_logits(table.q, table.vocab, prompt_length), table.vocab, name="prefix table q"),
            LoopModel(_table_logits(table.p, table.vocab, prompt_length), table.vocab, name="prefix table p"))


def _table_logits(row: Callable, vocab: int, prompt_length: int) -> Callable:
    def logits(input_ids):
        import torch

        tokens = [int(t) for t in input_ids[0]]
        out = torch.zeros(1, len(tokens), vocab, dtype=torch.float64)
        for position in range(prompt_length - 1, len(tokens)):
            out[0, position] = torch.tensor([math.log(float(w)) if w > 0 else -math.inf
                                             for w in row(tuple(tokens[prompt_length:position + 1]))],
                                            dtype=torch.float64)
        return out

    return logits
