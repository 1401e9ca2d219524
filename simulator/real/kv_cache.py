"""A causal LM with a KV cache over a growing context, scoring draft trees on top of it (:class:`CachedLM`;
docs/torch-path.md, "Real model pairs")."""

from __future__ import annotations

import contextlib
import inspect
import time
import weakref
from typing import Sequence

import torch

from simulator.errors import InvalidParameterError
from simulator.trees import node_depths


def tree_inputs(cached: int, context_len: int, pending: int, parents: Sequence[int], nodes: Sequence[int],
                slot: dict[int, int], dtype: torch.dtype, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """The additive mask ``[1, 1, k, cached + k]`` and position ids ``[1, k]`` of ``k = pending + len(nodes)`` new
    tokens over a cache of ``cached`` entries: the last ``pending`` context tokens (causal), then tree ``nodes``,
    each seeing the ``context_len`` context positions and the cache slots ``slot`` of its ancestors and itself
    (``slot`` already holds the new nodes' slots)."""
    k = pending + len(nodes)
    total = cached + k
    columns = torch.arange(total)
    rows = torch.arange(k)
    allowed = columns[None, :] <= (cached + rows)[:, None]  # the context tokens: causal
    allowed[pending:] = columns[None, :] < context_len
    depth = node_depths(parents)
    positions = list(range(context_len - pending, context_len))
    for i, v in enumerate(nodes):
        a = v
        while a > 0:
            allowed[pending + i, slot[a]] = True
            a = parents[a]
        positions.append(context_len - 1 + depth[v])
    mask = torch.zeros(1, 1, k, total, dtype=dtype)
    mask[0, 0][~allowed] = torch.finfo(dtype).min
    return mask.to(device), torch.tensor([positions], device=device)


class CachedLM:
    """``model`` with a KV cache and the processing its rows get; ``passes`` counts forward passes and ``seconds``
    the wall time spent in them (with the processing; on a GPU, launch time unless the caller synchronises).

    It keeps the keys and values of the context it has seen. Each call feeds what is new (the context's tokens not
    yet cached, then tree nodes whose parents are in) in one forward pass with a 4-D mask (:func:`tree_inputs`): a
    context token sees the context before it, a tree node the whole context and its ancestors, at position
    ``len(context) − 1 + depth``. :meth:`commit` keeps the accepted path's entries and drops the rejected branches,
    so the next round feeds only the token emitted after the path. Rows come back processed
    (:class:`simulator.real.causal_lm.Processing`), as tensors on the model's device.
    """

    def __init__(self, model, processing) -> None:
        from transformers import DynamicCache

        self.model, self.processing = model, processing
        self.cache = DynamicCache()
        self.fed = 0  # the leading context tokens the cache holds, at positions 0..fed-1
        self.slot: dict[int, int] = {}  # this round's tree nodes -> their cache positions
        self.passes = 0
        self.seconds = 0.0
        parameters = inspect.signature(model.forward).parameters
        self._cache_keyword = "cache" if "cache" in parameters else "past_key_values"  # renamed in transformers 5
        self._keep_logits = "logits_to_keep" in parameters
        self._head = _cpu_head(model)

    @property
    def length(self) -> int:
        return self.fed + len(self.slot)

    @torch.no_grad()
    def extend(self, context: Sequence[int], parents: Sequence[int], tokens: Sequence[int],
               nodes: Sequence[int]) -> torch.Tensor:
        """Feed ``context``'s uncached tokens, then tree ``nodes`` (tokens ``tokens[v]``; every parent fed
        before or among them, the root being the context's end) in one pass. Returns the processed rows
        ``[1 + len(nodes), V]`` of the root and the nodes when context tokens were pending, else ``[len(nodes), V]``."""
        if self.slot and len(context) != self.fed:
            raise InvalidParameterError("context", "a round's context cannot grow before commit()")
        pending = list(context[self.fed:])
        if not pending and not nodes:
            raise InvalidParameterError("nodes", "nothing to feed: the context is cached and no node is given")
        cached = self.length
        self.fed = len(context)
        for i, v in enumerate(nodes):
            self.slot[v] = cached + len(pending) + i
        weights = next(self.model.parameters())
        mask, positions = tree_inputs(cached, len(context), len(pending), parents, nodes, self.slot, weights.dtype,
                                      weights.device)
        ids = torch.tensor([pending + [int(tokens[v]) for v in nodes]], device=weights.device)
        wanted = len(nodes) + (1 if pending else 0)
        extra = {"logits_to_keep": wanted} if self._keep_logits else {}
        start = time.perf_counter()
        with self._head:
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                **{self._cache_keyword: self.cache}, **extra).logits[0, -wanted:]
        rows = self.processing(logits)
        self.seconds += time.perf_counter() - start
        self.passes += 1
        return rows

    def commit(self, path: Sequence[int]) -> None:
        """End the round: the context grows by ``path``'s tokens (root excluded, shallowest first) and whatever
        follows; the cache keeps the context and the entries of ``path``'s fed nodes, in order, and drops the rest."""
        kept = []
        for v in path:
            if v not in self.slot:
                break
            kept.append(self.slot[v])
        if kept != list(range(self.fed, self.fed + len(kept))) or len(kept) != len(self.slot):
            index = torch.tensor(list(range(self.fed)) + kept, device=next(self.model.parameters()).device)
            _keep_positions(self.cache, index)
        self.fed += len(kept)
        self.slot = {}

    def rewind(self, length: int) -> None:
        """Keep the entries of the first ``length`` context tokens and drop the rest (this round's tree included),
        as if only those had been fed: many first rounds then run from one cached prompt."""
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.fed:
            raise InvalidParameterError("length", f"must be an integer in 0..{self.fed} (the tokens fed), "
                                                  f"got {length!r}")
        if self.length > length:
            _keep_positions(self.cache, torch.arange(length, device=next(self.model.parameters()).device))
        self.fed, self.slot = length, {}


