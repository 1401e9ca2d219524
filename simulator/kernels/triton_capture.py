"""Triton kernels under the torch capture: a random value followed through Triton's interpreter, exactly
(:func:`interpreted`); what is resolved and what is refused: docs/kernels.md, "Triton kernels"."""

from __future__ import annotations

import contextlib
import functools
import math
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterator

import numpy as np
import torch

from simulator.errors import KernelError
from simulator.kernels.capture import Capture, Symbolic, Variable, element_addresses, kernel_line
from simulator.kernels.triton_compat import interpreter_scalar_index

TESTED_TRITON = ("3.5.1",)
_MARK = "specproof.random"  # the key of a random block in a TensorHandle's attr
_PENDING = "specproof.pending"  # the key of a race not yet decided (a PendingRace) in a TensorHandle's attr
_RACEMAX = "specproof.racemax"  # the key of a race's maximum key: an object array, each lane's PendingRace or None
# builder comparisons: name -> the torch capture's comparison (ordered and unordered alike: a threshold is never
# NaN, Capture.resolve refuses one)
_CMP = {f"create_fcmp{order}{cmp}": cmp.lower() for order in "OU" for cmp in ("LT", "LE", "GT", "GE")}
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
# a value compared with itself (not NaN): equal, never unequal
_SELF_COMPARE = {f"create_fcmp{order}{cmp}": cmp == "EQ" for order in "OU" for cmp in ("EQ", "NE")}
# elementwise maps with one concrete operand: name -> (map when the random value is first, when it is second)
_BINARY = {"create_fadd": ("add", "add"), "create_fsub": ("sub", "rsub"), "create_fmul": ("mul", "mul"),
           "create_fdiv": ("div", "rdiv"), "create_precise_divf": ("div", "rdiv"),
           "create_minimumf": ("min", "min"), "create_minnumf": ("min", "min"),
           "create_maximumf": ("max", "max"), "create_maxnumf": ("max", "max")}
_UNARY = {"create_exp": "exp", "create_log": "log"}
# a float widened keeps its value; one narrowed is rounded to nearest (the torch capture's ``round`` map)
_CASTS = ("create_fp_ext", "create_fp_trunc")
_ROUNDED = {"fp32": 32, "fp16": 16}
# concrete operations whose result's precision counts (not loads, splats, widenings: a kernel's fp32 literal is
# exact)
_ARITHMETIC = {*_BINARY, *_UNARY, "create_fp_trunc", "create_fma", "create_sqrt", "create_precise_sqrt",
               "create_rsqrt", "create_exp2", "create_log2", "create_sin", "create_cos", "create_erf", "create_frem",
               "create_dot"}
# Triton's in-kernel draws: tl.rand is modelled, the others (Philox's raw bits, normals, ...) refused
_DRAWS = ("rand", "randint", "randint4x", "rand4x", "randn", "randn4x", "philox", "philox_impl")
_NP_EPS = {np.dtype(np.float64): torch.finfo(torch.float64).eps, np.dtype(np.float32): torch.finfo(torch.float32).eps,
           np.dtype(np.float16): torch.finfo(torch.float16).eps}
_NP_TORCH = {np.dtype(np.float64): torch.float64, np.dtype(np.float32): torch.float32,
             np.dtype(np.float16): torch.float16}


@dataclass
class RandomBlock:
    """The random elements of one interpreter value: each element's variable (``-1``: a concrete element, its value
    in the handle's data) and the maps applied, in order, each operand an array of the block's shape."""

    ids: np.ndarray
    ops: list[tuple[str, np.ndarray | None]]

    def relaid(self, fn: Callable[[np.ndarray], np.ndarray]) -> "RandomBlock":
        return RandomBlock(fn(self.ids), [(n, None if c is None else fn(c)) for n, c in self.ops])


@dataclass
class PendingRace:
    """The winners of ``tl.argmax`` races not yet decided: one ``(ids, values, operands)`` row per element. A race
    is decided when its result is first used (an operation, a condition, a load of where it was stored), so races
    whose results are never read (vLLM's recovered token at every position, only the first rejected one read) do
    not condition each other; two races on one set of exponentials both read are refused."""

    rows: list[tuple[list[int], np.ndarray, list]]
    shape: tuple[int, ...]
    where: str  # the program and kernel line of the tl.argmax
    decided: np.ndarray | None = None

    def settle(self, capture_: "_Interpreted") -> np.ndarray:
        if self.decided is None:
            self.decided = np.array([capture_.race_row(*row) for row in self.rows], dtype=np.int64).reshape(
                self.shape)
            capture_.mode.last_race = (f"lane {int(self.decided.reshape(-1)[-1])} of {len(self.rows[-1][0])} in "
                                       f"{self.where}")
        return self.decided


def _racemax(value: object) -> np.ndarray | None:
    attr = getattr(value, "attr", None)
    return attr.get(_RACEMAX) if isinstance(attr, dict) else None


def _pending(value: object) -> PendingRace | None:
    attr = getattr(value, "attr", None)
    return attr.get(_PENDING) if isinstance(attr, dict) else None


def _sentinel(dtype: np.dtype) -> int:
    """What memory holds where an undecided race's winner was stored: the integer type's least value."""
    return int(np.iinfo(dtype).min)


