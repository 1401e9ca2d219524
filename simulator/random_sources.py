"""Random sources other than specproof's own while user code runs: a plugin's draws outside its ``rng`` refused
(:func:`call_plugin`), a kernel's ``random.random()`` made a capture uniform (:class:`RandomSources`);
docs/plugins.md, "Draw only from rng". Torch is read only when already imported."""

from __future__ import annotations

import _random
import contextlib
import dis
import functools
import importlib
import inspect
import linecache
import os
import random
import sys
import threading
import traceback
from pathlib import Path
from types import BuiltinMethodType, FrameType, FunctionType, MethodType, ModuleType, TracebackType
from typing import Callable, TypeVar

import numpy as np

from simulator.errors import KernelError, RandomSourceError, SpecproofError
from simulator.usercode import is_own_frame, own_code, plugin_code_globals, specimens

T = TypeVar("T")
WAY_OUT = "draw with torch.rand / torch.multinomial, or random.random() looked up at call time"
PLUGIN_WAY_OUT = ("a plugin draws only from its rng (rng.bernoulli, rng.categorical), whose every outcome "
                  "specproof enumerates; rng has no continuous uniform (docs/plugins.md, \"Draw only from rng\")")
#: torch's random ops the capture routes to the randomness interface (simulator/kernels/capture.py)
TORCH_MODELLED = {"rand", "rand_like", "uniform_", "exponential_", "multinomial", "bernoulli", "bernoulli_"}
#: torch's random ops not modelled exactly: refused by name (the generator watch misses one given its own generator)
TORCH_UNMODELLED = {"randn", "randn_like", "randint", "randint_like", "randperm", "normal", "normal_", "random_",
                    "poisson", "geometric_", "log_normal_", "cauchy_", "binomial", "_standard_gamma",
                    "_sample_dirichlet"}
_RANDOM_FILE = random.__file__
#: methods of ``_random.Random`` that advance a generator: drawing, and reseeding the caller's global one
_DRAWS = {"random", "getrandbits"}
_RESEEDS = {"seed", "setstate"}
_NOT_ENUMERATED = "a random source specproof does not enumerate"
_RESEEDING = "reseeds the generator of random's module functions, the caller's"
_BOUND = "bound before the capture (from random import random), so it cannot be replaced by an enumerated uniform"
_NO_UNIFORM = "a draw outside rng"
# taken at import: while a watch is active these names of numpy.random refuse
_NUMPY_SOURCES = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)
_NUMPY_SEEDED = (np.random.BitGenerator, np.random.RandomState)
_CYFUNCTION = type(np.random.default_rng)
_NUMPY_NAMES = tuple(n for n in np.random.__all__ if callable(getattr(np.random, n)))
_NUMPY_GET_STATE, _NUMPY_SET_STATE = np.random.get_state, np.random.set_state
_ACTIVE: list[RandomSources] = []  # innermost last: the one the replaced names answer to


def library_paths() -> tuple[str, ...]:
    """Code that is not the user's: specproof's own, numpy's, random.py, and torch's and triton's (its
    interpreter runs a Triton kernel's lines) when imported."""
    paths = (*own_code(), str(Path(np.__file__).resolve().parent), str(Path(random.__file__).resolve()))
    libraries = (sys.modules.get(name) for name in ("torch", "triton"))
    return (*paths, *(str(Path(lib.__file__).resolve().parent) for lib in libraries if lib is not None))


@functools.lru_cache(maxsize=None)
def not_user_code(filename: str) -> bool:
    """Whether ``filename`` is specproof's, numpy's, random.py or torch's: a frame there is not the user's."""
    path = str(Path(filename).resolve())
    return path.startswith(library_paths()) and not path.startswith(specimens())


