"""Real causal-LM pairs (transformers) for every engine (docs/torch-path.md, "Real model pairs"): processing applied
once (:class:`Processing`), loading (:func:`load_causal_lm`, :func:`self_draft`), the pair scoring a whole tree
in one pass (:class:`CausalLMPair`), and the mismatched-processing control (:class:`ReprocessedDraft`)."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import torch

from simulator.devices import usable_device
from simulator.drafting import Draft, Drafter
from simulator.errors import InvalidParameterError
from simulator.models import Context, ModelView
from simulator.randomness import Randomness
from simulator.real.kv_cache import CachedLM
from simulator.real.pruned_head import prune_head, read_head_tokens
from simulator.real.trained_draft import RECIPES, trained_directory
from simulator.trees import DraftTree


@dataclass(frozen=True)
class Processing:
    """``softmax(logits / temperature)`` restricted to the ``top_k`` most likely tokens (0: all) and to the
    smallest most-likely set of mass ≥ ``top_p``, renormalised."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise InvalidParameterError("temperature", f"must be positive, got {self.temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise InvalidParameterError("top_k", f"must be an integer ≥ 0, got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise InvalidParameterError("top_p", f"must lie in (0, 1], got {self.top_p!r}")

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits.double() / self.temperature, dim=-1)
        if not self.top_k and self.top_p == 1:
            return probs
        keep = torch.ones_like(probs, dtype=torch.bool)
        order = torch.argsort(probs, dim=-1, descending=True, stable=True)
        ranked = probs.gather(-1, order)
        if self.top_k:
            keep_ranked = torch.arange(probs.shape[-1], device=probs.device) < self.top_k
            keep = keep & torch.zeros_like(keep).scatter(-1, order, keep_ranked.expand_as(order))
        if self.top_p < 1:
            before = torch.cumsum(ranked, dim=-1) - ranked  # mass ranked above each token
            keep = keep & torch.zeros_like(keep).scatter(-1, order, before < self.top_p)
        kept = torch.where(keep, probs, torch.zeros_like(probs))
        return kept / kept.sum(dim=-1, keepdim=True)


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' own progress bars off in the block ("Loading weights", the GGUF reader's "Converting and
    de-quantizing"): our loads are short, and their bars would clutter standard error between specproof's."""
    from functools import partial

    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    was_on, gguf_bar = hf_logging.is_progress_bar_enabled(), gguf_utils.tqdm
    hf_logging.disable_progress_bar()
    gguf_utils.tqdm = partial(gguf_bar, disable=True)  # the GGUF reader uses tqdm directly, not transformers'
    try:
        yield
    finally:
        gguf_utils.tqdm = gguf_bar
        if was_on:
            hf_logging.enable_progress_bar()


def load_causal_lm(source: str, dtype: torch.dtype = torch.float64, field: str = "model", device: str = "cpu",
                   cache_dir: str | None = None):
    """A causal LM in evaluation mode on ``device`` (``cpu``, ``cuda``, ``cuda:1``), from ``source``: a local
    directory saved by ``save_pretrained``, a ``.gguf`` file, or a name :mod:`simulator.real.fetch` knows
    (``smollm2``). A GGUF file is converted once into ``cache_dir`` (:func:`model_directory`). Nothing comes from a
    model hub. A source that is missing or that transformers cannot load raises :class:`InvalidParameterError` on
    ``field``; a device torch cannot use raises it on ``device``. A trained draft's folder (a name of
    :data:`~simulator.real.trained_draft.RECIPES`, or any folder with a ``head_tokens.json``) loads with its
    pruned head (:func:`~simulator.real.pruned_head.prune_head`)."""
    from transformers import AutoModelForCausalLM

    folder = model_directory(source, field, cache_dir)
    on = usable_device(device)
    try:
        with quiet_transformers():
            model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=dtype)
    except (OSError, ValueError) as err:
        raise InvalidParameterError(field, f"cannot load a causal LM from {source}: {err}") from None
    kept = read_head_tokens(folder, model.config.vocab_size)
    if kept is not None:
        prune_head(model, kept)
    return model.to(on).eval()


