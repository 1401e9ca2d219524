"""Torch randomness capture (:func:`capture`): an unmodified torch kernel's random ops routed to the randomness
interface, exactly, without touching its source; what is modelled and what is refused: docs/kernels.md, "How a
kernel's randomness is captured"."""

from __future__ import annotations

import contextlib
import math
import operator
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from types import FrameType
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from simulator.errors import KernelError
from simulator.randomness import Randomness
from simulator.random_sources import TORCH_UNMODELLED, RandomSources, user_line

UNIFORM_MODELS = ("continuous", "grid")
#: torch calls one kernel call may make: a kernel looping without drawing is stopped here (a loop that draws
#: meets the enumerator's limit on choices per execution first)
MAX_TORCH_CALLS = 1_000_000
#: random bits of torch's CPU uniform by dtype (``at::uniform_real_distribution``)
GRID_BITS = {torch.float32: 24, torch.float64: 53, torch.float16: 11, torch.bfloat16: 8}

_CMP = {"lt": "lt", "__lt__": "lt", "less": "lt", "le": "le", "__le__": "le", "less_equal": "le",
        "gt": "gt", "__gt__": "gt", "greater": "gt", "ge": "ge", "__ge__": "ge", "greater_equal": "ge"}
_HOLDS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
# elementwise monotone maps with one concrete operand: name -> (symbolic first, symbolic second)
_BINARY = {"add": ("add", "add"), "__add__": ("add", "add"), "__radd__": ("add", "add"), "add_": ("add", "add"),
           "sub": ("sub", "rsub"), "__sub__": ("sub", "rsub"), "sub_": ("sub", "rsub"), "__rsub__": ("rsub", None),
           "rsub": ("rsub", "sub"),
           "mul": ("mul", "mul"), "__mul__": ("mul", "mul"), "__rmul__": ("mul", "mul"), "mul_": ("mul", "mul"),
           "div": ("div", "rdiv"), "__truediv__": ("div", "rdiv"), "true_divide": ("div", "rdiv"),
           "div_": ("div", "rdiv"), "__rdiv__": ("rdiv", None), "__rtruediv__": ("rdiv", None)}
_UNARY = {"neg": "neg", "__neg__": "neg", "negative": "neg", "neg_": "neg", "log": "log", "log_": "log",
          "exp": "exp", "exp_": "exp", "reciprocal": "reciprocal", "reciprocal_": "reciprocal"}
# clamps: the keywords of their (lower, upper) bounds, in positional order; min(max(x, lo), hi) is monotone in x
# and in each bound
_CLAMP = {"clamp": ("min", "max"), "clamp_": ("min", "max"), "clip": ("min", "max"), "clip_": ("min", "max"),
          "clamp_min": ("min", None), "clamp_min_": ("min", None), "clamp_max": (None, "max"),
          "clamp_max_": (None, "max")}
# the floating dtypes whose arithmetic is tracked, by machine epsilon: a larger epsilon is a lower precision
_EPS = {dtype: torch.finfo(dtype).eps for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16)}
# ops that move elements around: applied to the variable ids and to every recorded operand alike
_LAYOUT = {"__getitem__", "gather", "index_select", "squeeze", "unsqueeze", "view", "reshape", "expand",
           "expand_as", "broadcast_to", "flatten", "permute", "transpose", "t", "clone", "contiguous", "flip",
           "narrow", "select", "unbind", "chunk", "split", "repeat", "roll", "view_as", "reshape_as", "movedim",
           "take_along_dim", "detach", "squeeze_", "unsqueeze_"}
_DTYPE = {"to", "double", "float", "half", "bfloat16", "type", "type_as", "cpu", "cuda", "requires_grad_"}
_METADATA = {"size", "dim", "numel", "is_floating_point", "is_contiguous", "element_size",
             "__len__", "ndimension", "nelement", "stride", "storage_offset", "is_complex", "get_device"}


@dataclass
class Variable:
    """One random element: its law (``uniform``, ``exponential`` or, drawn in a Triton kernel, ``normal``), the
    interval still possible (grid uniforms: integer cells ``lo..hi`` inclusive) and whether an argmax race consumed
    it."""

    kind: str
    lo: object
    hi: object
    bits: int | None = None
    spent: bool = False
    fresh: bool = True


@dataclass
class Symbolic:
    """A tensor of random values: the variable of each element and the maps applied to it, in order; each
    map's operand is a float64 tensor of the same shape (``None`` for a unary map), a copy (the kernel may later
    change the tensor it came from). A ``fill`` operand (``masked_fill``) is NaN where the element is not filled."""

    ids: torch.Tensor
    ops: list[tuple[str, torch.Tensor | None]] = field(default_factory=list)

    def relaid(self, fn: Callable[[torch.Tensor], object]) -> object:
        """``fn`` applied to the ids and to every operand; a tuple of results for ops that split a tensor."""
        ids = fn(self.ids)
        operands = [(name, None if c is None else fn(c)) for name, c in self.ops]
        if isinstance(ids, torch.Tensor):
            return Symbolic(ids, [(n, c) for n, c in operands])
        return tuple(Symbolic(i, [(n, None if c is None else c[k]) for n, c in operands]) for k, i in enumerate(ids))

    def broadcast(self, shape: torch.Size) -> "Symbolic":
        return Symbolic(self.ids.broadcast_to(shape),
                        [(n, None if c is None else c.broadcast_to(shape)) for n, c in self.ops])