def user_line(start: FrameType | None = None) -> str:
    """The innermost frame outside specproof, torch and the random libraries, from ``start`` (default: the
    caller's frame) outward: the kernel's or plugin's line."""
    stack = traceback.extract_stack(start) if start is not None else traceback.extract_stack()[:-1]
    for frame in reversed(stack):
        if not not_user_code(frame.filename) and "contextlib" not in frame.filename:
            return f"{frame.filename}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"
    return "no frame of the user's"


def _opaque() -> tuple[type, ...]:
    """Values whose attributes are not looked into for a numpy generator: tensors, modules, classes, functions."""
    tensor = _torch_tensor()
    kinds = (ModuleType, type, FunctionType, MethodType)
    return kinds if tensor is None else (tensor, *kinds)


def _torch_tensor() -> type | None:
    """``torch.Tensor`` if torch is imported (``None`` too while torch itself is being imported)."""
    return getattr(sys.modules.get("torch"), "Tensor", None)


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


def _numpy_held(name: str, value: object, opaque: tuple[type, ...]) -> str | None:
    """``name``, or one of its attributes (``self.rng``), if it is a numpy random source: ``"self.rng, a
    numpy.random.Generator"``. One level of attributes: a user object's own generator; ``opaque`` values
    (tensors, modules, classes and functions) are not looked into."""
    what = _numpy_source(value)
    if what is not None:
        return f"{name}, {what}"
    if isinstance(value, opaque):
        return None
    attributes = getattr(value, "__dict__", None)
    if type(attributes) is not dict:
        return None
    for attribute, held in attributes.items():
        what = _numpy_source(held)
        if what is not None:
            return f"{name}.{attribute}, {what}"
    return None


def _torch_draw(fn: object) -> str | None:
    """``torch.<op>`` or ``Tensor.<op>`` when ``fn`` is one of torch's random ops (torch imported), else ``None``."""
    name = getattr(fn, "__name__", None)
    if name not in TORCH_MODELLED and name not in TORCH_UNMODELLED:
        return None
    tensor = _torch_tensor()
    if tensor is None:
        return None
    if isinstance(getattr(fn, "__self__", None), tensor):
        return f"Tensor.{name}"
    return f"torch.{name}" if str(getattr(fn, "__module__", None) or "").startswith("torch") else None