#: the transposed copies of output-head weights (:class:`_CpuHead`) by ``id`` of the weight, one however many
#: models share it, dropped with the weight (tensors compare elementwise, so no ``WeakKeyDictionary``)
_TRANSPOSED: dict[int, torch.Tensor] = {}


class _CpuHead:
    """While entered, ``head`` (a bias-free ``nn.Linear`` on the CPU: the output head) computes its product in the
    layout MKL runs fastest: ``h · Wᵀ`` from a transposed copy of ``W`` for one row, ``(W · hᵀ)ᵀ`` for a few. For
    SmolLM2's 49,152 × 576 head on 2 cores, ``nn.Linear`` takes 8 ms for one row and 19 ms for two to eight;
    these take 4.5 and 5.6 ms (the product is the same, summed in another order). Only inside :class:`CachedLM`'s
    passes: the model, used elsewhere (transformers' own ``generate`` in the speed benchmark), is left as it is."""

    def __init__(self, head: torch.nn.Linear) -> None:
        self.head, self.weight = head, head.weight
        key = id(self.weight)
        if key not in _TRANSPOSED:
            _TRANSPOSED[key] = self.weight.detach().t().contiguous()
            weakref.finalize(self.weight, _TRANSPOSED.pop, key, None)
        self.transposed = _TRANSPOSED[key]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        flat = hidden.reshape(-1, hidden.shape[-1])
        out = flat @ self.transposed if flat.shape[0] == 1 else (self.weight @ flat.t()).t()
        return out.reshape(*hidden.shape[:-1], self.weight.shape[0])

    def __enter__(self) -> None:
        self.head.forward = self.forward

    def __exit__(self, *exc: object) -> None:
        del self.head.forward


def _cpu_head(model) -> contextlib.AbstractContextManager:
    """:class:`_CpuHead` for ``model``'s output head where it applies (a bias-free ``nn.Linear`` with float weights
    on the CPU, its ``forward`` not wrapped by hooks), else a context that changes nothing."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if (type(head) is not torch.nn.Linear or head.bias is not None or head.weight.device.type != "cpu"
            or not head.weight.dtype.is_floating_point or "forward" in vars(head)):
        return contextlib.nullcontext()
    return _CpuHead(head)


def _keep_positions(cache, index: torch.Tensor) -> None:
    """Keep the sequence positions ``index`` of every layer of a transformers ``DynamicCache``."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise InvalidParameterError("transformers", "the KV-cached real path needs transformers ≥ 4.56 (a cache "
                                                    "with per-layer keys and values)")
    for layer in layers:
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            layer.keys = layer.keys.index_select(-2, index)
            layer.values = layer.values.index_select(-2, index)