@dataclass
class Precision:
    """The lowest floating precision a kernel's concrete arithmetic produced (``None``: none yet), with the kernel
    line where it first appeared. One record serves every call of a kernel, so a line is looked up once per new
    low, not once per call."""

    dtype: torch.dtype | None = None
    line: str = ""
    eps: float = 0.0  # the recorded dtype's machine epsilon (0: none recorded)

    @property
    def name(self) -> str | None:
        return None if self.dtype is None else str(self.dtype).removeprefix("torch.")


def kernel_line(start: FrameType | None = None) -> str:
    """The kernel's line: the innermost frame outside specproof, torch and the random libraries, from ``start``
    (default: the caller's frame) outward."""
    return user_line(start if start is not None else sys._getframe(1))


def _fail(op: str, why: str) -> KernelError:
    return KernelError("kernel", f"{op}: {why} ({kernel_line()})")


def _exact(x: float) -> Fraction | float:
    """A float taken exactly; infinities stay floats (Fraction has none)."""
    if math.isnan(x):
        raise _fail("comparison", "a threshold is NaN")
    return x if math.isinf(x) else Fraction(x)


class Capture(TorchFunctionMode):
    """The mode: symbolic random tensors for one kernel call, decided through ``rng``."""

    def __init__(self, rng: Randomness, uniforms: str = "continuous", precision: Precision | None = None) -> None:
        super().__init__()
        if uniforms not in UNIFORM_MODELS:
            raise KernelError("uniforms", f"must be one of {UNIFORM_MODELS}, got {uniforms!r}")
        self.rng, self.grid = rng, uniforms == "grid"
        self.precision = precision if precision is not None else Precision()
        self.variables: list[Variable] = []
        self._symbolic: dict[int, tuple[torch.Tensor, Symbolic]] = {}
        self.calls = 0
        self.decisions = 0  # uniform comparisons decided by a choice (the grid model's error bound counts them)
        self.grid_bits: int | None = None
        self.watch = _GeneratorWatch(default_generators())
        self.sources = RandomSources(lambda: torch.rand((), dtype=torch.float64), kernel_line)
        # run on every torch call's arguments first: the Triton capture decides the races whose winners it reads
        self.before_call: Callable[[Callable, tuple, dict], None] | None = None
        self.last_race: str | None = None  # the Triton capture's last decided tl.argmax: named with its winner

    # ---- bookkeeping ---------------------------------------------------------------------------------------
    def symbolic(self, x: object) -> Symbolic | None:
        entry = self._symbolic.get(id(x)) if isinstance(x, torch.Tensor) else None
        return entry[1] if entry is not None and entry[0] is x else None

    def random_tensors(self) -> list[tuple[torch.Tensor, Symbolic]]:
        """Every random tensor the capture holds, with its symbolic value (the Triton capture finds them by
        address)."""
        return list(self._symbolic.values())

    def register(self, fake: torch.Tensor, sym: Symbolic) -> torch.Tensor:
        """``fake`` (its values set to NaN) made the random tensor ``sym``: every later op on it comes to this
        mode; returns ``fake``."""
        with torch.no_grad():
            fake.fill_(math.nan)  # a random value read past this module is NaN, never a plausible number
        self._symbolic[id(fake)] = (fake, sym)
        return fake

    def _fresh(self, fake: torch.Tensor, kind: str) -> torch.Tensor:
        return self.register(fake, Symbolic(self._variables(fake.shape, kind, fake.dtype)))

    def _variables(self, shape: torch.Size, kind: str, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """New variables of law ``kind``, one per element of ``shape``: their ids in that shape."""
        bits = GRID_BITS.get(dtype) if kind == "uniform" and self.grid else None
        if kind == "uniform" and self.grid and bits is None:
            raise _fail("uniform", f"no grid model for dtype {dtype}")
        start = len(self.variables)
        for _ in range(math.prod(shape)):
            if bits is not None:
                self.variables.append(Variable(kind, 0, 2**bits - 1, bits))
                self.grid_bits = bits if self.grid_bits is None else min(self.grid_bits, bits)
            else:
                self.variables.append(Variable(kind, Fraction(0), Fraction(1) if kind == "uniform" else math.inf))
        return torch.arange(start, len(self.variables), dtype=torch.long).reshape(shape)

    def _real(self, func, args, kwargs):
        """Run ``func`` for its shape and dtype (its random numbers are discarded, the generator put back)."""
        self.watch.add(kwargs.get("generator"))
        out = func(*args, **kwargs)
        self.watch.drew()
        return out

    def _has_symbolic(self, args, kwargs) -> bool:
        """Whether a random value is among the arguments (one level into lists and tuples: torch's own
        signatures nest no deeper)."""
        table = self._symbolic
        for x in (*args, *kwargs.values()):
            if isinstance(x, (list, tuple)):
                if any(self.symbolic(y) is not None for y in x):
                    return True
            elif id(x) in table and table[id(x)][0] is x:
                return True
        return False

    def _plain(self, name: str, func, args, kwargs):
        """A call on concrete values, run as is; one that drew random numbers past this module is refused."""
        if name in TORCH_UNMODELLED:
            raise _fail(name, "a random op specproof does not model exactly")
        self.watch.add(kwargs.get("generator"))
        out = func(*args, **kwargs)
        moved = self.watch.drew()
        if moved is not None:
            raise _fail(name, moved)
        if isinstance(out, torch.Tensor) and _EPS.get(out.dtype, 0.0) > self.precision.eps:
            self._lowered(out.dtype, args, kwargs)
        return out

    def _lowered(self, dtype: torch.dtype, args, kwargs) -> None:
        """Record a concrete result below the precision seen so far. Random values do not count (their maps are
        resolved in exact arithmetic, whatever their dtype: a float32 ``torch.rand(())`` beside float64 rows
        changes nothing); nor does a result made from no floating tensor without ``dtype=`` (``torch.zeros(3)``,
        ``mask.float()``): exact values in torch's default dtype, which the kernel did not choose. Arithmetic on
        such a tensor counts where its result keeps the low precision."""
        floating = any(isinstance(y, torch.Tensor) and y.dtype.is_floating_point
                       for x in (*args, *kwargs.values()) for y in (x if isinstance(x, (list, tuple)) else (x,)))
        if floating or kwargs.get("dtype") is not None:
            self.precision.dtype, self.precision.eps, self.precision.line = dtype, _EPS[dtype], kernel_line()

    # ---- the mode ------------------------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        # the capture's own Python is not the kernel's: no profiler (inline: a torch call is the hot path)
        sources = self.sources
        sources.busy = True
        if sources.active:
            sys.setprofile(None)
        try:
            return self._dispatch(func, args, kwargs or {})
        finally:
            sources.busy = False
            if sources.active:
                sys.setprofile(sources.profile)

    def _dispatch(self, func, args, kwargs):
        name = getattr(func, "__name__", str(func))
        if self.before_call is not None:
            self.before_call(func, args, kwargs)
        self.calls += 1
        if self.calls > MAX_TORCH_CALLS:
            raise _fail(name, f"more than {MAX_TORCH_CALLS:,} torch calls in one kernel call (an endless loop?)")
        if name in ("rand", "rand_like"):
            return self._fresh(self._real(func, args, kwargs), "uniform")
        if name in ("uniform_", "exponential_"):
            return self._in_place_random(name, args, kwargs)
        if name in ("multinomial", "bernoulli", "bernoulli_"):
            return self._discrete(name, args, kwargs)
        if not self._has_symbolic(args, kwargs):
            return self._plain(name, func, args, kwargs)
        flat, _ = tree_flatten((args, kwargs))
        if name in _METADATA:
            return func(*args, **kwargs)
        if name == "__get__":  # a property: metadata, or a view such as .T, laid out like the ids
            out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor):
                return self.register(out, self.symbolic(args[0]).relaid(lambda t: func(t)))
            return out
        if name in _CMP:
            return self._compare(_CMP[name], args)
        if name in _BINARY:
            return self._binary(name, args, kwargs)
        if name in _UNARY:
            return self._map(args[0], _UNARY[name], None, in_place=name.endswith("_"))
        if name in _CLAMP:
            return self._clamp(name, args, kwargs)
        if name in ("masked_fill", "masked_fill_"):
            return self._masked_fill(name, args, kwargs)
        if name in _LAYOUT:
            sym = self.symbolic(args[0])
            if sym is None or any(self.symbolic(x) is not None for x in flat[1:]):
                raise _fail(name, "random values mixed into a layout op")
            fake = func(*args, **kwargs)
            laid = sym.relaid(lambda t: func(t, *args[1:], **kwargs))
            if isinstance(fake, torch.Tensor):
                return self.register(fake, laid)
            return type(fake)(self.register(f, s) for f, s in zip(fake, laid))
        if name in _DTYPE:
            sym = self.symbolic(args[0])
            return self.register(func(*args, **kwargs), Symbolic(sym.ids, list(sym.ops)))
        if name in ("argmax", "max") and self.symbolic(args[0]) is not None:
            return self.race(name, args, kwargs)
        raise _fail(name, "this op on a random value cannot be resolved exactly")

    # ---- creating random values ----------------------------------------------------------------------------
    def _in_place_random(self, name: str, args, kwargs):
        target = args[0]
        params = list(args[1:])
        if name == "uniform_":
            low = kwargs.get("from", params[0] if params else 0.0)
            high = kwargs.get("to", params[1] if len(params) > 1 else 1.0)
            self._redrawn(target, "uniform", name)
            if (low, high) != (0.0, 1.0):
                self._map(target, "mul", high - low, in_place=True)
                self._map(target, "add", low, in_place=True)
            return target
        rate = kwargs.get("lambd", params[0] if params else 1.0)
        self._redrawn(target, "exponential", name)
        if rate != 1.0:
            self._map(target, "div", rate, in_place=True)
        return target

    def _redrawn(self, target: torch.Tensor, kind: str, op: str) -> None:
        """``target``'s elements drawn afresh in place: new variables, seen by every random tensor that shares
        them, as a view and the tensor it views share memory (vLLM's ``q[i].exponential_(generator=g)`` on a row
        of a random ``q``). A concrete tensor drawn in part (``torch.empty_like``, then a row drawn) becomes a random
        tensor whose other elements are constants (a ``fill`` map, as ``masked_fill`` makes). A tensor sharing the
        elements whose values went through other maps is refused: those maps would apply to values drawn after
        them."""
        storage = target.untyped_storage().data_ptr()
        sharing = [(t, s) for t, s in self._symbolic.values()
                   if t is not target and t.device == target.device and t.untyped_storage().data_ptr() == storage]
        self._fresh(target, kind)
        base = target._base
        if base is not None and self.symbolic(base) is None:
            constants = base.detach().to(torch.float64, copy=True)  # NaN where just drawn: a fill's "left alone"
            sharing.append((base, Symbolic(self._variables(base.shape, kind, base.dtype), [("fill", constants)])))
            self.register(base, sharing[-1][1])
        drawn = dict(zip(element_addresses(target), self.symbolic(target).ids.reshape(-1).tolist()))
        for t, sym in sharing:
            addresses = element_addresses(t)
            hit = [a in drawn for a in addresses]
            if not any(hit):
                continue
            if any(name != "fill" for name, _ in sym.ops):
                raise _fail(op, "a draw in place over random values that maps have changed")
            ids = [drawn[a] if h else i for a, h, i in zip(addresses, hit, sym.ids.reshape(-1).tolist())]
            left = torch.tensor(hit).reshape(t.shape)  # the fills no longer apply where drawn
            ops = [(name, c.broadcast_to(t.shape).masked_fill(left, math.nan)) for name, c in sym.ops]
            self._symbolic[id(t)] = (t, Symbolic(torch.tensor(ids, dtype=torch.long).reshape(t.shape), ops))

    def _discrete(self, name: str, args, kwargs):
        weights = args[0]
        if self.symbolic(weights) is not None:
            raise _fail(name, "its probabilities are random values")
        if name == "multinomial":
            count = kwargs.get("num_samples", args[1] if len(args) > 1 else None)
            replacement = kwargs.get("replacement", args[2] if len(args) > 2 else False)
            return self._multinomial(weights, int(count), bool(replacement))
        prob = kwargs.get("p", args[1] if len(args) > 1 else None)
        probs = weights if prob is None else torch.full_like(weights, float(prob))
        out = torch.tensor([self._bernoulli(float(p)) for p in probs.reshape(-1).tolist()],
                           dtype=weights.dtype, device=weights.device).reshape(weights.shape)
        if name == "bernoulli_":
            with torch.no_grad():
                weights.copy_(out)
            return weights
        return out

    def _multinomial(self, weights: torch.Tensor, count: int, replacement: bool) -> torch.Tensor:
        if weights.dim() not in (1, 2):
            raise _fail("multinomial", f"needs a 1-D or 2-D weight tensor, got shape {tuple(weights.shape)}")
        rows = weights.reshape(-1, weights.shape[-1]).tolist()
        out = []
        for row in rows:
            if not all(math.isfinite(w) and w >= 0 for w in row) or not any(w > 0 for w in row):
                raise _fail("multinomial", f"weights must be finite, non-negative and not all zero, got {row}")
            exact = [Fraction(w) for w in row]
            if not replacement and count > sum(w > 0 for w in exact):
                raise _fail("multinomial", f"{count} draws without replacement from {sum(w > 0 for w in exact)} "
                                           "positive weights")
            drawn = []
            for _ in range(count):
                i = self.rng.categorical(exact)
                drawn.append(i)
                if not replacement:
                    exact[i] = Fraction(0)
            out.append(drawn)
        result = torch.tensor(out, dtype=torch.long, device=weights.device)
        return result[0] if weights.dim() == 1 else result

    def _bernoulli(self, prob: float) -> bool:
        fake = torch.empty((), dtype=torch.float32)
        self._fresh(fake, "uniform")
        var = int(self.symbolic(fake).ids)
        return self._decide(var, "lt", _exact(prob))

    # ---- maps ---------------------------------------------------------------------------------------------
    def _binary(self, name: str, args, kwargs):
        a, b = args[0], args[1] if len(args) > 1 else kwargs.get("other")
        first, second = _BINARY[name]
        if "alpha" in kwargs or "rounding_mode" in kwargs:
            raise _fail(name, "alpha= and rounding_mode= on a random value are not modelled")
        sa, sb = self.symbolic(a), self.symbolic(b)
        if sa is not None and sb is not None:
            raise _fail(name, "an op on two random values cannot be resolved exactly")
        in_place = name.endswith("_") and not name.startswith("__")
        if sa is not None:
            op, sym_arg, other = first, a, b
        else:
            op, sym_arg, other = second, b, a
            if op is None:
                raise _fail(name, "unexpected operand order")
        dtype = a.dtype if in_place else torch.result_type(a, b)
        own = in_place and sa is not None  # the random tensor itself is modified
        if op == "sub":
            result = self._map(sym_arg, "add", -_as_tensor(other), own, dtype)
        elif op == "rsub":
            result = self._map(self._map(sym_arg, "neg", None, own, dtype), "add", other, own, dtype)
        else:
            result = self._map(sym_arg, op, other, own, dtype)
        return self._become(a, result, name) if in_place and sa is None else result

    def _become(self, target: torch.Tensor, result: torch.Tensor, op: str) -> torch.Tensor:
        """``target``, a concrete tensor modified in place by a random operand (``c.div_(u)``), holding ``result``'s
        random values from now on."""
        if result.shape != target.shape:
            raise _fail(op, "an in-place op that broadcasts a concrete tensor")
        sym = self.symbolic(result)
        return self.register(target, Symbolic(sym.ids, list(sym.ops)))

    def _map(self, x: torch.Tensor, op: str, operand, in_place: bool,
             dtype: torch.dtype | None = None) -> torch.Tensor:
        """``op`` with a concrete ``operand`` applied to the random tensor ``x``: to ``x`` itself (``in_place``) or
        into a new random tensor of ``dtype`` (default: ``x``'s)."""
        sym = self.symbolic(x)
        shape = x.shape
        if operand is not None:
            operand = _as_tensor(operand)
            shape = torch.broadcast_shapes(shape, operand.shape)
        base = sym.broadcast(shape)
        # copied: ``.to`` returns the tensor itself when it is float64 already, and the operand may be the very
        # tensor registered (filled with NaN) next (``c.div_(u)``) or one the kernel changes later
        ops = base.ops + [(op, None if operand is None
                           else operand.detach().to(torch.float64, copy=True).broadcast_to(shape))]
        if in_place:
            if shape != x.shape:
                raise _fail(op, "an in-place op that broadcasts a random tensor")
            if x._base is not None and self.symbolic(x._base) is not None:
                raise _fail(op, "an in-place op on a view of a random tensor (the tensor viewed would not see it)")
            return self.register(x, Symbolic(base.ids, ops))
        fake = torch.empty(shape, dtype=dtype or x.dtype, device=x.device)
        return self.register(fake, Symbolic(base.ids, ops))

    def _clamp(self, name: str, args, kwargs) -> torch.Tensor:
        """``clamp(x, lo, hi) = min(max(x, lo), hi)``, monotone in ``x`` and in each bound: recorded as ``max`` and
        ``min`` maps of the one random argument, which :meth:`resolve` inverts exactly."""
        x, positional, (lo_key, hi_key) = args[0], list(args[1:]), _CLAMP[name]
        lo = kwargs.get(lo_key, positional.pop(0) if positional else None) if lo_key else None
        hi = kwargs.get(hi_key, positional.pop(0) if positional else None) if hi_key else None
        if lo is None and hi is None:
            raise _fail(name, "neither min nor max given")
        random = [v for v in (x, lo, hi) if self.symbolic(v) is not None]
        if len(random) > 1:
            raise _fail(name, "a clamp of two random values cannot be resolved exactly")
        in_place = name.endswith("_")
        dtype = x.dtype if in_place else torch.clamp(x, lo, hi).dtype  # torch's promotion, on the NaN placeholders
        if random[0] is x:
            out = x
            for op, bound in (("max", lo), ("min", hi)):
                if bound is not None:
                    out = self._map(out, op, bound, in_place or out is not x, dtype)
            return out
        if random[0] is lo:  # min(max(lo, x), hi): max with the concrete x, then min with hi
            out = self._map(lo, "max", x, False, dtype)
            out = out if hi is None else self._map(out, "min", hi, True)
        else:  # min(hi, max(x, lo)): the concrete part clamped first
            out = self._map(hi, "min", x if lo is None else torch.clamp(x, min=lo), False, dtype)
        return self._become(x, out, name) if in_place else out

    def _masked_fill(self, name: str, args, kwargs) -> torch.Tensor:
        """``x.masked_fill(mask, value)`` with a concrete mask: a random ``x``'s masked elements become the constant
        ``value``; a concrete ``x`` filled with a random 0-dim ``value`` is that value with its unmasked elements
        kept constant. Either way a ``fill`` map, constant where filled."""
        x = args[0]
        mask = kwargs.get("mask", args[1] if len(args) > 1 else None)
        value = kwargs.get("value", args[2] if len(args) > 2 else None)
        if self.symbolic(mask) is not None:
            raise _fail(name, "a random mask is not modelled")
        if self.symbolic(x) is not None and self.symbolic(value) is not None:
            raise _fail(name, "a fill of two random values cannot be resolved exactly")
        mask, in_place = _as_tensor(mask).to(torch.bool), name.endswith("_")
        nan = torch.tensor(math.nan, dtype=torch.float64)
        if self.symbolic(x) is not None:
            constant = _as_tensor(value).to(torch.float64)
            if constant.isnan().any():
                raise _fail(name, "a NaN fill value")
            return self._map(x, "fill", torch.where(mask, constant, nan), in_place)
        kept = x.to(torch.float64)
        if (kept.isnan() & ~mask).any():
            raise _fail(name, "NaN among the elements a random fill keeps")
        out = self._map(value, "fill", torch.where(mask, nan, kept), False, x.dtype)
        return self._become(x, out, name) if in_place else out

    # ---- comparisons --------------------------------------------------------------------------------------
    def _compare(self, cmp: str, args) -> torch.Tensor:
        a, b = args[0], args[1]
        sa, sb = self.symbolic(a), self.symbolic(b)
        if sa is not None and sb is not None:
            raise _fail(cmp, "a comparison of two random values cannot be resolved exactly")
        x, other = (a, b) if sa is not None else (b, a)
        if sa is None:
            cmp = _FLIP[cmp]
        other = _as_tensor(other)
        shape = torch.broadcast_shapes(x.shape, other.shape)
        sym = self.symbolic(x).broadcast(shape)
        thresholds = other.to(torch.float64).broadcast_to(shape).reshape(-1).tolist()
        ids = sym.ids.reshape(-1).tolist()
        operands = [(n, None if c is None else c.reshape(-1).tolist()) for n, c in sym.ops]
        out = [self.resolve(ids[e], [(n, None if c is None else c[e]) for n, c in operands], cmp, thresholds[e])
               for e in range(len(ids))]
        return torch.tensor(out, dtype=torch.bool, device=x.device).reshape(shape)

    def resolve(self, var: int, ops: list[tuple[str, float | None]], cmp: str, t: float) -> bool:
        """``f(x) cmp t`` for the variable ``x`` and the recorded maps ``f``, inverted map by map."""
        threshold: Fraction | float = _exact(t)
        for op, c in reversed(ops):
            if op == "add":
                threshold = threshold - _exact(c)
            elif op in ("mul", "div"):
                c = _exact(c)
                if c == 0 and op == "mul":  # x·0 = 0 for every value x takes: decided without a choice
                    return _HOLDS[cmp](0, threshold)
                if c == 0:
                    raise _fail(op, "a random value divided by zero")
                threshold = threshold / c if op == "mul" else threshold * c
                if c < 0:
                    cmp = _FLIP[cmp]
            elif op == "neg":
                threshold, cmp = -threshold, _FLIP[cmp]
            elif op == "log":
                threshold = _exact(math.exp(threshold)) if threshold < 709 else math.inf
            elif op == "exp":
                if threshold <= 0:  # exp(·) > 0 ≥ threshold
                    return cmp in ("gt", "ge")
                threshold = _exact(math.log(threshold))
            elif op in ("max", "min"):  # a clamp's bound c: where c alone settles the comparison, no choice
                c = _exact(c)
                if (op == "max") == (cmp in ("gt", "ge")):
                    if _HOLDS[cmp](c, threshold):  # max(x, c) > t when c > t; min(x, c) < t when c < t
                        return True
                elif not _HOLDS[cmp](c, threshold):  # max(x, c) < t needs c < t; min(x, c) > t needs c > t
                    return False
            elif op == "fill":
                if not math.isnan(c):  # a filled element is the constant c whatever x is
                    return _HOLDS[cmp](_exact(c), threshold)
            elif op == "round":  # rounded to nearest (ties to even) in the float type of c bits
                threshold, cmp = _unrounded(threshold, cmp, int(c))
            else:
                raise _fail(op, "a comparison through this map is not modelled")
            if threshold != threshold:  # ∞ − ∞ through an infinite operand
                raise _fail(op, "a threshold is NaN")
        return self._decide(var, cmp, threshold)

    def _decide(self, var: int, cmp: str, t: Fraction | float) -> bool:
        """``x cmp t`` for the variable itself: a choice with the exact conditional probability."""
        v = self.variables[var]
        if v.spent:
            raise _fail(cmp, "a random value read again after an argmax race consumed it")
        below = cmp in ("lt", "le")
        if v.bits is not None:  # grid: cells k with k·2^-b cmp t
            scaled = t * 2**v.bits if not math.isinf(t) else t
            if math.isinf(scaled):
                cut = v.hi + 1 if scaled > 0 else v.lo
            elif cmp in ("lt", "ge"):
                cut = math.ceil(scaled)  # x < t ⇔ k < ceil(t·2^b)
            else:
                cut = math.floor(scaled) + 1  # x <= t ⇔ k < floor(t·2^b) + 1
            cut = min(max(cut, v.lo), v.hi + 1)
            low_mass, mass = cut - v.lo, v.hi + 1 - v.lo
            prob_below = Fraction(low_mass, mass)
        else:
            cut = min(max(t, v.lo), v.hi)
            if v.kind == "uniform":
                prob_below = (cut - v.lo) / (v.hi - v.lo)
            elif v.kind == "normal":  # P(N < cut | lo <= N < hi), in floats, by the upper tail where it is small
                lo, hi, c = float(v.lo), float(v.hi), float(cut)
                tail = [0.5 * math.erfc(x / math.sqrt(2)) for x in (lo, c, hi)]  # P(N >= x)
                prob_below = _exact((tail[0] - tail[1]) / (tail[0] - tail[2]))
            else:  # exponential: P(E < cut | lo <= E < hi), in floats
                lo, hi, c = float(v.lo), float(v.hi), float(cut)
                prob_below = _exact((math.exp(-lo) - math.exp(-c)) / (math.exp(-lo) - (0.0 if math.isinf(hi)
                                                                                         else math.exp(-hi))))
        if prob_below == 0 or prob_below == 1:
            went_below = prob_below == 1
        else:
            self.decisions += v.kind == "uniform"
            went_below = self.rng.bernoulli(prob_below)
        v.fresh = False
        if v.bits is not None:
            v.lo, v.hi = (v.lo, cut - 1) if went_below else (cut, v.hi)
        else:
            v.lo, v.hi = (v.lo, cut) if went_below else (cut, v.hi)
        return went_below == below

    # ---- exponential races ----------------------------------------------------------------------------------
    def race(self, name: str, args, kwargs):
        """``argmax`` or ``max`` (``name``) over a random tensor whose keys are one common increasing function of
        ``w / E``: an exponential race, its winner drawn by one categorical on the weights ``w``; every raced
        variable is spent."""
        x = args[0]
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
        if name == "max" and dim is None:
            raise _fail("max", "max over a random tensor without dim= is not modelled")
        sym = self.symbolic(x)
        ids, ops = sym.ids, sym.ops
        if dim is None:
            ids, ops, dim = ids.reshape(-1), [(n, None if c is None else c.reshape(-1)) for n, c in ops], 0
        ids = ids.movedim(dim, -1)
        width = ids.shape[-1]
        id_rows = ids.reshape(-1, width).tolist()
        op_rows = [(n, None if c is None else c.movedim(dim, -1).reshape(-1, width).tolist()) for n, c in ops]
        winners = []
        for r, row in enumerate(id_rows):
            if len(set(row)) != len(row):
                raise _fail(name, "a race in which one random value appears twice")
            forms = [self.race_form(row[e], [(n, None if c is None else c[r][e]) for n, c in op_rows])
                     for e in range(width)]
            if len({s for _, s in forms}) != 1:
                raise _fail(name, "the race's keys are not one common increasing function of w/E")
            weights = _race_weights([w for w, _ in forms])
            winners.append(0 if weights is None else self.rng.categorical(weights))
            for v in row:
                self.variables[v].spent = True
        shape = list(ids.shape[:-1])
        index = torch.tensor(winners, dtype=torch.long, device=x.device).reshape(shape)
        if keepdim:
            index = index.unsqueeze(dim)
        if name == "argmax":
            return index
        values = torch.empty(index.shape, dtype=x.dtype, device=x.device)
        spent_ids = torch.gather(sym.ids, dim, index if keepdim else index.unsqueeze(dim))
        spent = self.register(values, Symbolic(spent_ids if keepdim else spent_ids.squeeze(dim)))
        return torch.return_types.max((spent, index))

    def race_form(self, var: int, ops: list[tuple[str, float | None]]) -> tuple[tuple[str, object], float]:
        """The key ``G(w / E)`` of one element, as ``(("w", w) or ("log", log w), s)``: the race's weight and the
        common exponent ``s`` of ``G``; :class:`KernelError` when the maps are not of that form."""
        v = self.variables[var]
        if not v.fresh or v.spent:
            raise _fail("argmax", "a race on a random value already compared or raced")
        if v.kind == "normal":
            raise _fail("argmax", "an argmax of normals is not an exponential race")
        state, scale, w, lw, s = ("U" if v.kind == "uniform" else "E"), Fraction(1), Fraction(1), 0.0, 1.0
        for op, c in ops:
            if op == "fill" and math.isnan(c):  # an element masked_fill left alone
                continue
            c = None if c is None else _exact(c)
            if state == "U" and op == "log":
                state = "logU"
            elif state == "logU" and op == "neg":
                state = "E"
            elif state == "E" and op in ("mul", "div") and c > 0:
                scale = scale * c if op == "mul" else scale / c
            elif state == "E" and op in ("reciprocal", "rdiv") and (op == "reciprocal" or c >= 0):
                state, w = "ratio", (Fraction(1) if op == "reciprocal" else c) / scale
            elif state == "E" and op == "log":
                state, lw = "logE", math.log(scale)
            elif state == "logE" and op == "add":
                lw += float(c)
            elif state == "logE" and op == "neg":
                state, lw = "log", -lw
            elif state == "ratio" and op in ("mul", "div") and c >= 0 and (op == "mul" or c > 0):
                w = w * c if op == "mul" else w / c
            elif state == "ratio" and op == "log":
                state, lw = "log", (math.log(w) if w > 0 else -math.inf)
            elif state == "log" and op == "add":
                lw += float(c) / s
            elif state == "log" and op in ("mul", "div") and c > 0:
                s = s * float(c) if op == "mul" else s / float(c)
            elif state == "log" and op == "exp":
                state, w = "ratio_s", lw
            elif state == "ratio_s" and op in ("mul", "div") and c > 0:
                w += (math.log(c) if op == "mul" else -math.log(c)) / s
            elif state == "ratio_s" and op == "log":
                state, lw = "log", w
            else:
                raise _fail("argmax", f"a race key through {op!r} is not of the form G(w/E)")
        if state == "ratio":
            return ("w", w), s
        if state in ("log", "ratio_s"):
            return ("log", lw if state == "log" else w), s
        raise _fail("argmax", "an argmax of random values that is not an exponential race")