class RandomSources:
    """While entered: ``random.random`` and ``random.Random.random`` return ``uniform()`` (no ``uniform``, for a plugin:
    they refuse, also when a library the plugin calls draws). For a kernel also ``numpy.random``'s functions refuse, a
    profiler refuses draws through names bound before, and ``random``'s and numpy's global states are compared on exit;
    for a plugin :func:`scan_plugin` finds such names in its code before it runs (a profiler, or swapping numpy's names,
    at every call would cost more than the round). ``where(frame)`` names the user's line; refusals are
    ``error(field, ...)``. While the capture's own code runs, it sets ``busy`` and switches :meth:`profile` off.

    One watch serves plugins and kernels: the names looked up at call time are replaced, a profiler sees draws
    through names bound earlier, and, for a kernel, the global generators' states are compared after it (for a
    plugin, called once per execution, that comparison would cost more than the round). A verdict never rests on a
    draw the enumerator did not make. This module does not import torch: it looks at torch only in ``sys.modules``.
    """

    def __init__(self, uniform: Callable[[], object] | None = None,
                 where: Callable[[FrameType | None], str] = user_line, error: type[SpecproofError] = KernelError,
                 field: str = "kernel", way_out: str = WAY_OUT) -> None:
        self.uniform, self.where, self.error, self.field, self.way_out = uniform, where, error, field, way_out
        self.kernel = uniform is not None  # a kernel under the capture; else a plugin
        self.busy = False
        self.active = False
        self.refused: SpecproofError | None = None
        self.thread = threading.get_ident()

    # ---- refusals ----------------------------------------------------------------------------------------------
    def refusal(self, op: str, frame: FrameType | None, why: str = _NOT_ENUMERATED) -> SpecproofError:
        """The error for a draw from ``op`` at ``frame``'s user line, kept to be raised again on exit: user code
        that catches it still gets no verdict."""
        if self.kernel:
            sys.setprofile(None)
        inside = " inside a torch helper" if self.busy else ""
        why = why if self.kernel else _NO_UNIFORM
        self.refused = self.error(self.field, f"{op}{inside}: {why}; {self.way_out} ({self.where(frame)})")
        return self.refused

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        """A kernel's profiler: refuse a draw through a name bound before the capture (a C method of a
        ``random.Random`` or ``os.urandom`` when called, a numpy random source when a function that names it
        starts); switched off while the adapter, specproof's own code, reads rows."""
        if event == "c_call":
            self._c_call(frame, arg)
        elif event == "call":
            code = frame.f_code
            if not not_user_code(code.co_filename):
                self._scan(frame)
            elif _own_file(code.co_filename) and self._before_or_after_kernel(frame):
                sys.setprofile(None)  # until the next torch call: the adapter's rows are no kernel's draws

    def _c_call(self, frame: FrameType, arg: object) -> None:
        """Refuse a call of a C method of a ``random.Random`` that draws or reseeds the shared generator, or of
        ``os.urandom``."""
        owner = getattr(arg, "__self__", None)
        if isinstance(owner, _random.Random):
            name = arg.__name__  # type: ignore[attr-defined]
            shared = owner is random._inst  # type: ignore[attr-defined]  # the module's functions' generator
            if name in _DRAWS or (name in _RESEEDS and shared):
                why = _BOUND if name == "random" else _RESEEDING if name in _RESEEDS else _NOT_ENUMERATED
                self._refuse_draw(frame, f"random.{name}" if shared else f"random.Random.{name}", why)
        elif arg is os.urandom:
            self._refuse_draw(frame, "os.urandom", _NOT_ENUMERATED)

    def _scan(self, frame: FrameType) -> None:
        """Refuse a user function, as it starts, that names a numpy random source (a global or an argument, or
        one of its attributes). Within one entry a function's globals, and an object's attributes, are looked at
        once (a whole generation loop calls thousands of library functions per run)."""
        code = frame.f_code
        values = frame.f_locals.items()
        if code not in self.scanned_codes:
            self.scanned_codes.add(code)
            names = frame.f_globals
            values = (*((n, names.get(n)) for n in code.co_names), *values)
        for name, value in values:
            found = self._held(name, value)
            if found is not None:
                raise self.refusal(f"numpy.random ({found}, named in {code.co_name})", frame)

    def _held(self, name: str, value: object) -> str | None:
        """:func:`_numpy_held`, an object's attributes looked into once per entry (the entry keeps the object, so
        its id is not reused)."""
        what = _numpy_source(value)
        if what is not None:
            return f"{name}, {what}"
        if type(getattr(value, "__dict__", None)) is not dict or isinstance(value, self.opaque):
            return None
        kept = self.scanned_objects.get(id(value))
        if kept is None:
            kept = self.scanned_objects[id(value)] = (value, _numpy_held(name, value, self.opaque))
        return kept[1]

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

    def drawn_by_user(self, origin: FrameType | None) -> bool:
        """Whether a draw made at ``origin`` (the first frame outside random.py) is the user's: not specproof's own
        code, and, for a plugin, not a library that specproof's own code, called by the plugin (its ``rng``),
        called in turn. Between the plugin and the frame that called it only specproof's own code may lie (a
        wrapper recording the plugin's lines)."""
        if origin is None or _own(origin):
            return False
        if self.kernel:
            return True
        frame: FrameType | None = origin
        while frame is not None and not _own(frame):
            frame = frame.f_back
        while frame is not None and frame is not self.block:
            if not _own(frame):
                return False  # specproof's code called by user code drew
            frame = frame.f_back
        return True

    def _refuse_draw(self, frame: FrameType, method: str, why: str) -> None:
        """Refuse a draw by the C function ``method`` called at ``frame``, unless specproof's own code drew."""
        public, origin = _drawer(frame)
        if self.drawn_by_user(origin):
            shown = method if public is None or method == f"random.{public}" else f"random.{public} ({method})"
            raise self.refusal(shown, frame, why)

    # ---- entering and leaving ----------------------------------------------------------------------------------
    def __enter__(self) -> RandomSources:
        """Replace the names; for a kernel also take the global states and start the profiler. A plugin's watch,
        entered once per call, does only the cheap part: its code was scanned before (:func:`scan_plugin`)."""
        if self.kernel:
            self.python_state, self.numpy_state = random.getstate(), _NUMPY_GET_STATE(legacy=False)
            self.saved_numpy = {name: getattr(np.random, name) for name in _NUMPY_NAMES}
            vars(np.random).update(_NUMPY_STAND_INS)
        self.saved_random = random.random
        self.saved_method = vars(random.Random).get("random")
        _ACTIVE.append(self)
        random.random = _module_random  # type: ignore[assignment]
        random.Random.random = _method_random  # type: ignore[method-assign]
        block = sys._getframe(1)  # the frame running the with-block: past the capture() generator and contextlib
        while block.f_code.co_flags & inspect.CO_GENERATOR or block.f_code.co_filename == contextlib.__file__:
            block = block.f_back
        self.block = block
        self.refused = None
        self.active = True
        self.scanned_codes: set = set()
        self.scanned_objects: dict[int, tuple[object, str | None]] = {}
        self.opaque = _opaque()
        if self.kernel:
            self.previous = sys.getprofile()
            sys.setprofile(self.profile)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.active = False
        _ACTIVE.remove(self)
        random.random = self.saved_random  # type: ignore[assignment]
        if self.saved_method is None:
            del random.Random.random
        else:
            random.Random.random = self.saved_method  # type: ignore[method-assign]
        moved = []
        if self.kernel:
            _reinstall(self.previous)
            vars(np.random).update(self.saved_numpy)
            if random.getstate() != self.python_state:
                moved.append("random")
                random.setstate(self.python_state)
            if not _equal(_NUMPY_GET_STATE(legacy=False), self.numpy_state):
                moved.append("numpy.random")
                _NUMPY_SET_STATE(self.numpy_state)
        if self.refused is not None and error is not self.refused:  # caught by the user, or hidden by another error
            raise self.refused
        if moved and error is None:
            raise self.error(self.field, f"{' and '.join(moved)}: the global generator moved while the kernel ran, "
                                         f"a draw specproof did not see (from C code, or through an object it does "
                                         f"not watch); {self.way_out}")


