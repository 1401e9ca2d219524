"""Random sources besides torch's, while a kernel runs under the capture (docs/kernels.md, "Random sources").

``random.random()`` becomes one of the capture's uniforms, so it is enumerated like ``torch.rand``. Every other
draw from ``random``, ``os.urandom`` or ``numpy.random`` raises :class:`~simulator.errors.KernelError` naming
the kernel's line: a verdict never rests on a draw the enumerator did not make. Three layers catch them: the
names looked up at call time are replaced, a profiler sees draws through names bound earlier, and the global
generators' states are compared after the kernel.
"""

from __future__ import annotations

import _random
import contextlib
import functools
import inspect
import os
import random
import sys
import threading
from pathlib import Path
from types import BuiltinMethodType, FrameType, FunctionType, MethodType, ModuleType, TracebackType
from typing import Callable

import numpy as np
import torch

from simulator.errors import KernelError

WAY_OUT = "draw with torch.rand / torch.multinomial, or random.random() looked up at call time"
#: specproof's own packages: their draws during a capture (a model's rows, computed when first read) are not the
#: kernel's
OWN = tuple(str(Path(__file__).resolve().parents[2] / package) for package in ("simulator", "exact", "specproof"))
#: code that is not the kernel's: specproof's own, torch's and the random libraries'
NOT_KERNEL = (*OWN, str(Path(torch.__file__).resolve().parent), str(Path(np.__file__).resolve().parent),
              str(Path(random.__file__).resolve()))
_RANDOM_FILE = random.__file__
#: methods of ``_random.Random`` that advance a generator: drawing, and reseeding the caller's global one
_DRAWS = {"random", "getrandbits"}
_RESEEDS = {"seed", "setstate"}
_NOT_ENUMERATED = "a random source specproof does not enumerate"
_RESEEDING = "reseeds the generator of random's module functions, the caller's"
_BOUND = "bound before the capture (from random import random), so it cannot be replaced by an enumerated uniform"
# taken at import: while a capture is active these names of numpy.random refuse
_NUMPY_SOURCES = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)
_NUMPY_SEEDED = (np.random.BitGenerator, np.random.RandomState)
_CYFUNCTION = type(np.random.default_rng)
_NOT_LOOKED_INTO = (torch.Tensor, ModuleType, type, FunctionType, MethodType)
_NUMPY_NAMES = tuple(n for n in np.random.__all__ if callable(getattr(np.random, n)))
_NUMPY_GET_STATE, _NUMPY_SET_STATE = np.random.get_state, np.random.set_state
_ACTIVE: list[RandomSources] = []  # innermost last: the one the replaced names answer to


def _numpy_source(value: object) -> str | None:
    """What makes ``value`` a numpy random source (a generator, a bound method of one, a function of
    ``numpy.random`` or a class that makes a generator from a seed), or ``None``."""
    kind = type(value)
    if isinstance(value, _NUMPY_SOURCES):
        return f"a numpy.random.{kind.__name__}"
    if kind is MethodType or kind is BuiltinMethodType:
        owner = value.__self__
        if isinstance(owner, _NUMPY_SOURCES):
            return f"a method of a numpy.random.{type(owner).__name__}"
    elif kind is _CYFUNCTION and str(getattr(value, "__module__", "")).startswith("numpy.random"):
        return "a numpy.random function"
    elif isinstance(value, type) and issubclass(value, _NUMPY_SEEDED):
        return f"numpy.random.{value.__name__}"
    return None


def _numpy_held(name: str, value: object) -> str | None:
    """``name``, or one of its attributes (``self.rng``), if it is a numpy random source: ``"self.rng, a
    numpy.random.Generator"``. One level of attributes: a kernel object's own generator; tensors, modules, classes
    and functions are not looked into."""
    what = _numpy_source(value)
    if what is not None:
        return f"{name}, {what}"
    if isinstance(value, _NOT_LOOKED_INTO):
        return None
    attributes = getattr(value, "__dict__", None)
    if type(attributes) is not dict:
        return None
    for attribute, held in attributes.items():
        what = _numpy_source(held)
        if what is not None:
            return f"{name}.{attribute}, {what}"
    return None


