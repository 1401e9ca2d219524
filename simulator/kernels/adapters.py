"""The built-in calling conventions of torch kernels (docs/kernels.md, "Adapters"): :func:`chain`
(transformers'), :func:`flat_chain` (batched serving's), :func:`tree_adapter` and :func:`uniforms_adapter`; and
the pieces every adapter builds on, those of :mod:`simulator.kernels.conventions` too: rows as tensors, and the
checks on a kernel's answer, each a :class:`KernelError` naming what is wrong."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from simulator.errors import KernelError, UnsupportedDraftError
from simulator.trees import DraftTree

#: the token id a batched sampler pads its output with, and an adapter marks a missing token with
PLACEHOLDER = -1
UNIFORMS_PER_NODE = 4  # the uniforms adapter's U: 4 per node, plus 16


def rows_tensor(rows: Sequence[Sequence | None], dtype: torch.dtype, vocab: int | None = None) -> torch.Tensor:
    """Rows as a ``dtype`` tensor; a missing row (a leaf's draft row, never drafted from) is NaN, so a kernel
    that reads it fails loudly instead of deciding on a made-up number."""
    width = vocab if vocab is not None else len(next(r for r in rows if r is not None))
    return torch.tensor([[float(x) for x in row] if row is not None else [math.nan] * width for row in rows],
                        dtype=torch.float64).to(dtype)


def chain_nodes(tree: DraftTree, adapter: str) -> list[int]:
    """The chain's nodes from the root down, for an adapter of a chain convention; a tree that is not a chain of
    at least one draft is refused (:class:`UnsupportedDraftError` on ``topology``, exit 2)."""
    if not tree.is_chain() or len(tree) < 2:
        raise UnsupportedDraftError("topology", f"the {adapter} adapter verifies a chain of at least one draft "
                                                "token (pass --topology chain)")
    return tree.chain_nodes()


def int_values(value: object, what: str) -> list[int]:
    """An integer tensor (or int) as a flat list; :class:`KernelError` for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, torch.Tensor)):
        raise KernelError("kernel", f"returned {what} as {type(value).__name__}, expected an integer tensor")
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
            raise KernelError("kernel", f"returned {what} of dtype {value.dtype}, expected an integer dtype")
        return [int(v) for v in value.reshape(-1).tolist()]
    return [value]


def one_int(value: object, what: str) -> int:
    """A one-element integer tensor (or int) as an int; :class:`KernelError` for anything else, ``what`` naming
    the value in the message."""
    values = int_values(value, what)
    if len(values) != 1:
        raise KernelError("kernel", f"returned {what} with {len(values)} elements, expected one")
    return values[0]


def checked_token(value: int, what: str, vocab: int) -> int:
    """``value`` itself when it is a token of the vocabulary ``0..vocab − 1``; :class:`KernelError` for the ``-1``
    placeholder or a token outside it (the error carries ``token``, which :class:`simulator.kernels.kernel.Kernel`
    explains by the race that chose it)."""
    if value == PLACEHOLDER:
        raise KernelError("kernel", f"returned the placeholder -1 as {what}, where a token must be")
    if not 0 <= value < vocab:
        error = KernelError("kernel", f"returned token {value} as {what}, outside the vocabulary 0..{vocab - 1}")
        error.token = value  # type: ignore[attr-defined]  # Kernel.__call__ names the race that chose it
        raise error
    return value


def accepted_count(emitted: list[int], drafted: list[int], vocab: int) -> int:
    """The number of drafts accepted, after checking that ``emitted`` is the accepted drafts then one token of the
    vocabulary; :class:`KernelError` otherwise."""
    n = len(emitted) - 1
    if not 0 <= n <= len(drafted):
        raise KernelError("kernel", f"emitted {len(emitted)} tokens for {len(drafted)} drafts (expected 1 to "
                                    f"{len(drafted) + 1})")
    for i, tok in enumerate(emitted):
        checked_token(tok, f"emitted token {i}", vocab)
    if emitted[:n] != drafted[:n]:
        raise KernelError("kernel", f"emitted {emitted[:n]} as accepted drafts, but the drafts were {drafted[:n]}")
    return n


