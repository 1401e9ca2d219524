"""Torch kernels as verifiers (docs/kernels.md): a user's unmodified torch function, an adapter for its calling
convention, and the capture of its random ops (:mod:`simulator.kernels.capture`, and inside the Triton
kernels it launches, :mod:`simulator.kernels.triton_capture`) — together an ordinary verifier
``(tree, p, q, rng)`` that every engine runs, the exact one included.

An adapter, ``adapter(kernel, tree, p, q, vocab, dtype) -> (node, y)``, maps specproof's tree and rows to the
kernel's tensors and its answer back; it runs under the capture, so it may draw. Built in (:data:`ADAPTERS`):
:func:`chain`, :func:`flat_chain`, :func:`tree_adapter` and :func:`uniforms_adapter`, each documenting its
convention, and the shipped verifiers' conventions of :mod:`simulator.kernels.conventions`.
"""

from __future__ import annotations

import ast
import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from simulator.errors import InvalidParameterError, KernelError, UnsupportedDraftError
from simulator.kernels.capture import UNIFORM_MODELS, Precision, capture
from simulator.kernels.loading import load_kernel, run_before_kernel_import, scripting_off
from simulator.kernels.triton_capture import interpreted
from simulator.randomness import Randomness
from simulator.trees import DraftTree
from simulator.usercode import add_import_path
from simulator.verifiers.registry import load_callable

Adapter = Callable[..., tuple[int, int]]
DTYPES = {"float64": torch.float64, "float32": torch.float32}
PLACEHOLDER = -1
#: the law of a float64 kernel is exact up to the rounding of its inputs and arithmetic (relative 2^-53 per
#: operation, a few dozen operations per decision: far below 1e-12), as for the float engine
FLOAT64_TOLERANCE = 1e-10
#: float32 rounds each row entry and operation at 2^-24 ≈ 6e-8 relative; a few dozen of them per decision and
#: a law over a few hundred sequences stay below 1e-6; 1e-5 leaves a margin of ten
FLOAT32_TOLERANCE = 1e-5
UNIFORMS_PER_NODE = 4  # the uniforms adapter's U: 4 per node, plus 16


def _rows(rows: Sequence[Sequence | None], dtype: torch.dtype, vocab: int | None = None) -> torch.Tensor:
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