class RandomSources:
    """While entered (by :func:`~simulator.torch_path.capture.capture`): ``random.random`` and
    ``random.Random.random`` return ``uniform()``; ``numpy.random``'s functions refuse; a profiler refuses draws
    through names bound before; ``random``'s and numpy's global states are compared on exit. ``where(frame)``
    names the kernel's line. While the capture's own code runs, it sets ``busy`` and switches :meth:`profile` off."""

    def __init__(self, uniform: Callable[[], torch.Tensor], where: Callable[[FrameType | None], str]) -> None:
        self.uniform, self.where = uniform, where
        self.busy = False
        self.active = False
        self.refused: KernelError | None = None
        self.thread = threading.get_ident()

    # ---- refusals ----------------------------------------------------------------------------------------------
    def refusal(self, op: str, frame: FrameType | None, why: str = _NOT_ENUMERATED) -> KernelError:
        """The error for a draw from ``op`` at ``frame``'s kernel line, kept to be raised again on exit: a kernel
        that catches it still gets no verdict."""
        sys.setprofile(None)
        inside = " inside a torch helper" if self.busy else ""
        self.refused = KernelError("kernel", f"{op}{inside}: {why}; {WAY_OUT} ({self.where(frame)})")
        return self.refused

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        """Refuse a draw through a name bound before the capture: a C method of a ``random.Random`` or
        ``os.urandom`` when called, a numpy random source when a function that names it starts."""
        if event == "c_call":
            owner = getattr(arg, "__self__", None)
            if isinstance(owner, _random.Random):
                name = arg.__name__  # type: ignore[attr-defined]
                shared = owner is random._inst  # type: ignore[attr-defined]  # the module's functions' generator
                if name in _DRAWS or (name in _RESEEDS and shared):
                    why = _BOUND if name == "random" else _RESEEDING if name in _RESEEDS else _NOT_ENUMERATED
                    self._refuse_draw(frame, f"random.{name}" if shared else f"random.Random.{name}", why)
            elif arg is os.urandom:
                self._refuse_draw(frame, "os.urandom", _NOT_ENUMERATED)
        elif event == "call":
            code = frame.f_code
            if not _not_kernel(code.co_filename):
                names = frame.f_globals
                for name, value in (*((n, names.get(n)) for n in code.co_names), *frame.f_locals.items()):
                    found = _numpy_held(name, value)
                    if found is not None:
                        raise self.refusal(f"numpy.random ({found}, named in {code.co_name})", frame)
            elif _own_file(code.co_filename) and self._before_or_after_kernel(frame):
                sys.setprofile(None)  # until the next torch call: the adapter's rows are no kernel's draws

    def _before_or_after_kernel(self, frame: FrameType) -> bool:
        """Whether only specproof's own code lies between ``frame`` and the block the capture runs (an adapter
        reading rows), so no kernel frame is on the stack. The built-in adapters call the kernel right after a
        torch call, which resumes the profiler (tests/test_kernel_random_sources.py holds them to it)."""
        caller = frame.f_back
        while caller is not None and caller is not self.block:
            if not _own(caller):
                return False
            caller = caller.f_back
        return caller is not None

    def _refuse_draw(self, frame: FrameType, method: str, why: str) -> None:
        """Refuse a draw by the C method ``method`` called at ``frame``, unless specproof's own code drew."""
        public, origin = _drawer(frame)
        if not _own(origin):
            shown = method if public is None or method == f"random.{public}" else f"random.{public} ({method})"
            raise self.refusal(shown, frame, why)

    # ---- entering and leaving ----------------------------------------------------------------------------------
    def __enter__(self) -> RandomSources:
        self.python_state, self.numpy_state = random.getstate(), _NUMPY_GET_STATE(legacy=False)
        self.saved_random = random.random
        self.saved_method = vars(random.Random).get("random")
        self.saved_numpy = {name: getattr(np.random, name) for name in _NUMPY_NAMES}
        _ACTIVE.append(self)
        random.random = _module_random  # type: ignore[assignment]
        random.Random.random = _method_random  # type: ignore[method-assign]
        vars(np.random).update(_NUMPY_STAND_INS)
        self.previous = sys.getprofile()
        block = sys._getframe(1)  # the frame running the with-block: past the capture() generator and contextlib
        while block.f_code.co_flags & inspect.CO_GENERATOR or block.f_code.co_filename == contextlib.__file__:
            block = block.f_back
        self.block = block
        self.active = True
        sys.setprofile(self.profile)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        _reinstall(self.previous)
        self.active = False
        _ACTIVE.remove(self)
        random.random = self.saved_random  # type: ignore[assignment]
        if self.saved_method is None:
            del random.Random.random
        else:
            random.Random.random = self.saved_method  # type: ignore[method-assign]
        vars(np.random).update(self.saved_numpy)
        moved = []
        if random.getstate() != self.python_state:
            moved.append("random")
            random.setstate(self.python_state)
        if not _equal(_NUMPY_GET_STATE(legacy=False), self.numpy_state):
            moved.append("numpy.random")
            _NUMPY_SET_STATE(self.numpy_state)
        if self.refused is not None and error is not self.refused:  # caught by the kernel, or hidden by another error
            raise self.refused
        if moved and error is None:
            raise KernelError("kernel", f"{' and '.join(moved)}: the global generator moved while the kernel ran, "
                                        f"a draw specproof did not see (from C code, or through an object it does "
                                        f"not watch); {WAY_OUT}")


