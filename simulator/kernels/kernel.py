"""Torch kernels as verifiers (docs/kernels.md): a user's unmodified torch function, an adapter for its calling
convention and the capture of its random ops, together an ordinary verifier ``(tree, p, q, rng)`` that every
engine runs (:class:`Kernel`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from simulator.errors import InvalidParameterError, KernelError
from simulator.kernels import conventions
from simulator.kernels.adapters import chain, flat_chain, tree_adapter, uniforms_adapter
from simulator.kernels.capture import UNIFORM_MODELS, Precision, capture
from simulator.kernels.loading import load_kernel, request_interpreter, run_before_kernel_import, scripting_off
from simulator.kernels.medusa import medusa_adapter
from simulator.kernels.triton_capture import interpreted
from simulator.kernels.vllm_forward import vllm_v1_forward_adapter
from simulator.randomness import Randomness
from simulator.trees import DraftTree
from simulator.usercode import add_import_path
from simulator.verifiers.registry import load_callable

Adapter = Callable[..., tuple[int, int]]
DTYPES = {"float64": torch.float64, "float32": torch.float32}
#: the law of a float64 kernel is exact up to the rounding of its inputs and arithmetic (relative 2^-53 per
#: operation, a few dozen operations per decision: far below 1e-12), as for the float engine
FLOAT64_TOLERANCE = 1e-10
#: float32 rounds each row entry and operation at 2^-24 ≈ 6e-8 relative; a few dozen of them per decision and
#: a law over a few hundred sequences stay below 1e-6; 1e-5 leaves a margin of ten
FLOAT32_TOLERANCE = 1e-5


#: the built-in adapters by name (``--adapter``): the plain conventions, and those of shipped verifiers
ADAPTERS: dict[str, Adapter] = {"chain": chain, "flat-chain": flat_chain, "tree": tree_adapter,
                                "uniforms": uniforms_adapter,
                                "eagle": conventions.eagle_adapter,
                                "eagle-paths": conventions.eagle_paths_adapter,
                                "medusa": medusa_adapter,
                                "vllm": conventions.vllm_adapter,
                                "vllm-v1": conventions.vllm_v1_adapter,
                                "vllm-v1-no-draft-probs": conventions.vllm_v1_no_draft_probs_adapter,
                                "vllm-v1-forward": vllm_v1_forward_adapter,
                                "vllm-mrv2": conventions.vllm_mrv2_adapter,
                                "sglang": conventions.sglang_adapter,
                                "specinfer": conventions.specinfer_adapter}
CHAIN_ADAPTERS = ("chain", "flat-chain", "vllm", "vllm-v1", "vllm-v1-no-draft-probs", "vllm-mrv2",
                  "sglang")


@dataclass
class Kernel:
    """A torch kernel as a verifier: ``kernel`` (``module:function``, ``module:Class`` or ``module:Class.method``,
    a class constructed with ``init``; :mod:`.loading`) through ``adapter``, in ``dtype``, its uniforms under the
    ``uniforms`` model, ``import_path`` put first on ``sys.path`` to find them. Call it as any verifier;
    :meth:`float_tolerance` states what its certificate may allow.

    An adapter, ``adapter(kernel, tree, p, q, vocab, dtype) -> (node, y)``, maps specproof's tree and rows to the
    kernel's tensors and its answer back; it runs under the capture (:mod:`simulator.kernels.capture`, and inside
    the Triton kernels it launches :mod:`simulator.kernels.triton_capture`), so it may draw. Built in, by name
    (:data:`ADAPTERS`): the conventions of :mod:`simulator.kernels.adapters`, each documented there, and the
    shipped verifiers' of :mod:`simulator.kernels.conventions`. A batched adapter (its attribute ``batched`` true:
    ``vllm-v1-forward``, :mod:`simulator.kernels.vllm_forward`) verifies a batch of requests in one call instead
    (:meth:`call_batch`; the exact engine's ``certify_batch`` certifies it on a batch).
    """

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
        request_interpreter()  # before the adapter's and the kernel's modules import triton, if they do
        adapter_module = None if self.adapter in ADAPTERS else self.adapter.partition(":")[0]  # a user's adapter
        with scripting_off():  # a module first imported here keeps its @torch.jit.script helpers in Python
            self._adapt = ADAPTERS.get(self.adapter) or load_callable(self.adapter, "adapter")
            if self.fn is None:  # the adapter first: its hook may stub what the kernel's module imports
                run_before_kernel_import(self._adapt, adapter_module)
                self.fn = load_kernel(self.kernel, self.init)
        self._bound = functools.partial(self.fn, **self.kwargs)
        # helpers of the kernel's modules the adapter names as keyed uniforms (simulator.kernels.triton_capture)
        self.keyed_uniforms: dict[str, str] = dict(getattr(self._adapt, "keyed_uniforms", {}))
        self.__module__, _, name = self.kernel.partition(":")
        self.__qualname__ = f"{name} (adapter {self.adapter})"

    @property
    def batched(self) -> bool:
        """Whether the adapter verifies a batch of requests in one call (:meth:`call_batch`) rather than one tree."""
        return bool(getattr(self._adapt, "batched", False))

    def __call__(self, tree: DraftTree, p, q, rng: Randomness) -> tuple[int, int]:
        if self.batched:
            raise InvalidParameterError("adapter", f"{self.adapter} verifies a batch of requests: certify it with "
                                                   "--request, one per request")
        return self._captured(rng, lambda dtype: self._adapt(self._bound, tree, p, q, len(q[0]), dtype))

    def call_batch(self, drafts: Sequence, requests: Sequence, rng: Randomness) -> list[tuple[int, int]]:
        """Verify one draft per request in one call of the kernel, through a batched adapter ``adapter(kernel,
        drafts, requests, vocab, dtype) -> [(node, y), ...]``: each draft a
        :class:`~simulator.drafting.shapes.Draft`, each request a :class:`~simulator.kernels.batch.BatchRequest`,
        the answers in the requests' order. Under the same capture as a single call."""
        if not self.batched:
            raise InvalidParameterError("adapter", f"{self.adapter} verifies one tree per call, not a batch: "
                                                   "certify it without --request")
        vocab = len(drafts[0].q[0])
        return self._captured(rng, lambda dtype: self._adapt(self._bound, drafts, requests, vocab, dtype))

    def _captured(self, rng: Randomness, run: Callable[[torch.dtype], object]):
        """``run(dtype)`` under the capture, its decisions and grid recorded."""
        with capture(rng, self.uniforms, self.precision) as mode, interpreted(mode, self.keyed_uniforms):
            try:
                out = run(DTYPES[self.dtype])
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