def _ints(value: object, what: str) -> list[int]:
    """An integer tensor (or int) as a flat list; :class:`KernelError` for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, torch.Tensor)):
        raise KernelError("kernel", f"returned {what} as {type(value).__name__}, expected an integer tensor")
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
            raise KernelError("kernel", f"returned {what} of dtype {value.dtype}, expected an integer dtype")
        return [int(v) for v in value.reshape(-1).tolist()]
    return [value]


def _one(value: object, what: str) -> int:
    values = _ints(value, what)
    if len(values) != 1:
        raise KernelError("kernel", f"returned {what} with {len(values)} elements, expected one")
    return values[0]


def _token(value: int, what: str, vocab: int) -> int:
    if value == PLACEHOLDER:
        raise KernelError("kernel", f"returned the placeholder -1 as {what}, where a token must be")
    if not 0 <= value < vocab:
        error = KernelError("kernel", f"returned token {value} as {what}, outside the vocabulary 0..{vocab - 1}")
        error.token = value  # type: ignore[attr-defined]  # Kernel.__call__ names the race that chose it
        raise error
    return value


def _accepted(emitted: list[int], drafted: list[int], vocab: int) -> int:
    """Check that the emitted tokens are the accepted drafts then one token; the number accepted."""
    n = len(emitted) - 1
    if not 0 <= n <= len(drafted):
        raise KernelError("kernel", f"emitted {len(emitted)} tokens for {len(drafted)} drafts (expected 1 to "
                                    f"{len(drafted) + 1})")
    for i, tok in enumerate(emitted):
        _token(tok, f"emitted token {i}", vocab)
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
    out = kernel(torch.tensor([drafted]), _rows([p[v] for v in nodes[:-1]], dtype).log()[None], gamma,
                 _rows([q[v] for v in nodes], dtype).log()[None])
    if not isinstance(out, tuple) or len(out) != 2:
        raise KernelError("kernel", f"returned {type(out).__name__}, expected (tokens, n_matches)")
    tokens, n_matches = out
    if isinstance(tokens, torch.Tensor) and tokens.dim() != 2:
        raise KernelError("kernel", f"returned tokens of shape {tuple(tokens.shape)}, expected [1, n+1]")
    emitted = _ints(tokens, "tokens")
    n = _accepted(emitted, drafted, vocab)
    if _one(n_matches, "n_matches") != n:
        raise KernelError("kernel", f"returned n_matches {_one(n_matches, 'n_matches')} with {n + 1} tokens")
    return nodes[n], emitted[n]


def flat_chain(kernel, tree: DraftTree, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """Batched serving's convention (vLLM's rejection sampler): ``kernel(draft_token_ids [T], cu_num_draft_tokens
    [B], draft_probs [T, V], target_probs [T, V], bonus_token_ids [B, 1]) -> output [B, γ+1]``, padded with ``-1``
    placeholders; here ``B = 1``, ``T = γ``. The bonus token is drawn here from the leaf's target row, before the
    kernel runs."""
    nodes = chain_nodes(tree, "flat-chain")
    drafted = [tree.tokens[v] for v in nodes[1:]]
    gamma = len(drafted)
    bonus = torch.multinomial(_rows([q[nodes[-1]]], dtype), 1)
    out = kernel(torch.tensor(drafted), torch.tensor([gamma]), _rows([p[v] for v in nodes[:-1]], dtype),
                 _rows([q[v] for v in nodes[:-1]], dtype), bonus.reshape(1, 1))
    emitted = _padded(out, drafted, vocab)
    return nodes[len(emitted) - 1], emitted[-1]


def _padded(out: object, drafted: list[int], vocab: int) -> list[int]:
    """A batched sampler's output checked: shape ``[1, γ+1]``, the accepted drafts, one token, then ``-1``
    placeholders; the tokens it emitted."""
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, len(drafted) + 1):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise KernelError("kernel", f"returned {shape}, expected output token ids of shape [1, {len(drafted) + 1}]")
    row = _ints(out, "output token ids")
    width = next((i for i, t in enumerate(row) if t == PLACEHOLDER), len(row))
    if any(t != PLACEHOLDER for t in row[width:]):
        raise KernelError("kernel", f"returned {row}: a token after a -1 placeholder")
    if width == 0:
        raise KernelError("kernel", f"returned {row}: only placeholders, where at least one token must be")
    _accepted(row[:width], drafted, vocab)
    return row[:width]


def _node_and_token(out: object, tree: DraftTree, vocab: int, expected: str) -> tuple[int, int]:
    """A ``(node, y)`` answer checked: a pair of one-element integer tensors, a node of the tree, a token."""
    if not isinstance(out, tuple) or len(out) != 2:
        raise KernelError("kernel", f"returned {type(out).__name__}, expected {expected}")
    node, y = _one(out[0], "node"), _one(out[1], "y")
    if not 0 <= node < len(tree):
        raise KernelError("kernel", f"returned node {node}, not a node of the tree (0..{len(tree) - 1})")
    return node, _token(y, "y", vocab)


def tree_adapter(kernel, tree: DraftTree, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """Parents, tokens and per-node rows: ``kernel(parents [n], tokens [n] (tokens[0] = -1), p [n, V], q [n, V])
    -> (node, y)``."""
    out = kernel(torch.tensor(tree.parents), torch.tensor([-1, *tree.tokens[1:]]), _rows(p, dtype, vocab),
                 _rows(q, dtype))
    return _node_and_token(out, tree, vocab, "(node, y)")


def uniforms_adapter(kernel, tree: DraftTree, p, q, vocab: int, dtype: torch.dtype) -> tuple[int, int]:
    """:func:`simulator.verifiers.batched.torch_verify.torch_verify`'s convention, by keyword:
    ``kernel(parents=…, tokens [1, n], p [1, n, V], q [1, n, V], uniforms [1, U]) -> (node [1], y [1])``, the
    uniforms symbolic."""
    count = UNIFORMS_PER_NODE * len(tree) + 16
    out = kernel(parents=list(tree.parents), tokens=torch.tensor([[0, *tree.tokens[1:]]]),
                 p=_rows(p, dtype, vocab)[None], q=_rows(q, dtype)[None], uniforms=torch.rand(1, count, dtype=dtype))
    return _node_and_token(out, tree, vocab, "(node [1], y [1])")


#: by name; the conventions of shipped verifiers (:mod:`simulator.kernels.conventions`) as ``module:function``
#: references, loaded when named: that module builds on the helpers here, so importing it here would be circular
ADAPTERS: dict[str, Adapter | str] = {"chain": chain, "flat-chain": flat_chain, "tree": tree_adapter,
                                      "uniforms": uniforms_adapter,
                                      "eagle": "simulator.kernels.conventions:eagle_adapter",
                                      "eagle-paths": "simulator.kernels.conventions:eagle_paths_adapter",
                                      "vllm": "simulator.kernels.conventions:vllm_adapter",
                                      "vllm-v1": "simulator.kernels.conventions:vllm_v1_adapter",
                                      "vllm-v1-no-draft-probs":
                                          "simulator.kernels.conventions:vllm_v1_no_draft_probs_adapter",
                                      "vllm-mrv2": "simulator.kernels.conventions:vllm_mrv2_adapter",
                                      "sglang": "simulator.kernels.conventions:sglang_adapter",
                                      "specinfer": "simulator.kernels.conventions:specinfer_adapter"}
CHAIN_ADAPTERS = ("chain", "flat-chain", "vllm", "vllm-v1", "vllm-v1-no-draft-probs", "vllm-mrv2",
                  "sglang")


def parse_kwargs(text: str | None, field_name: str = "kernel-kwargs") -> dict[str, object]:
    """``NAME=VALUE,...``: each value a Python literal (``0.5``, ``True``, ``'x'``) or else a plain string; a
    malformed item is :class:`InvalidParameterError` on ``field_name``."""
    out: dict[str, object] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise InvalidParameterError(field_name, f"expected NAME=VALUE, got {item!r}")
        try:
            out[name.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[name.strip()] = value.strip()
    return out


@dataclass
class Kernel:
    """A torch kernel as a verifier: ``kernel`` (``module:function``, ``module:Class`` or ``module:Class.method``,
    a class constructed with ``init``; :mod:`.loading`) through ``adapter``, in ``dtype``, its uniforms under the
    ``uniforms`` model, ``import_path`` put first on ``sys.path`` to find them. Call it as any verifier;
    :meth:`float_tolerance` states what its certificate may allow."""

    kernel: str
    adapter: str = "tree"
    dtype: str = "float64"
    uniforms: str = "continuous"
    kwargs: dict = field(default_factory=dict)
    fn: Callable | None = None
    init: dict = field(default_factory=dict)
    import_path: Sequence[str] = ()
    max_decisions: int = field(default=0, init=False)
    grid_bits: int | None = field(default=None, init=False)
    precision: Precision = field(default_factory=Precision, init=False)  # the lowest its arithmetic reached

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise InvalidParameterError("dtype", f"must be one of {tuple(DTYPES)}, got {self.dtype!r}")
        if self.uniforms not in UNIFORM_MODELS:
            raise InvalidParameterError("uniforms", f"must be one of {UNIFORM_MODELS}, got {self.uniforms!r}")
        if self.adapter not in ADAPTERS and ":" not in self.adapter:
            raise InvalidParameterError("adapter", f"unknown adapter {self.adapter!r}: one of {tuple(ADAPTERS)} "
                                                   "or module:function")
        add_import_path(self.import_path, "import-path")
        adapter_module = None if self.adapter in ADAPTERS else self.adapter.partition(":")[0]  # a user's adapter
        with scripting_off():  # a module first imported here keeps its @torch.jit.script helpers in Python
            known = ADAPTERS.get(self.adapter, self.adapter)
            self._adapt = load_callable(known, "adapter") if isinstance(known, str) else known
            if self.fn is None:  # the adapter first: its hook may stub what the kernel's module imports
                run_before_kernel_import(self._adapt, adapter_module)
                self.fn = load_kernel(self.kernel, self.init)
        self._bound = functools.partial(self.fn, **self.kwargs)
        # helpers of the kernel's modules the adapter names as keyed uniforms (simulator.kernels.triton_capture)
        self.keyed_uniforms: dict[str, str] = dict(getattr(self._adapt, "keyed_uniforms", {}))
        self.__module__, _, name = self.kernel.partition(":")
        self.__qualname__ = f"{name} (adapter {self.adapter})"

    def __call__(self, tree: DraftTree, p, q, rng: Randomness) -> tuple[int, int]:
        with capture(rng, self.uniforms, self.precision) as mode, interpreted(mode, self.keyed_uniforms):
            try:
                out = self._adapt(self._bound, tree, p, q, len(q[0]), DTYPES[self.dtype])
            except KernelError as err:
                if getattr(err, "token", None) is None or mode.last_race is None:
                    raise
                err.message = f"{err.message} (the last tl.argmax decided: {mode.last_race})"
                err.args = (f"{err.field}: {err.message}",)
                raise
        self.max_decisions = max(self.max_decisions, mode.decisions)
        if mode.grid_bits is not None:
            self.grid_bits = mode.grid_bits if self.grid_bits is None else min(self.grid_bits, mode.grid_bits)
        return out

    def judged_precision(self) -> tuple[str, str]:
        """The precision the certificate judges this kernel at, and why: the lower of its input dtype and the
        lowest its arithmetic reached, never below float32 (read after the law is enumerated). A float32 kernel fed
        float64 rows is judged as float32; a bfloat16 one at float32's tolerance still, so its own rounding shows
        as a loss."""
        seen = self.precision
        if seen.dtype is None or seen.eps <= torch.finfo(DTYPES[self.dtype]).eps:
            return self.dtype, (f"{self.dtype} kernel: its inputs are the rows rounded to {self.dtype} and its "
                                f"branch probabilities its own {self.dtype} values taken exactly")
        floor = "" if seen.dtype == torch.float32 else f" (the loosest allowed: {seen.name}'s own rounding is a loss)"
        return "float32", (f"the kernel computes in {seen.name} (first at {seen.line}); judged at float32's "
                           f"tolerance{floor}")

    def float_tolerance(self) -> tuple[float, str]:
        """The TVD this kernel's certificate allows, and why (read after the law is enumerated): that of the
        precision :meth:`judged_precision` names."""
        judged, why = self.judged_precision()
        base = FLOAT64_TOLERANCE if judged == "float64" else FLOAT32_TOLERANCE
        reason = f"precision {judged}: {why}; rounding stays below {base:g}"
        if self.grid_bits is None:
            return base, reason
        grid = self.max_decisions * 2.0 ** -self.grid_bits
        return base + grid, (f"{reason}; plus the grid's bound: at most {self.max_decisions} uniform decisions "
                             f"per execution × 2^-{self.grid_bits} (one grid cell each)")

    def describe(self) -> dict[str, object]:
        """The description that rebuilds this kernel (:mod:`exact.subject`); ``kernel_init`` and ``import_path``
        only when given."""
        extra = {"kernel_init": dict(self.init)} if self.init else {}
        if self.import_path:
            extra["import_path"] = list(self.import_path)
        return {"kernel": self.kernel, "adapter": self.adapter, "dtype": self.dtype, "uniforms": self.uniforms,
                "kernel_kwargs": dict(self.kwargs), **extra}