def _unrounded(t: Fraction | float, cmp: str, bits: int) -> tuple[Fraction | float, str]:
    """``round(x) cmp t`` as a comparison of ``x`` itself, ``round`` to the nearest float of ``bits`` bits (16 or
    32), ties to even: monotone, so ``round(x) <= g`` for ``g`` the largest such float ``<= t`` (``< t`` for
    ``lt``, ``ge``) holds exactly below the midpoint of ``g`` and the next float, at it when ``g`` is even."""
    if math.isinf(t):
        return t, cmp
    kind = {16: np.float16, 32: np.float32}[bits]
    g = kind(float(t))
    strict = cmp in ("lt", "ge")
    while Fraction(float(g)) > t or (strict and Fraction(float(g)) == t):
        g = np.nextafter(g, kind(-np.inf))
    while Fraction(float(np.nextafter(g, kind(np.inf)))) < t or (
            not strict and Fraction(float(np.nextafter(g, kind(np.inf)))) == t):
        g = np.nextafter(g, kind(np.inf))
    mid = (Fraction(float(g)) + Fraction(float(np.nextafter(g, kind(np.inf))))) / 2
    even = int(g.view(f"uint{bits}")) % 2 == 0  # the midpoint rounds to g when g is even
    if cmp in ("lt", "le"):  # round(x) <= g
        return mid, "le" if even else "lt"
    return mid, "gt" if even else "ge"  # not round(x) <= g