def _reinstall(previous: object) -> None:
    """Put back the profiler that was set before the capture: a Python function through ``sys.setprofile``, a C
    profiler (``cProfile.Profile``, which ``sys.setprofile`` cannot take back) through its own ``enable``."""
    if previous is None or callable(previous):
        sys.setprofile(previous)  # type: ignore[arg-type]
    else:
        previous.enable()  # type: ignore[attr-defined]


def _drawer(frame: FrameType | None) -> tuple[str | None, FrameType | None]:
    """Who draws at ``frame``: the outermost function of random.py on the stack from there (``choice``,
    ``uniform``, ``SystemRandom.random``; ``None`` if none) and the first frame outside random.py."""
    public = None
    while frame is not None and frame.f_code.co_filename == _RANDOM_FILE:
        public, frame = frame.f_code.co_qualname.removeprefix("Random."), frame.f_back
    return public, frame


@functools.lru_cache(maxsize=None)
def _not_kernel(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(NOT_KERNEL)


@functools.lru_cache(maxsize=None)
def _own_file(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(OWN)


def _own(frame: FrameType | None) -> bool:
    return frame is not None and _own_file(frame.f_code.co_filename)


def _uniform(op: str, caller: FrameType, original: Callable[[], float]) -> torch.Tensor | float:
    """The active capture's uniform for ``random.random()``. Of random.py's methods only ``uniform(a, b)``, an
    affine map of it, gets one: the others transform it in ways the capture does not model. Another thread, and
    specproof's own code, draw from their own streams."""
    sources = _ACTIVE[-1] if _ACTIVE else None
    public, origin = _drawer(caller)
    if sources is None or sources.thread != threading.get_ident() or _own(origin):
        return original()
    if public not in (None, "uniform"):
        raise sources.refusal(f"random.{public}", caller)
    if sources.busy:
        raise sources.refusal(op, caller)
    return sources.uniform()


_GLOBAL_RANDOM = random.random


def _module_random() -> torch.Tensor | float:
    return _uniform("random.random", sys._getframe(1), _GLOBAL_RANDOM)


def _method_random(self: random.Random) -> torch.Tensor | float:
    return _uniform("random.Random.random", sys._getframe(1), lambda: _random.Random.random(self))


def _numpy_call(name: str, original: Callable[..., object], caller: FrameType, args, kwargs) -> object:
    """``numpy.random.<name>(...)`` while a capture is active: refused from the kernel, run for specproof's own
    code (a model's seeded rows) and for other threads."""
    sources = _ACTIVE[-1] if _ACTIVE else None
    if sources is None or sources.thread != threading.get_ident() or _own(caller):
        return original(*args, **kwargs)
    raise sources.refusal(f"numpy.random.{name}", caller)


class _StandIn(type):
    """A class of numpy.random while a capture is active: calling it goes through :func:`_numpy_call`;
    ``isinstance``, ``issubclass`` and attributes answer as the real class (numpy's own code asks them)."""

    real: type

    def __call__(cls, *args: object, **kwargs: object) -> object:
        return _numpy_call(cls.__name__, cls.real, sys._getframe(1), args, kwargs)

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, cls.real)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, cls.real)

    def __getattr__(cls, name: str) -> object:
        return getattr(cls.real, name)


def _numpy_stand_in(name: str) -> object:
    original = getattr(np.random, name)
    if isinstance(original, type):
        return _StandIn(name, (), {"real": original})

    def call(*args: object, **kwargs: object) -> object:
        return _numpy_call(name, original, sys._getframe(1), args, kwargs)
    return call


_NUMPY_STAND_INS = {name: _numpy_stand_in(name) for name in _NUMPY_NAMES}


def _equal(a: object, b: object) -> bool:
    """Equality of two generator states (nested dicts and tuples, numpy arrays compared elementwise)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b)
    return bool(a == b)