def model_directory(source: str, field: str = "model", cache_dir: str | None = None) -> Path:
    """The ``save_pretrained`` directory behind ``source`` (:func:`load_causal_lm`). A fetched name is fetched
    first; a ``.gguf`` file is loaded once with transformers' GGUF reader (which dequantises to float32, about
    30 s for SmolLM2-135M on 2 cores) and saved with its tokenizer under ``<cache>/converted/<sha256>``, which
    later loads take in about 2 s."""
    from simulator.real.fetch import ARTIFACTS, cache_dir as resolve_cache, fetch

    if source in RECIPES:
        return trained_directory(source, resolve_cache(cache_dir), field)
    if source in ARTIFACTS:
        source = str(fetch(source, cache_dir))
    path = Path(source)
    if path.is_file() and path.suffix == ".gguf":
        return _converted(path, resolve_cache(cache_dir), field)
    if not path.is_dir():
        raise InvalidParameterError(field, f"{source} is neither a model directory, a .gguf file nor a known name "
                                           f"({', '.join([*ARTIFACTS, *RECIPES])})")
    if not (path / "config.json").is_file():
        raise InvalidParameterError(field, f"{source} holds no config.json: not a saved causal LM "
                                           "(save one with model.save_pretrained(DIR))")
    return path


def _converted(gguf: Path, cache: Path, field: str) -> Path:
    """``gguf`` saved as a transformers directory (float32 weights and the tokenizer) under ``cache``, keyed by
    the file's SHA-256; written to a temporary folder and renamed, so an interrupted conversion leaves nothing."""
    import hashlib
    import shutil
    import tempfile

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from simulator.usercode import require

    with open(gguf, "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest() if hasattr(hashlib, "file_digest") else \
            hashlib.sha256(handle.read()).hexdigest()
    target = cache / "converted" / digest[:16]
    if (target / "config.json").is_file():
        return target
    require("gguf", f"loading {gguf.name}", "real")
    require("accelerate", f"loading {gguf.name}", "real")
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=".converting-"))
    try:
        try:
            with quiet_transformers():
                model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
                tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        except (OSError, ValueError) as err:
            raise InvalidParameterError(field, f"transformers cannot read {gguf}: {err}") from None
        # The weights are dequantised already; without these marks save_pretrained refuses a "quantized" model.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


#: the chat template used where a tokenizer has none: ChatML, the format SmolLM2-Instruct was trained on
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def load_tokenizer(source: str, field: str = "target", cache_dir: str | None = None):
    """The tokenizer saved with ``source``'s model (:func:`model_directory`) and whether its chat template is
    its own: where it has none, :data:`CHATML` is set and ``False`` returned, for the output to say so."""
    from transformers import AutoTokenizer

    folder = model_directory(source, field, cache_dir)
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as err:
        raise InvalidParameterError(field, f"no tokenizer in {source}: {err}") from None
    own = bool(getattr(tokenizer, "chat_template", None))
    if not own:
        tokenizer.chat_template = CHATML
    return tokenizer, own


def self_draft(target, spec: str, field: str = "draft"):
    """A draft made of ``target``'s own layers (self-speculative decoding, as in Draft & Verify and SWIFT):
    ``self:skip=12,14,16,18`` drops those decoder layers, ``self:exit=K`` keeps the first ``K`` (then the final
    norm and head). It is a model of the target's class with a config of fewer layers, its tensors the target's
    own (no copy: the same storage), so transformers' assisted generation can run it as an assistant too."""
    layers = target.config.num_hidden_layers
    kind, _, value = spec.removeprefix("self:").partition("=")
    try:
        numbers = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise InvalidParameterError(field, f"{spec!r}: layer numbers must be integers") from None
    if kind == "skip" and all(0 <= i < layers for i in numbers) and len(set(numbers)) < layers:
        kept = [i for i in range(layers) if i not in set(numbers)]
    elif kind == "exit" and len(numbers) == 1 and 1 <= numbers[0] <= layers:
        kept = list(range(numbers[0]))
    else:
        raise InvalidParameterError(field, f"{spec!r}: expected self:skip=I,J,... (layers 0..{layers - 1}, not all) "
                                           f"or self:exit=K (1 ≤ K ≤ {layers})")
    return with_layers(target, kept)