def _race_weights(forms: list[tuple[str, object]]) -> list | None:
    """Exact weights when every key kept its weight multiplicatively, else ``exp(log w − max)`` in floats;
    ``None`` when every weight is zero (argmax of equal keys: index 0)."""
    if all(kind == "w" for kind, _ in forms):
        weights = [w for _, w in forms]
        return weights if any(w > 0 for w in weights) else None
    logs = [math.log(v) if kind == "w" and v > 0 else (-math.inf if kind == "w" else v) for kind, v in forms]
    top = max(logs)
    if math.isinf(top):
        return None
    return [_exact(math.exp(v - top)) if not math.isinf(v) else Fraction(0) for v in logs]


def element_addresses(t: torch.Tensor) -> list[int]:
    """The address of each element of the CPU tensor ``t``, in row-major order."""
    offsets = np.zeros(tuple(t.shape), dtype=np.int64)
    for axis, (size, stride) in enumerate(zip(t.shape, t.stride())):
        shape = [1] * t.dim()
        shape[axis] = size
        offsets = offsets + np.arange(size, dtype=np.int64).reshape(shape) * stride
    return (t.data_ptr() + offsets.reshape(-1) * t.element_size()).tolist()


def _as_tensor(x) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=torch.float64)


def default_generators() -> list[torch.Generator]:
    """torch's default generators: the CPU one and, once CUDA is initialised, one per CUDA device."""
    return [torch.default_generator, *torch.cuda.default_generators]