def chain(kernel, tree: DraftTree, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """transformers' convention (``_speculative_sampling``): ``kernel(candidate_input_ids [1, γ], candidate_logits
    [1, γ, V], candidate_length γ, new_logits [1, γ+1, V]) -> (tokens [1, n+1], n_matches)``; logits are ``log`` of
    the rows (``-inf`` at a zero)."""
    nodes = chain_nodes(tree, "chain")
    drafted = [tree.tokens[v] for v in nodes[1:]]
    gamma = len(drafted)
    out = kernel(torch.tensor([drafted]), rows_tensor([p[v] for v in nodes[:-1]], dtype).log()[None], gamma,
                 rows_tensor([q[v] for v in nodes], dtype).log()[None])
    if not isinstance(out, tuple) or len(out) != 2:
        raise KernelError("kernel", f"returned {type(out).__name__}, expected (tokens, n_matches)")
    tokens, n_matches = out
    if isinstance(tokens, torch.Tensor) and tokens.dim() != 2:
        raise KernelError("kernel", f"returned tokens of shape {tuple(tokens.shape)}, expected [1, n+1]")
    emitted = int_values(tokens, "tokens")
    n = accepted_count(emitted, drafted, vocab)
    if one_int(n_matches, "n_matches") != n:
        raise KernelError("kernel", f"returned n_matches {one_int(n_matches, 'n_matches')} with {n + 1} tokens")
    return nodes[n], emitted[n]


def flat_chain(kernel, tree: DraftTree, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """Batched serving's convention (vLLM's rejection sampler): ``kernel(draft_token_ids [T], cu_num_draft_tokens
    [B], draft_probs [T, V], target_probs [T, V], bonus_token_ids [B, 1]) -> output [B, γ+1]``, padded with ``-1``
    placeholders; here ``B = 1``, ``T = γ``. The bonus token is drawn here from the leaf's target row, before the
    kernel runs."""
    nodes = chain_nodes(tree, "flat-chain")
    drafted = [tree.tokens[v] for v in nodes[1:]]
    gamma = len(drafted)
    bonus = torch.multinomial(rows_tensor([q[nodes[-1]]], dtype), 1)
    out = kernel(torch.tensor(drafted), torch.tensor([gamma]), rows_tensor([p[v] for v in nodes[:-1]], dtype),
                 rows_tensor([q[v] for v in nodes[:-1]], dtype), bonus.reshape(1, 1))
    emitted = padded_tokens(out, drafted, vocab)
    return nodes[len(emitted) - 1], emitted[-1]


def padded_tokens(out: object, drafted: list[int], vocab: int) -> list[int]:
    """A batched sampler's output checked: shape ``[1, γ+1]``, the accepted drafts, one token, then ``-1``
    placeholders; the tokens it emitted."""
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, len(drafted) + 1):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise KernelError("kernel", f"returned {shape}, expected output token ids of shape [1, {len(drafted) + 1}]")
    row = int_values(out, "output token ids")
    width = next((i for i, t in enumerate(row) if t == PLACEHOLDER), len(row))
    if any(t != PLACEHOLDER for t in row[width:]):
        raise KernelError("kernel", f"returned {row}: a token after a -1 placeholder")
    if width == 0:
        raise KernelError("kernel", f"returned {row}: only placeholders, where at least one token must be")
    accepted_count(row[:width], drafted, vocab)
    return row[:width]


def _node_and_token(out: object, tree: DraftTree, vocab: int, expected: str) -> tuple[int, int]:
    """A ``(node, y)`` answer checked: a pair of one-element integer tensors, a node of the tree, a token."""
    if not isinstance(out, tuple) or len(out) != 2:
        raise KernelError("kernel", f"returned {type(out).__name__}, expected {expected}")
    node, y = one_int(out[0], "node"), one_int(out[1], "y")
    if not 0 <= node < len(tree):
        raise KernelError("kernel", f"returned node {node}, not a node of the tree (0..{len(tree) - 1})")
    return node, checked_token(y, "y", vocab)


def tree_adapter(kernel, tree: DraftTree, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """Parents, tokens and per-node rows: ``kernel(parents [n], tokens [n] (tokens[0] = -1), p [n, V], q [n, V])
    -> (node, y)``."""
    out = kernel(torch.tensor(tree.parents), torch.tensor([-1, *tree.tokens[1:]]), rows_tensor(p, dtype, vocab),
                 rows_tensor(q, dtype))
    return _node_and_token(out, tree, vocab, "(node, y)")


def uniforms_adapter(kernel, tree: DraftTree, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """:func:`simulator.verifiers.batched.torch_verify.torch_verify`'s convention, by keyword:
    ``kernel(parents=…, tokens [1, n], p [1, n, V], q [1, n, V], uniforms [1, U]) -> (node [1], y [1])``, the
    uniforms symbolic."""
    count = UNIFORMS_PER_NODE * len(tree) + 16
    out = kernel(parents=list(tree.parents), tokens=torch.tensor([[0, *tree.tokens[1:]]]),
                 p=rows_tensor(p, dtype, vocab)[None], q=rows_tensor(q, dtype)[None],
                 uniforms=torch.rand(1, count, dtype=dtype))
    return _node_and_token(out, tree, vocab, "(node [1], y [1])")