def _fail(op: str, why: str) -> KernelError:
    return KernelError("kernel", f"{op.removeprefix('create_')}: {why} ({kernel_line()})")


def block_of(value: object) -> RandomBlock | None:
    """The random elements of an interpreter value, ``None`` when it holds none."""
    attr = getattr(value, "attr", None)
    return attr.get(_MARK) if isinstance(attr, dict) else None


def _marked(handle, block: RandomBlock):
    if (block.ids >= 0).any():
        handle.attr[_MARK] = block
    return handle


class _Interpreted:
    """The wrapped builder methods of one capture: ``mode`` decides, ``addresses`` maps a random element's address
    to its variable and maps (rebuilt at each launch, since the kernel's torch code registers new tensors)."""

    def __init__(self, mode: Capture) -> None:
        self.mode = mode
        self.addresses: dict[int, tuple[np.dtype, int, tuple]] = {}
        self.keyed: dict[tuple, int] = {}  # a keyed draw's (space, *key) -> its variable
        self.stored: dict[int, tuple[np.dtype, int, tuple]] = {}  # random elements the kernels stored, by address
        self.stored_at: dict[int, str] = {}  # the kernel line that stored each
        self.maxima: dict[int, PendingRace] = {}  # races' maximum keys the kernels stored, by address
        # undecided winners stored: address -> (race, element, dtype in memory)
        self.waiting: dict[int, tuple[PendingRace, int, np.dtype]] = {}

    def rand(self, seed, offset, n_rounds=None):
        """``tl.rand(seed, offset)``: a fresh uniform per ``(seed, offset)``, the same variable when a key is read
        again (so an offset reused for two purposes shows as the loss it causes)."""
        from triton import language as tl

        return self.keyed_draw("tl.rand", tl.float32, seed, offset)

    def rand4x(self, seed, offsets, n_rounds=None):
        """``tl.rand4x(seed, offsets)``: four fresh uniforms per ``(seed, offset)``, keyed apart from ``tl.rand``'s."""
        from triton import language as tl

        return tuple(self.keyed_draw(f"tl.rand4x[{k}]", tl.float32, seed, offsets) for k in range(4))

    def randn(self, seed, offset, n_rounds=None):
        """``tl.randn(seed, offset)``: a fresh standard normal per ``(seed, offset)`` (its comparisons decided by the
        normal CDF, in floats, as an exponential's are)."""
        from triton import language as tl

        return self.keyed_draw("tl.randn", tl.float32, seed, offset, kind="normal")

    def randn4x(self, seed, offset, n_rounds=None):
        """``tl.randn4x(seed, offset)``: four fresh standard normals per ``(seed, offset)``."""
        from triton import language as tl

        return tuple(self.keyed_draw(f"tl.randn4x[{k}]", tl.float32, seed, offset, kind="normal") for k in range(4))

    def keyed_draw(self, space: str, dtype, *parts, kind: str = "uniform"):
        """A uniform drawn from integer keys (``tl.rand``'s Philox, or a helper an adapter names as a keyed
        uniform, :func:`interpreted`): a fresh variable per distinct key in ``space``, broadcast over the parts'
        shapes, of ``dtype``'s values."""
        from triton import language as tl
        from triton.runtime.interpreter import TensorHandle

        if self.mode.grid and kind == "uniform":
            raise _fail(space, f"{space} has no grid model (its values are not torch's uniform grid): certify "
                               "with --uniforms continuous")
        if any(block_of(getattr(x, "handle", None)) is not None for x in parts):
            raise _fail(space, "a key (seed, offset) made from a random value")
        arrays = [np.asarray(getattr(getattr(x, "handle", None), "data", x)) for x in parts]
        if any(a.dtype.kind not in "iu" for a in arrays):
            raise _fail(space, f"its keys must be integers, got {', '.join(str(a.dtype) for a in arrays)}")
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        keys = zip(*(np.broadcast_to(a, shape).reshape(-1).tolist() for a in arrays))
        ids = np.array([self.keyed[(space, *key)] if (space, *key) in self.keyed
                        else self.keyed.setdefault((space, *key), self.fresh(kind)) for key in keys], dtype=np.int64)
        kind = np.float64 if dtype == tl.float64 else np.float32
        handle = _marked(TensorHandle(np.full(shape, math.nan, dtype=kind), dtype), RandomBlock(ids.reshape(shape), []))
        typed = next((x.type for x in parts if getattr(getattr(x, "type", None), "is_block", lambda: False)()), None)
        return tl.tensor(handle, tl.block_type(dtype, typed.shape) if typed is not None else dtype)

    def argmax(self, original: Callable, input, axis, tie_break_left=True, keep_dims=False):
        """``tl.argmax`` of random values: the torch capture's exponential race (``argmax(w / E)``, Gumbel-max),
        its exact law, each row raced apart; of concrete values, Triton's own. A concrete element beside random
        ones (a masked lane's fill) takes part where it provably never wins: a value ``<= 0`` against keys
        ``w / E`` with some ``w > 0``, or ``-inf``; any other is refused."""
        from triton import language as tl
        from triton.runtime.interpreter import TensorHandle

        block = block_of(getattr(input, "handle", None))
        maxima = _racemax(getattr(input, "handle", None))
        if maxima is not None:
            return self.argmax_of_maxima(input, maxima, axis, keep_dims)
        if block is None:
            return original(input, axis, tie_break_left=tie_break_left, keep_dims=keep_dims)
        axis = int(axis) % block.ids.ndim
        rows = np.moveaxis(block.ids, axis, -1)
        width, shape = rows.shape[-1], rows.shape[:-1]
        values = np.moveaxis(np.broadcast_to(input.handle.data, block.ids.shape), axis, -1).reshape(-1, width)
        operands = [(n, None if c is None else np.moveaxis(np.broadcast_to(c, block.ids.shape), axis, -1)
                     .reshape(-1, width)) for n, c in block.ops]
        from triton.runtime.interpreter import interpreter_builder

        where = f"program {tuple(int(i) for i in interpreter_builder.grid_idx)} at {kernel_line()}"
        race = PendingRace([(ids, values[r], [(n, None if c is None else c[r]) for n, c in operands])
                            for r, ids in enumerate(rows.reshape(-1, width).tolist())], tuple(shape), where)
        if keep_dims:
            race.shape = tuple(np.expand_dims(np.empty(shape), axis).shape)
        data = np.full(race.shape or (1,), _sentinel(np.dtype(np.int32)), dtype=np.int32)
        handle = TensorHandle(data, tl.int32)
        handle.attr[_PENDING] = race
        if not race.shape:
            return tl.tensor(handle, tl.int32)
        return tl.tensor(handle, tl.block_type(tl.int32, list(race.shape)))

    def settle(self, value: object) -> None:
        """Decide the race ``value`` (a handle) is the winner of, in place."""
        race = _pending(value)
        if race is not None:
            value.data = race.settle(self).reshape(value.data.shape).astype(value.data.dtype)
            del value.attr[_PENDING]

    def argmax_of_maxima(self, input, maxima: np.ndarray, axis, keep_dims: bool):
        """``tl.argmax`` over tiles' race maxima (MRv2's best tile): where one lane holds a maximum and every other
        is ``-inf``, that lane, whatever the race decides; several races' maxima together are refused (their joint
        law is the race of their union, not modelled)."""
        from triton import language as tl
        from triton.runtime.interpreter import TensorHandle

        if maxima.ndim != 1:
            raise _fail("argmax", "an argmax over a block of races' maxima of more than one axis is not modelled")
        lanes = [e for e, race in enumerate(maxima.tolist()) if race is not None]
        values = np.asarray(input.handle.data).reshape(-1)
        if len(lanes) != 1 or any(values[e] != -math.inf for e in range(len(values)) if e not in lanes):
            raise _fail("argmax", "an argmax over several races' maxima (a vocabulary of more than one tile) is not "
                                  "modelled")
        data = np.array([lanes[0]], dtype=np.int32)
        return tl.tensor(TensorHandle(data, tl.int32), tl.int32)

    def maximum(self, original: Callable, input, axis=None, return_indices=False, return_indices_tie_break_left=True,
                keep_dims=False):
        """``tl.max(keys, axis, return_indices=True)`` of a race's keys (MRv2's Gumbel-max per vocabulary tile): the
        winner as :meth:`argmax` gives it, undecided, and the maximum key as a value that may only be stored,
        loaded, compared with itself (a NaN test) and raced against other tiles' maxima (one tile: it wins).
        Without ``return_indices``, or of concrete values, Triton's own."""
        from triton import language as tl
        from triton.runtime.interpreter import TensorHandle

        if block_of(getattr(input, "handle", None)) is None or not return_indices:
            return original(input, axis, return_indices=return_indices,
                            return_indices_tie_break_left=return_indices_tie_break_left, keep_dims=keep_dims)
        index = self.argmax(original, input, axis, keep_dims=keep_dims)
        race = _pending(index.handle)
        dtype = input.handle.data.dtype
        handle = TensorHandle(np.full(race.shape or (1,), math.nan, dtype=dtype), input.dtype.scalar)
        handle.attr[_RACEMAX] = np.full(race.shape or (1,), race, dtype=object)
        kind = input.dtype.scalar
        return tl.tensor(handle, tl.block_type(kind, list(race.shape)) if race.shape else kind), index

    def with_maxima(self, name: str, original, builder, args):
        """A builder operation on races' maximum keys: a comparison of one with itself, a ``tl.where`` passing
        them through; anything else refused."""
        marks = [_racemax(a) for a in args]
        out = original(builder, *args)
        if name in _CMP or name in _SELF_COMPARE:
            if marks[0] is None or marks[1] is None or not all(
                    a is b for a, b in zip(marks[0].reshape(-1), np.broadcast_to(marks[1], marks[0].shape).reshape(-1))):
                raise _fail(name, "a race's maximum key compared with anything but itself is not modelled")
            out.data = np.full(out.data.shape, _SELF_COMPARE.get(name, name.endswith(("LE", "GE"))))
            return out
        if name == "create_select" and marks[0] is None:
            shape = out.data.shape
            chosen = np.where(np.broadcast_to(args[0].data, shape),
                              *(np.broadcast_to(m if m is not None else np.full(shape, None, dtype=object), shape)
                                for m in marks[1:]))
            if any(x is not None for x in chosen.reshape(-1)):
                out.attr[_RACEMAX] = chosen
            return out
        raise _fail(name, "this operation on a race's maximum key is not modelled")

    def race_row(self, ids: list[int], values: np.ndarray, operands: list[tuple[str, np.ndarray | None]]) -> int:
        """The winner of one row's race: its random lanes raced by the torch capture (every lane's variable then
        spent), its concrete lanes (``ids`` -1, value in ``values``) checked never to win."""
        lanes = [e for e, var in enumerate(ids) if var >= 0]
        ops = [[(n, None if c is None else float(c[e])) for n, c in operands] for e in lanes]
        if len(lanes) < len(ids):
            forms = [self.mode.race_form(ids[e], op)[0] for e, op in zip(lanes, ops)]
            weights = [w for kind, w in forms if kind == "w"]
            ratios = len(weights) == len(forms)  # every key w / E: never negative
            if not ratios and not any(kind == "log" and w > -math.inf for kind, w in forms):
                raise _fail("argmax", "an argmax over concrete values and random keys that are all -inf")
            for e, var in enumerate(ids):
                if var < 0 and not (values[e] == -math.inf or (ratios and values[e] <= 0)):
                    raise _fail("argmax", f"an argmax over random values and the concrete value {values[e]} (lane "
                                          f"{e}), which could win")
            if ratios and not any(w > 0 for w in weights):  # every key exactly 0: the first lane of value 0 wins
                for e in lanes:
                    self.mode.variables[ids[e]].spent = True
                return int(np.argmax(np.where(np.array(ids) >= 0, 0.0, values)))
        fake = torch.empty(len(lanes), dtype=torch.float64)
        sym = Symbolic(torch.tensor([ids[e] for e in lanes], dtype=torch.long),
                       [(n, None if c is None else torch.tensor([op[k][1] for op in ops], dtype=torch.float64))
                        for k, (n, c) in enumerate(operands)])
        return lanes[int(self.mode.race("argmax", (self.mode.register(fake, sym),), {"dim": 0}))]

    def fresh(self, kind: str = "uniform") -> int:
        """A new variable of the capture: a uniform on [0, 1), or a standard normal."""
        bounds = (Fraction(0), Fraction(1)) if kind == "uniform" else (-math.inf, math.inf)
        self.mode.variables.append(Variable(kind, *bounds))
        return len(self.mode.variables) - 1

    def index(self) -> None:
        """The address of every element of every random tensor the torch capture holds, with its variable."""
        self.addresses.clear()
        for fake, sym in self.mode.random_tensors():
            if fake.device.type != "cpu" or fake.numel() == 0:
                continue
            dtype = np.dtype(torch.empty((), dtype=fake.dtype).numpy().dtype)
            addresses = element_addresses(fake)
            ids = sym.ids.reshape(-1).tolist()
            operands = [(n, None if c is None else c.broadcast_to(fake.shape).reshape(-1).tolist())
                        for n, c in sym.ops]
            for e, address in enumerate(addresses):
                self.addresses[address] = (dtype, ids[e], tuple((n, None if c is None else c[e]) for n, c in operands))
        self.addresses.update(self.stored)

    # ---- the wrapper ---------------------------------------------------------------------------------------
    def wrap(self, name: str, original: Callable) -> Callable:
        def wrapped(builder, *args, **kwargs):
            if name in ("create_load", "create_store"):  # each calls its masked form, handled below
                return original(builder, *args, **kwargs)
            if name == "create_masked_load":
                return self.load(original, builder, *args, **kwargs)
            if name == "create_masked_store":
                return self.store(original, builder, *args, **kwargs)
            for a in args:
                self.settle(a)
            if any(_racemax(a) is not None for a in args):
                return self.with_maxima(name, original, builder, args)
            blocks = [block_of(a) for a in args]
            if not any(b is not None for b in blocks):
                out = original(builder, *args, **kwargs)
                if name in _ARITHMETIC:
                    self.lowered(out)
                return out
            if name in _CMP:
                return self.compare(name, original, builder, *args)
            if name in _BINARY:
                return self.binary(name, original, builder, *args)
            if name in _UNARY or name in _CASTS:
                out = original(builder, *args, **kwargs)
                block = blocks[0]
                if name in _UNARY:
                    block = RandomBlock(block.ids, block.ops + [(_UNARY[name], None)])
                elif name == "create_fp_trunc":
                    block = self.rounded(block, args[1])
                return _marked(out, block)
            if name == "create_select":
                return self.select(original, builder, *args)
            layout, moved = _layout(name, args), blocks[1 if name == "create_splat" else 0]
            if layout is not None and moved is not None and sum(b is not None for b in blocks) == 1:
                return _marked(original(builder, *args, **kwargs), moved.relaid(layout))
            raise _fail(name, "this operation on a random value cannot be resolved exactly")
        wrapped.__wrapped__ = original
        return wrapped

    @staticmethod
    def rounded(block: RandomBlock, dtype) -> RandomBlock:
        """``block`` narrowed to ``dtype``: rounded to nearest, which comparisons invert exactly."""
        bits = _ROUNDED.get(dtype.scalar.name)
        if bits is None:
            raise _fail("fp_trunc", f"a random value narrowed to {dtype.scalar.name} is not modelled")
        return RandomBlock(block.ids, block.ops + [("round", np.full(block.ids.shape, float(bits)))])

    def lowered(self, out: object) -> None:
        """Record a concrete floating result below the precision seen so far (as the torch capture does)."""
        data = getattr(out, "data", None)
        eps = _NP_EPS.get(getattr(data, "dtype", None), 0.0)
        if eps > self.mode.precision.eps:
            precision = self.mode.precision
            precision.dtype, precision.eps, precision.line = _NP_TORCH[data.dtype], eps, kernel_line()

    # ---- memory --------------------------------------------------------------------------------------------
    def load(self, original, builder, ptrs, mask, other, *rest):
        if block_of(ptrs) is not None or block_of(mask) is not None or block_of(other) is not None:
            raise _fail("load", "a pointer, mask or fill value made from a random value")
        out = original(builder, ptrs, mask, other, *rest)
        live = _live(ptrs, mask)
        if self.waiting:
            self.decide_waiting(out, live)
        values = out.data.reshape(-1)
        if values.dtype.kind == "f" and np.isnan(values).any():
            if self.maxima:
                self.load_maxima(out, live)
            if any(math.isnan(values[e]) and address not in self.addresses and address not in self.maxima
                   for e, address in live):
                raise _fail("load", "a NaN read from memory: a row the code's own arithmetic made NaN (a "
                                    "division by zero?), a random value the capture does not follow, or a missing "
                                    "row")
        if not self.addresses:
            return out
        ids = np.full(values.size, -1, dtype=np.int64)
        found: list[tuple[int, tuple]] = []
        for e, address in live:
            entry = self.addresses.get(address)
            if entry is None or not (isinstance(values[e], np.floating) and math.isnan(values[e])):
                continue  # not a random element, or one the kernel's torch code overwrote with a concrete value
            dtype, var, ops = entry
            if dtype != out.data.dtype:
                raise _fail("load", f"the raw bits of a random {dtype} value read as {out.data.dtype}")
            ids[e] = var
            found.append((e, ops))
        if not found:
            return out
        names = {tuple(n for n, _ in ops) for _, ops in found}
        if len(names) != 1:
            raise _fail("load", "one load of random values under different maps")
        shape = out.data.shape
        operands = []
        for k, op in enumerate(next(iter(names))):
            column = np.full(values.size, math.nan)
            for e, ops in found:
                column[e] = math.nan if ops[k][1] is None else ops[k][1]
            operands.append((op, None if found[0][1][k][1] is None else column.reshape(shape)))
        return _marked(out, RandomBlock(ids.reshape(shape), operands))

    def load_maxima(self, out, live: list[tuple[int, int]]) -> None:
        """Mark the loaded lanes that hold a race's maximum key a kernel stored."""
        values = out.data.reshape(-1)
        marks = np.full(values.size, None, dtype=object)
        for e, address in live:
            if address in self.maxima and math.isnan(values[e]):
                marks[e] = self.maxima[address]
        if any(m is not None for m in marks):
            out.attr[_RACEMAX] = marks.reshape(out.data.shape)

    def decide_waiting(self, out, live: list[tuple[int, int]]) -> None:
        """Loaded lanes holding a stored, undecided race winner: the race decided now, its winner loaded."""
        flat = out.data.reshape(-1)
        for e, address in live:
            if address in self.waiting and out.data.dtype.kind in "iu" and int(flat[e]) == _sentinel(out.data.dtype):
                flat[e] = self.decide_at(address)
        out.data = flat.reshape(out.data.shape)

    def decide_at(self, address: int) -> int:
        """Decide the race whose winner waits at ``address`` and write the winner there."""
        race, element, dtype = self.waiting.pop(address)
        winner = int(race.settle(self).reshape(-1)[element])
        np.ctypeslib.as_array((np.ctypeslib.as_ctypes_type(dtype) * 1).from_address(address))[0] = winner
        return winner

    def decide_read(self, func: Callable, args: tuple, kwargs: dict) -> None:
        """Before a torch call on CPU tensors: decide every waiting winner stored in an element it takes (the
        kernel's torch code, or the adapter, reading what a Triton kernel stored; of ``t[key]``, the elements
        ``key`` selects); refuse reading a random value a kernel stored (the torch capture does not follow values
        through memory)."""
        if not self.waiting and not self.stored:
            return
        tensors = list(_tensors((*args, *kwargs.values())))
        if getattr(func, "__name__", "") == "__getitem__" and tensors and tensors[0] is args[0]:
            with torch._C.DisableTorchFunction():
                try:
                    view = args[0][args[1]]
                except Exception:  # noqa: BLE001 - torch's own error is raised by the call itself
                    view = None
            if isinstance(view, torch.Tensor) and view.untyped_storage().data_ptr() == \
                    args[0].untyped_storage().data_ptr():
                tensors[0] = view  # basic indexing: a view of the elements read
        for t in tensors:
            if t.device.type != "cpu" or t.numel() == 0:
                continue
            read = set(element_addresses(t))
            stored = next((a for a in self.stored if a in read), None)
            if stored is not None:
                raise KernelError("kernel", f"a random value a Triton kernel stored ({self.stored_at[stored]}) is "
                                            "read by torch code, which does not follow it (store the decision "
                                            f"instead) ({kernel_line()})")
            for address in [a for a in self.waiting if a in read]:
                self.decide_at(address)

    def store(self, original, builder, ptrs, value, mask, *rest):
        if block_of(ptrs) is not None or block_of(mask) is not None:
            raise _fail("store", "a pointer or mask made from a random value")
        self.settle(ptrs)
        self.settle(mask)
        live = _live(ptrs, mask)
        race, block, maxima = _pending(value), block_of(value), _racemax(value)
        for _, address in live:
            if address in self.addresses and address not in self.stored:
                raise _fail("store", "a store over a random tensor's elements")
            self.stored.pop(address, None)
            self.stored_at.pop(address, None)
            self.maxima.pop(address, None)
            self.addresses.pop(address, None)
            self.waiting.pop(address, None)
        if race is not None:  # the winner stays undecided until read
            if race.shape and ptrs.data.size != int(np.prod(race.shape)):
                raise _fail("store", "an undecided race's winners stored under a broadcast")
            for e, address in live:
                self.waiting[address] = (race, e if race.shape else 0, value.data.dtype)
        elif maxima is not None:  # a race's maximum key stored: followed to its next load
            flat = np.broadcast_to(maxima, ptrs.data.shape).reshape(-1)
            for e, address in live:
                if flat[e] is not None:
                    self.maxima[address] = flat[e]
        elif block is not None:  # a random value stored: followed to its next load
            ids = np.broadcast_to(block.ids, ptrs.data.shape).reshape(-1).tolist()
            operands = [(n, None if c is None else np.broadcast_to(c, ptrs.data.shape).reshape(-1).tolist())
                        for n, c in block.ops]
            dtype, line = value.data.dtype, kernel_line()
            for e, address in live:
                if ids[e] >= 0:
                    entry = (dtype, ids[e], tuple((n, None if c is None else c[e]) for n, c in operands))
                    self.stored[address] = self.addresses[address] = entry
                    self.stored_at[address] = line
        return original(builder, ptrs, value, mask, *rest)

    # ---- arithmetic ----------------------------------------------------------------------------------------
    def binary(self, name: str, original, builder, lhs, rhs):
        a, b = block_of(lhs), block_of(rhs)
        if a is not None and b is not None:
            raise _fail(name, "an operation on two random values cannot be resolved exactly")
        out = original(builder, lhs, rhs)
        block, other = (a, rhs) if a is not None else (b, lhs)
        op = _BINARY[name][0 if a is not None else 1]  # rdiv, c / x: a race's key, never compared
        shape = out.data.shape
        c = np.broadcast_to(np.asarray(other.data, dtype=np.float64), shape)
        base = block.relaid(lambda x: np.broadcast_to(x, shape))
        if op == "sub":
            ops = [("add", -c)]
        elif op == "rsub":  # Triton's -x is 0 - x: a negation alone, as torch records it
            ops = [("neg", None)] + ([("add", c)] if c.any() else [])
        else:
            ops = [(op, c)]
        return _marked(out, RandomBlock(base.ids, base.ops + ops))

    def select(self, original, builder, cond, lhs, rhs):
        if block_of(cond) is not None:
            raise _fail("select", "a condition made from a random value")
        a, b = block_of(lhs), block_of(rhs)
        out = original(builder, cond, lhs, rhs)
        shape = out.data.shape
        pick = np.broadcast_to(cond.data.astype(bool), shape)
        blank = RandomBlock(np.full(shape, -1, dtype=np.int64), [])
        a = (a or blank).relaid(lambda x: np.broadcast_to(x, shape))
        b = (b or blank).relaid(lambda x: np.broadcast_to(x, shape))
        ids = np.where(pick, a.ids, b.ids)
        live_a, live_b = (pick & (a.ids >= 0)).any(), (~pick & (b.ids >= 0)).any()
        if live_a and live_b and [n for n, _ in a.ops] != [n for n, _ in b.ops]:
            raise _fail("select", "random values under different maps selected into one value")
        if live_a and live_b:
            ops = [(n, None if c is None else np.where(pick, c, d)) for (n, c), (_, d) in zip(a.ops, b.ops)]
        else:
            ops = a.ops if live_a else b.ops
        return _marked(out, RandomBlock(ids, ops))

    def compare(self, name: str, original, builder, lhs, rhs):
        a, b = block_of(lhs), block_of(rhs)
        if a is not None and b is not None:
            raise _fail(name, "a comparison of two random values cannot be resolved exactly")
        cmp = _CMP[name] if a is not None else _FLIP[_CMP[name]]
        block, other = (a, rhs) if a is not None else (b, lhs)
        out = original(builder, lhs, rhs)
        shape = out.data.shape
        block = block.relaid(lambda x: np.broadcast_to(x, shape))
        thresholds = np.broadcast_to(np.asarray(other.data, dtype=np.float64), shape).reshape(-1).tolist()
        ids = block.ids.reshape(-1).tolist()
        operands = [(n, None if c is None else c.reshape(-1).tolist()) for n, c in block.ops]
        result = out.data.reshape(-1).copy()
        decided: dict[tuple, bool] = {}  # lanes asking one question (a splat against a padded block) decided once
        for e, var in enumerate(ids):
            if var >= 0:
                maps = tuple((n, None if c is None else c[e]) for n, c in operands)
                key = (var, maps, thresholds[e])
                if key not in decided:
                    decided[key] = self.mode.resolve(var, list(maps), cmp, thresholds[e])
                result[e] = decided[key]
        out.data = result.reshape(shape)
        return out