_PLUGIN = threading.local()  # the thread's plugin watch, and whether a plugin is being called
_SCANNED: dict[int, tuple[object, RandomSourceError | None]] = {}  # id(plugin) -> (plugin, its refusal or None)
#: modules a plugin may import inside a function to draw from: resolved (imported) by the scan
_SOURCE_MODULES = ("random", "os", "secrets", "numpy", "numpy.random", "torch")
_LOADS = ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF", "LOAD_CLASSDEREF")
_STORES = ("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF")


def call_plugin(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)``, a user's verifier, with every draw outside its ``rng`` refused.

    The plugin's code is scanned once (:func:`scan_plugin`): a name, module attribute or import that reaches another
    random source is refused, even on a branch that would not run. Each call then runs with ``random.random()`` and
    numpy's global draws replaced, and a profiler sees draws through names bound earlier. A plugin called inside a
    plugin runs under the outer watch.

    Parameters
    ----------
    fn : callable
        The plugin, ``fn(tree, p, q, rng)`` for a verifier.
    *args : object
        Its arguments.

    Returns
    -------
    object
        What ``fn`` returns.

    Raises
    ------
    RandomSourceError
        On field ``verifier``: ``fn`` names or makes a draw from Python's ``random``, ``os.urandom``,
        ``numpy.random`` or torch's generators; the message names the source and the plugin's line.
    """
    if getattr(_PLUGIN, "calling", False):
        return fn(*args)
    scan_plugin(fn)
    sources = getattr(_PLUGIN, "sources", None)
    if sources is None:
        sources = _PLUGIN.sources = RandomSources(error=RandomSourceError, field="verifier", way_out=PLUGIN_WAY_OUT)
    _PLUGIN.calling = True
    try:
        with sources:
            return fn(*args)
    finally:
        _PLUGIN.calling = False


def scan_plugin(fn: object) -> None:
    """Refuse a plugin whose code names a random source other than ``rng`` (:func:`random_source`): a global, a
    module's attribute (``random.choice``, ``np.random.rand``, ``torch.rand``, a module imported inside the
    function included) or one of the plugin object's attributes, with the line that names it. The code is
    :func:`~simulator.usercode.plugin_code_globals`'s; the answer is kept per plugin."""
    kept = _SCANNED.get(id(fn))
    if kept is None or kept[0] is not fn:
        kept = _SCANNED[id(fn)] = (fn, _scanned(fn))
    if kept[1] is not None:
        raise kept[1]