def load_pair(draft: str, target: str, dtype: torch.dtype, device: str = "cpu", cache_dir: str | None = None):
    """``(draft, target)`` models from the command line's ``--draft`` and ``--target`` (:func:`load_causal_lm`;
    a ``self:`` draft is :func:`self_draft` of the target), checked to share a vocabulary."""
    target_model = load_causal_lm(target, dtype, "target", device, cache_dir)
    if draft.startswith("self:"):
        return self_draft(target_model, draft), target_model
    draft_model = load_causal_lm(draft, dtype, "draft", device, cache_dir)
    check_vocabularies(draft_model, target_model)
    return draft_model, target_model


def check_vocabularies(draft, target) -> None:
    """Refuse a draft and a target whose vocabularies differ, naming ``draft``."""
    if draft.config.vocab_size != target.config.vocab_size:
        raise InvalidParameterError("draft", "draft and target vocabularies differ "
                                             f"({draft.config.vocab_size} vs {target.config.vocab_size})")


def with_layers(target, kept: list[int]):
    """A model of ``target``'s class over its decoder layers ``kept`` (renumbered 0..), sharing every tensor with
    ``target``: a self-draft (:func:`self_draft`), or the start of a trained one
    (:func:`simulator.real.draft_training.initial_draft`)."""
    import copy

    config = copy.deepcopy(target.config)
    config.num_hidden_layers = len(kept)
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = [config.layer_types[i] for i in kept]
    new_index = {old: new for new, old in enumerate(kept)}
    layer_key = re.compile(r"(^|\.)layers\.(\d+)\.")

    def renamed(name: str) -> str | None:
        found = layer_key.search(name)
        if found is None:
            return name
        old = int(found.group(2))
        if old not in new_index:
            return None
        return name[:found.start(2)] + str(new_index[old]) + name[found.end(2):]

    with torch.device("meta"):
        draft = type(target)(config)
    state = {renamed(k): v for k, v in target.state_dict(keep_vars=True).items()}
    draft.load_state_dict({k: v for k, v in state.items() if k is not None}, assign=True)
    buffers = dict(target.named_buffers())
    for name, buffer in list(draft.named_buffers()):
        if buffer.is_meta:  # non-persistent buffers (rotary frequencies) are not in a state dict
            source = next(k for k in buffers if renamed(k) == name)
            owner, _, leaf = name.rpartition(".")
            draft.get_submodule(owner)._buffers[leaf] = buffers[source]
    draft.generation_config = copy.deepcopy(target.generation_config)
    if getattr(target, "_tied_weights_keys", None) and config.tie_word_embeddings:
        draft.tie_weights()
    return draft.eval()


@torch.no_grad()
def score_tree(model, prompt: Sequence[int], tree: DraftTree, processing: Processing) -> torch.Tensor:
    """Processed next-token rows ``[n, V]`` of every node of ``tree`` (node 0: after the prompt), one pass, on
    the model's device (:class:`simulator.real.kv_cache.CachedLM` on an empty cache)."""
    if not prompt:
        raise InvalidParameterError("prompt", "tree scoring needs at least one prompt token")
    return CachedLM(model, processing).extend(prompt, tree.parents, tree.tokens, range(1, len(tree)))