def _tensors(values) -> Iterator[torch.Tensor]:
    """The tensors among ``values``, looking into lists and tuples."""
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _tensors(value)


def _live(ptrs, mask) -> list[tuple[int, int]]:
    """The lanes a load or store touches: ``(element, address)`` where the mask is set."""
    flat = ptrs.data.reshape(-1)
    lanes = np.flatnonzero(np.broadcast_to(mask.data, ptrs.data.shape).reshape(-1)).tolist()
    return list(zip(lanes, flat[lanes].tolist()))


def _layout(name: str, args) -> Callable[[np.ndarray], np.ndarray] | None:
    """The element move of a layout operation, applied alike to variables and operands; ``None`` for others."""
    if name == "create_expand_dims":
        return lambda x: np.expand_dims(x, args[1])
    if name == "create_broadcast":
        return lambda x: np.broadcast_to(x, args[1])
    if name == "create_reshape":
        return lambda x: x.reshape(args[1])
    if name == "create_trans":
        return lambda x: np.transpose(x, args[1])
    if name == "create_splat":
        return lambda x: np.full(args[0].shape, x.reshape(-1)[0], dtype=x.dtype)
    if name == "create_unsplat":
        return lambda x: x.reshape(-1)[:1].copy()
    return None


def _innermost(err: BaseException) -> BaseException:
    """The error the interpreter wrapped (``InterpreterError``, once per nested ``@triton.jit`` call)."""
    from triton.runtime.errors import InterpreterError

    while isinstance(err, InterpreterError) and err.__cause__ is not None:
        err = err.__cause__
    return err