def _scanned(fn: object) -> RandomSourceError | None:
    for attribute, value in _attributes(fn):
        what = random_source(value)
        if what is not None:
            return RandomSourceError("verifier", f"{what} (the plugin's {attribute}): {_NO_UNIFORM}; "
                                                 f"{PLUGIN_WAY_OUT}")
    bound: dict[str, object] = {}  # names bound to a module by an import inside a function, across the plugin
    for code, namespace in plugin_code_globals(fn).items():
        found = _code_source(code, namespace, bound)
        if found is not None:
            what, line = found
            text = linecache.getline(code.co_filename, line).strip()
            return RandomSourceError("verifier", f"{what}: {_NO_UNIFORM}; {PLUGIN_WAY_OUT} ({code.co_filename}:"
                                                 f"{line} in {code.co_name}: {text})")
    return None


def _attributes(fn: object) -> list[tuple[str, object]]:
    """The plugin object's own attributes and, for a function, the variables it closes over, by name."""
    try:
        held = [(k, v) for k, v in vars(fn).items() if not k.startswith("__")]
    except TypeError:  # no __dict__
        held = []
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    for name, cell in zip(code.co_freevars if code is not None else (), cells):
        try:
            held.append((name, cell.cell_contents))
        except ValueError:  # an empty cell
            continue
    return held


def _code_source(code, namespace: dict, bound: dict[str, object]) -> tuple[str, int] | None:
    """The first random source ``code`` names and its line, following a name through module attributes
    (``np.random.rand``) and imports (``import torch`` then ``torch.rand``)."""
    builtins = namespace.get("__builtins__", {})
    builtins = builtins if isinstance(builtins, dict) else vars(builtins)
    current: object = None
    dotted = ""
    line = code.co_firstlineno
    for ins in dis.get_instructions(code):
        if ins.positions is not None and ins.positions.lineno is not None:
            line = ins.positions.lineno
        op = ins.opname
        if op in _LOADS:
            name = dotted = ins.argval
            current = bound.get(name) if op in ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLASSDEREF") else \
                namespace.get(name, builtins.get(name))
            if current is None and op == "LOAD_DEREF":
                current = bound.get(name)
        elif op in ("LOAD_ATTR", "LOAD_METHOD", "IMPORT_FROM") and isinstance(current, ModuleType):
            current = getattr(current, ins.argval, None)
            dotted = f"{dotted}.{ins.argval}"
        elif op == "IMPORT_NAME":
            current, dotted = _module(ins.argval), ins.argval.partition(".")[0]
        elif op in _STORES and isinstance(current, (ModuleType, FunctionType, BuiltinMethodType, MethodType)):
            bound[ins.argval] = current
            continue
        else:
            current = None
        what = random_source(current) if current is not None else None
        if what is not None:
            return (what if what == dotted else f"{dotted} ({what})"), line
    return None