class _GeneratorWatch:
    """Notices random numbers drawn past :class:`Capture`: a random op inside a torch helper the function mode
    cannot see into (``F.gumbel_softmax``, dropout) advances a generator, a routed op does not. Watched: the
    ``generators`` given (:func:`default_generators`) and any a call names by ``generator=``. Cheaper by an order
    of magnitude than a dispatch mode on every ATen op, and it names the torch call."""

    def __init__(self, generators: Sequence[torch.Generator]) -> None:
        self.saved: dict[int, tuple[torch.Generator, torch.Tensor, bytes]] = {}
        for generator in generators:
            self.add(generator)
        self.cuda_devices = len(torch.cuda.default_generators)

    def add(self, generator: torch.Generator | None) -> None:
        """Watch ``generator`` too, from its state now (``None``: nothing to add)."""
        if generator is not None and id(generator) not in self.saved:
            state = generator.get_state()
            self.saved[id(generator)] = (generator, state, state.numpy().tobytes())

    def drew(self) -> str | None:
        """What moved since the last look, or ``None``. A generator that moved is put back: a kernel under capture
        never disturbs the caller's random streams. CUDA initialised since the watch began is reported too: its
        generators did not exist to be watched, so a draw in that call cannot be told apart."""
        moved = None
        for generator, state, fingerprint in self.saved.values():
            if generator.get_state().numpy().tobytes() != fingerprint:
                generator.set_state(state)
                moved = "drew random numbers inside a torch helper specproof does not model exactly"
        if len(torch.cuda.default_generators) != self.cuda_devices:
            for generator in torch.cuda.default_generators:
                self.add(generator)
            self.cuda_devices = len(torch.cuda.default_generators)
            moved = ("initialised CUDA inside the kernel, so a draw on its generators cannot be seen (initialise it "
                     "before: torch.cuda.init() when the kernel's module is imported)")
        return moved