@contextlib.contextmanager
def interpreted(mode: Capture, keyed: dict[str, str] | None = None) -> Iterator[None]:
    """Inside the block a Triton kernel launched under the interpreter has its random values followed and decided
    through ``mode``; outside, triton is as it was. Nothing happens when triton is not imported (a torch kernel).
    ``keyed`` names ``@triton.jit`` helpers (``module:function``) that hash integer keys to a uniform of the dtype
    given (``float32``, ``float64``): each call is a keyed draw (:meth:`_Interpreted.keyed_draw`), as ``tl.rand``
    is, instead of the concrete arithmetic it would be.

    The kernel runs under Triton's interpreter (``TRITON_INTERPRET=1``, set before ``triton`` is imported), which
    executes each operation through one method of ``triton.runtime.interpreter.InterpreterBuilder``; those methods
    are wrapped (triton's code is not copied). ``tl.load`` of a random tensor's storage yields its captured
    variables, affine and monotone maps are recorded as the torch capture records them, and each comparison of a
    random value with a concrete threshold is decided by the torch capture as an exact choice conditioned on the
    earlier ones. Any other operation on a random value raises :class:`~simulator.errors.KernelError` naming the
    kernel's line and the operation. The builder is not a public API: :data:`TESTED_TRITON` is the version this is
    tested with.
    """
    keyed = keyed or {}
    if "triton" not in sys.modules:
        yield
        return
    from triton.runtime import interpreter

    builder, executor, handle = interpreter.InterpreterBuilder, interpreter.GridExecutor, interpreter.TensorHandle
    reductions = interpreter.ReduceScanOpInterface  # tl.sum, tl.max, tl.argmax, tl.cumsum: numpy, not the builder
    capture_ = _Interpreted(mode)
    saved = {name: vars(builder)[name] for name in vars(builder) if name.startswith("create_")}
    saved_call, saved_clone, saved_reduce, saved_patch = (executor.__call__, handle.clone, reductions.apply,
                                                          interpreter._patch_lang)
    tensor = interpreter.tl.core.tensor

    def launch(self, *args, **kwargs):
        # the interpreter's own torch calls are not the kernel's; and no draw watch's profiler (random_sources)
        # while it runs: a Triton kernel's code cannot call Python's or numpy's generators (it would not compile),
        # and the profiler made the interpreter seven times slower
        profiler = sys.getprofile()
        sys.setprofile(None)
        with torch._C.DisableTorchFunction():
            capture_.index()
            try:
                return saved_call(self, *args, **kwargs)
            except Exception as err:  # noqa: BLE001 - the interpreter's wrapper dropped, the error itself raised
                inner = _innermost(err)
                if inner is err:
                    raise
                raise inner.with_traceback(inner.__traceback__) from None
            finally:
                sys.setprofile(profiler)

    def clone(self):
        copy = saved_clone(self)
        for key in (_MARK, _PENDING):
            if key in self.attr:
                copy.attr[key] = self.attr[key]
        return copy

    def patch_lang(fn):
        """The interpreter's per-launch patching (``__bool__``, ``__index__`` of ``tl.tensor``), then a guard on
        each: a random value used as a Python condition or integer is refused."""
        saved_patch(fn)
        for attr, use in (("__bool__", "a Python condition"), ("__index__", "a Python integer")):
            current = getattr(tensor, attr, None)
            if current is not None and getattr(current, "unguarded", None) is None:
                setattr(tensor, attr, _guarded(current, attr.strip("_"), use, capture_.settle))

    def reduce(self, input):
        values = input if isinstance(input, tuple) else (input,)
        if any(block_of(getattr(v, "handle", None)) is not None for v in values):
            raise _fail(type(self).__name__, "a reduction or scan over random values is not modelled")
        for v in values:
            capture_.settle(getattr(v, "handle", None))
        return saved_reduce(self, input)

    import triton.language as lang
    from triton.language import random as lang_random

    with contextlib.suppress(ImportError):  # imported first with tl.max patched, Gluon would wrap the stand-in
        import triton.experimental.gluon.language  # noqa: F401

    from triton.language import standard

    draws = {(module, name): getattr(module, name) for module in (lang, lang_random) for name in _DRAWS
             if hasattr(module, name)}
    for (module, name) in draws:
        modelled = {"rand": capture_.rand, "rand4x": capture_.rand4x, "randn": capture_.randn,
                    "randn4x": capture_.randn4x}
        setattr(module, name, modelled.get(name) or _refused_draw(name))
    races = {(module, name): getattr(module, name) for module in (lang, standard) for name in ("argmax", "max")}
    for (module, name), original in races.items():
        setattr(module, name, functools.partial(capture_.argmax if name == "argmax" else capture_.maximum, original))
    draws.update(races)  # put back with the draws
    for reference, kind in keyed.items():  # helpers an adapter names as keyed uniforms
        module_name, _, function = reference.partition(":")
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, function):
            draws[(module, function)] = getattr(module, function)
            dtype = lang.float64 if kind == "float64" else lang.float32
            setattr(module, function, functools.partial(capture_.keyed_draw, reference, dtype))
    for name, original in saved.items():
        setattr(builder, name, capture_.wrap(name, original))
    executor.__call__, handle.clone, reductions.apply, interpreter._patch_lang = launch, clone, reduce, patch_lang
    mode.before_call = capture_.decide_read
    try:
        with interpreter_scalar_index():  # a loop bound loaded from a tensor, under NumPy 2.4 (triton_compat)
            yield
    finally:
        mode.before_call = None
        for name, original in saved.items():
            setattr(builder, name, original)
        executor.__call__, handle.clone, reductions.apply, interpreter._patch_lang = (saved_call, saved_clone,
                                                                                     saved_reduce, saved_patch)
        for attr in ("__bool__", "__index__"):
            unguarded = getattr(getattr(tensor, attr, None), "unguarded", None)
            if unguarded is not None:
                setattr(tensor, attr, unguarded)
        for (module, name), original in draws.items():
            setattr(module, name, original)