def _module(name: str) -> ModuleType | None:
    """The module ``import name`` binds (its top package, as the import does), imported when it is one of the
    random sources' and not imported yet."""
    top = name.partition(".")[0]
    if name in _SOURCE_MODULES and name not in sys.modules:
        importlib.import_module(name)
    return sys.modules.get(top)


def random_source(value: object) -> str | None:
    """What makes ``value`` a random source other than a plugin's ``rng``, or ``None``: a numpy generator or
    function (:func:`_numpy_source`), a ``random.Random`` or its method (the ``random`` module's functions are
    those of its shared one), ``os.urandom``, a torch random op or generator."""
    what = _numpy_source(value)
    if what is not None:
        return what
    if value is os.urandom or value is getattr(os, "getrandom", None):
        return f"os.{value.__name__}"  # type: ignore[union-attr]
    if isinstance(value, (BuiltinMethodType, MethodType)) and isinstance(value.__self__, random.Random):
        shared = value.__self__ is random._inst  # type: ignore[attr-defined]
        return f"random.{value.__name__}" if shared else f"random.{type(value.__self__).__name__}.{value.__name__}"
    if isinstance(value, random.Random):
        return f"a random.{type(value).__name__}"
    if isinstance(value, type) and issubclass(value, random.Random):
        return f"random.{value.__name__}"
    if value is _module_random:  # random.random while a watch is active
        return "random.random"
    op = _torch_draw(value)
    if op is not None:
        return op
    generator = getattr(sys.modules.get("torch"), "Generator", None)
    if generator is not None and (value is generator or isinstance(value, generator)):
        return "a torch.Generator"
    return None


def _reinstall(previous: object) -> None:
    """Put back the profiler that was set before: a Python function through ``sys.setprofile``, a C profiler
    (``cProfile.Profile``, which ``sys.setprofile`` cannot take back) through its own ``enable``."""
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
def _own_file(filename: str) -> bool:
    return is_own_frame(filename)


def _own(frame: FrameType | None) -> bool:
    return frame is not None and _own_file(frame.f_code.co_filename)


def _uniform(op: str, caller: FrameType, original: Callable[[], float]) -> object:
    """The active watch's answer to ``random.random()``: a kernel's capture gives one of its uniforms; a plugin's
    watch refuses. Of random.py's methods only ``uniform(a, b)``, an affine map of it, gets one: the others
    transform it in ways the capture does not model. Another thread, and specproof's own code, draw from their
    own streams."""
    sources = _ACTIVE[-1] if _ACTIVE else None
    public, origin = _drawer(caller)
    if sources is None or sources.thread != threading.get_ident() or not sources.drawn_by_user(origin):
        return original()
    if public not in (None, "uniform"):
        raise sources.refusal(f"random.{public}", caller)
    if sources.busy or sources.uniform is None:
        raise sources.refusal(op, caller)
    return sources.uniform()


_GLOBAL_RANDOM = random.random


def _module_random() -> object:
    return _uniform("random.random", sys._getframe(1), _GLOBAL_RANDOM)


def _method_random(self: random.Random) -> object:
    return _uniform("random.Random.random", sys._getframe(1), lambda: _random.Random.random(self))


def _numpy_call(name: str, original: Callable[..., object], caller: FrameType, args, kwargs) -> object:
    """``numpy.random.<name>(...)`` while a watch is active: refused from user code, run for specproof's own code
    (a model's seeded rows) and for other threads."""
    sources = _ACTIVE[-1] if _ACTIVE else None
    if sources is None or sources.thread != threading.get_ident() or not sources.drawn_by_user(caller):
        return original(*args, **kwargs)
    raise sources.refusal(f"numpy.random.{name}", caller)


class _StandIn(type):
    """A class of numpy.random while a watch is active: calling it goes through :func:`_numpy_call`;
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