def compiled_code_eager() -> contextlib.AbstractContextManager:
    """``torch.compile``d code runs eagerly inside the block (the ``force_eager`` stance, torch ≥ 2.6), so the mode
    sees its ops one by one instead of dynamo tracing and caching graphs around the mode's own decisions. Without
    dynamo imported nothing can have been compiled, and importing it costs seconds: then nothing to do."""
    stance = getattr(torch.compiler, "set_stance", None)
    if "torch._dynamo" not in sys.modules or stance is None:
        return contextlib.nullcontext()
    return stance("force_eager")


#: how to get Python in place of TorchScript the capture cannot run as Python
SCRIPTED_WAY_OUT = "run with PYTORCH_JIT=0 or define it without @torch.jit.script"


@contextlib.contextmanager
def scripted_code_as_python() -> Iterator[None]:
    """TorchScript runs in its own interpreter, which no torch function mode sees: its random ops would escape and
    it would compute on the placeholders of random values. Inside the block a scripted function runs as the
    Python function torch keeps beside it (``_torchdynamo_inline``), its ops seen; a scripted method (a
    ``ScriptModule``'s), which keeps none, is refused, named. The two classes' ``__call__`` are replaced for the
    block (one capture runs at a time in a process) and put back after, even on error."""
    function, method = torch.jit.ScriptFunction, torch._C.ScriptMethod
    saved = vars(function)["__call__"], vars(method)["__call__"]

    def as_python(self, *args, **kwargs):
        original = getattr(self, "_torchdynamo_inline", None)
        if original is None:
            raise _fail(self.qualified_name.removeprefix("__torch__."),
                        f"a TorchScript function without its Python source: {SCRIPTED_WAY_OUT}")
        return original(*args, **kwargs)

    def refused(self, *args, **kwargs):
        name = f"{self.owner._type().qualified_name().removeprefix('__torch__.')}.{self.name}"
        raise _fail(name, f"a TorchScript module's method, whose ops the capture cannot see: {SCRIPTED_WAY_OUT}")

    function.__call__, method.__call__ = as_python, refused
    try:
        yield
    finally:
        function.__call__, method.__call__ = saved


@contextlib.contextmanager
def capture(rng: Randomness, uniforms: str = "continuous", precision: Precision | None = None) -> Iterator[Capture]:
    """Run torch code with its random ops decided by ``rng`` (what is modelled: docs/kernels.md); ``precision``
    collects the lowest precision of its concrete arithmetic across calls.

    While active, a :class:`torch.overrides.TorchFunctionMode` hands the kernel's random ops to ``rng``. Modelled
    exactly: ``torch.multinomial``, uniforms compared with concrete thresholds (through monotone maps, clamps and
    masked fills; one Bernoulli each) and exponential races (``argmax(w / E)``, Gumbel-max); any other use of a random
    value raises :class:`~simulator.errors.KernelError`. Uniforms are ``continuous`` or ``grid``
    (:data:`GRID_BITS`). The lowest precision of the kernel's concrete arithmetic is recorded (:class:`Precision`),
    and its certificate is judged at it.
    """
    mode = Capture(rng, uniforms, precision)
    with compiled_code_eager(), scripted_code_as_python(), mode, mode.sources:
        yield mode