class CausalLMPair:
    """A draft and a target causal LM after ``prompt``, as a model pair.

    ``p(c)``/``q(c)`` run one plain forward pass on ``prompt + c`` (cached); :meth:`batch_rows` computes many contexts
    in one tree-attention pass, which :meth:`simulator.models.ModelView.prefetch` uses, so drafting runs the
    draft model once per layer of the tree and the target scores a whole drafted tree in one pass."""

    def __init__(self, draft, target, prompt: Sequence[int], draft_processing: Processing = Processing(),
                 target_processing: Processing = Processing()) -> None:
        check_vocabularies(draft, target)
        if not prompt:
            raise InvalidParameterError("prompt", "needs at least one token")
        self.draft, self.target, self.prompt = draft, target, tuple(prompt)
        self.draft_processing, self.target_processing = draft_processing, target_processing
        self.vocab = target.config.vocab_size
        self._rows: dict[tuple[str, Context], list[float]] = {}
        self.passes = {"p": 0, "q": 0}  # forward passes run, per model (what a round costs)

    def _model(self, name: str) -> tuple:
        return (self.draft, self.draft_processing) if name == "p" else (self.target, self.target_processing)

    @torch.no_grad()
    def _row(self, name: str, context: Context) -> list[float]:
        key = (name, tuple(context))
        if key not in self._rows:
            model, processing = self._model(name)
            ids = torch.tensor([list(self.prompt) + list(context)], device=model.device)
            logits = model(input_ids=ids).logits[0, -1]
            self.passes[name] += 1
            self._rows[key] = processing(logits).tolist()
        return self._rows[key]

    def p(self, context: Context) -> list[float]:
        return self._row("p", context)

    def q(self, context: Context) -> list[float]:
        return self._row("q", context)

    def batch_rows(self, name: str, contexts: Sequence[Context], processing: Processing | None = None) -> list[list[float]]:
        """The ``name`` rows (``"p"``: draft, ``"q"``: target) of many contexts from one forward pass: their
        longest common prefix extends the prompt and the rest, with every ancestor, is scored as a tree
        (:func:`score_tree`); ``processing`` overrides the model's."""
        if not contexts:
            return []
        model, own = self._model(name)
        base = tuple(os.path.commonprefix([tuple(c) for c in contexts]))
        keys = sorted({tuple(c[len(base):])[:d] for c in contexts for d in range(len(c) - len(base) + 1)},
                      key=lambda k: (len(k), k))  # by depth, then lexicographic: a BFS-ordered trie
        node = {k: i for i, k in enumerate(keys)}
        tree = DraftTree([-1] + [node[k[:-1]] for k in keys[1:]], [None] + [k[-1] for k in keys[1:]], self.vocab)
        scored = score_tree(model, self.prompt + base, tree, processing or own)
        self.passes[name] += 1
        return [scored[node[tuple(c[len(base):])]].tolist() for c in contexts]

    def describe(self) -> dict:
        return {"model": "causal-lm", "vocab": self.vocab, "prompt": list(self.prompt),
                "draft_processing": vars(self.draft_processing), "target_processing": vars(self.target_processing)}


@dataclass(frozen=True)
class ReprocessedDraft:
    """A negative control: ``inner``'s drafts whose draft rows, as verification reads them, are the draft
    model's processed by ``processing`` — not the processing the tokens were sampled with (a mismatch
    between sampling and verification, e.g. a temperature applied to one and not the other)."""

    inner: Drafter
    pair: CausalLMPair
    processing: Processing

    @property
    def scheme(self) -> str:
        return self.inner.scheme

    @property
    def height(self) -> int:
        return self.inner.height

    def draft(self, view: ModelView, rng: Randomness) -> Draft:
        drafted = self.inner.draft(view, rng)
        inner = [v for v, row in enumerate(drafted.p) if row is not None]
        paths = [tuple(view.context) + drafted.tree.path(v) for v in inner]
        rows = dict(zip(inner, self.pair.batch_rows("p", paths, self.processing)))
        return Draft(drafted.tree, tuple(tuple(rows[v]) if v in rows else None for v in range(len(drafted.p))),
                     drafted.q)

    def advance(self, generated: Context) -> "ReprocessedDraft":
        return ReprocessedDraft(self.inner.advance(generated), self.pair, self.processing)

    def describe(self) -> dict:
        return {**self.inner.describe(), "verified_draft_processing": vars(self.processing)}