def _refused_draw(name: str) -> Callable:
    """An in-kernel draw of raw random bits (``tl.randint``, ``tl.randint4x``, Philox itself): an integer whose bits
    a kernel may use in any way, not enumerated."""
    def refused(*args, **kwargs):
        raise _fail(name, "raw random bits drawn in the kernel are not modelled exactly (tl.rand, tl.rand4x, "
                          "tl.randn and tl.randn4x are)")
    return refused


def _guarded(method: Callable, op: str, use: str, settle: Callable) -> Callable:
    """``method`` of ``tl.tensor``, refusing a random value and deciding an undecided race's winner first
    (``settle``); ``unguarded``: the method itself."""
    def guarded(self):
        if block_of(self.handle) is not None:
            raise _fail(op, f"a random value used as {use}")
        settle(self.handle)
        return method(self)
    guarded.unguarded = method
    return guarded


def libdevice_stand_in() -> object:
    """A stand-in for ``triton.language.extra.libdevice`` under the interpreter, which does not run it (3.5's
    ``_patch_lang`` patches ``tl.math`` only): each function is NumPy's of the same name on the operand's own
    dtype (``log1p``, ``expm1``, ...), as the interpreter computes ``tl.math``'s; a random operand is refused. For
    kernels that reach libdevice through a name of their own module (vLLM's ``tldevice``), installed by an
    adapter's hook."""
    from triton import language as tl
    from triton.runtime.interpreter import TensorHandle

    class Libdevice:
        def __getattr__(self, name: str) -> Callable:
            fn = getattr(np, name, None)
            if not isinstance(fn, np.ufunc):
                raise AttributeError(f"libdevice.{name}: no NumPy function of that name for the interpreter")

            def call(*args):
                if any(block_of(getattr(a, "handle", None)) is not None for a in args):
                    raise _fail(name, "a libdevice function of a random value is not modelled")
                first = next(a for a in args if isinstance(a, tl.tensor))
                with np.errstate(all="ignore"):  # IEEE results (log1p(-1) = -inf), as the interpreter's own ops
                    data = fn(*(a.handle.data if isinstance(a, tl.tensor) else a for a in args))
                return tl.tensor(TensorHandle(data.astype(first.handle.data.dtype), first.dtype.scalar), first.type)
            return call

    return Libdevice()
