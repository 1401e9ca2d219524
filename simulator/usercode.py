"""Code specproof did not write (plugins, kernels, adapters, their modules): the code a plugin runs, found without
running it, and the ways it can leave a run, each a typed error, so that exit codes never lie
(docs/cli/README.md#exit-codes)."""

from __future__ import annotations

import dis
import importlib
import importlib.util
import inspect
import os
import signal
import sys
import threading
import traceback
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

from .errors import InvalidParameterError, MissingDependencyError

T = TypeVar("T")
#: specproof's own packages by name, with their folders: a frame in one of them is not user code. The core is here
#: from the start; each package above registers itself when imported (:func:`register_own_package`).
_OWN: dict[str, str] = {__name__.partition(".")[0]: str(Path(__file__).resolve().parent)}
#: files inside those packages that are user code all the same (:func:`register_specimens`)
_SPECIMENS: list[str] = []
#: the exit status of a run stopped by SIGINT or SIGTERM (the shell's 128 + SIGINT)
INTERRUPTED_EXIT = 130

_signalled: list[int] = []


@contextmanager
def interrupts_recorded() -> Iterator[None]:
    """Inside the block, SIGINT and SIGTERM are recorded (:func:`interrupted`) before ``KeyboardInterrupt`` is
    raised in the main thread; the previous handlers come back after it. Elsewhere than the main thread it does
    nothing.

    A plugin's ``sys.exit(0)`` must not turn a gate green, nor its ``KeyboardInterrupt`` pass for the user's Ctrl-C:
    the command line runs inside this block, and code running user code turns an exit or interrupt into a typed
    error unless :func:`interrupted` says the run was interrupted.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame) -> None:
        _signalled.append(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    _signalled.clear()
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def interrupted() -> bool:
    """Whether SIGINT or SIGTERM arrived inside the current :func:`interrupts_recorded` block."""
    return bool(_signalled)


def register_own_package(name: str, init_file: str) -> None:
    """Count the package ``name``, whose ``__init__.py`` is ``init_file``, as specproof's own code: its frames are
    not user code, and an object of its classes watches its own randomness (a torch kernel). Each package above
    the core calls it when imported, so the core need not name them."""
    _OWN[name] = str(Path(init_file).resolve().parent)


def register_specimens(*files: str) -> None:
    """Count ``files``, inside one of specproof's own packages, as user code all the same: the kernels shipped as
    specimens (the gate's, for messages, precision and coverage). Their package calls it when imported."""
    _SPECIMENS.extend(str(Path(f).resolve()) for f in files if str(Path(f).resolve()) not in _SPECIMENS)


def own_code() -> tuple[str, ...]:
    """The folders of specproof's own packages imported so far (:func:`register_own_package`)."""
    return tuple(_OWN.values())


def specimens() -> tuple[str, ...]:
    """The files of specproof's own packages that are user code all the same (:func:`register_specimens`)."""
    return tuple(_SPECIMENS)


def is_own_module(module_name: str) -> bool:
    """Whether the module ``module_name`` (dotted) belongs to one of specproof's own packages."""
    return module_name.partition(".")[0] in _OWN


def is_own_frame(filename: str) -> bool:
    """Whether a frame of ``filename`` is specproof's own code (not a user's, nor a specimen kernel's)."""
    path = str(Path(filename).resolve())
    return path.startswith(own_code()) and not path.startswith(specimens())


def source_line(err: BaseException) -> str:
    """Where ``err`` was raised, as ``file:line in function: code``: the innermost frame outside specproof's own
    packages and triton's (the user's code, a Triton kernel's line included; a call into the randomness interface is
    reported at the caller), or the innermost frame when every frame is specproof's."""
    frames = traceback.extract_tb(err.__traceback__)[1:] or traceback.extract_tb(err.__traceback__)
    if not frames:
        return "no traceback"
    triton = sys.modules.get("triton")
    interpreter = (str(Path(triton.__file__).resolve().parent),) if triton is not None else ()
    theirs = [f for f in frames if not is_own_frame(f.filename)
              and not str(Path(f.filename).resolve()).startswith(interpreter)]
    frame = (theirs or frames)[-1]
    code = f": {frame.line.strip()}" if frame.line else ""
    return f"{frame.filename}:{frame.lineno} in {frame.name}{code}"


def raised_by_user_code(err: BaseException) -> bool:
    """Whether the innermost frame of ``err``'s traceback lies outside specproof's packages (and outside the
    standard library's ``sys.exit``, which has no Python frame)."""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and not is_own_frame(frames[-1].filename)


def escape_message(err: BaseException) -> str:
    """How an exit or interrupt raised by user code is named: ``SystemExit(0)``, ``KeyboardInterrupt``."""
    if isinstance(err, SystemExit):
        return f"SystemExit({err.code!r}) (it called sys.exit or exit(); a plugin must return, not exit)"
    return f"{type(err).__name__} raised by the code itself, not by a signal"


def import_user_module(module_name: str, field: str):
    """Import a user's module (the working directory searched first); any failure, an exit or an interrupt it
    raises while importing included, is :class:`InvalidParameterError` on ``field`` naming the module, the
    exception and the line that raised."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if _missing_is_the_module(module_name, err.name or ""):
            raise InvalidParameterError(field, f"cannot import module {module_name!r}: no module named {err.name!r} "
                                               f"(searched the working directory {os.getcwd()} and sys.path)") \
                from None
        raise InvalidParameterError(field, f"module {module_name!r} failed to import: {_described(err)}") from None
    except (KeyboardInterrupt, SystemExit) as err:
        if isinstance(err, KeyboardInterrupt) and interrupted():
            raise
        raise InvalidParameterError(field, f"module {module_name!r} raised {escape_message(err)} while importing "
                                           f"({source_line(err)})") from None
    except Exception as err:  # noqa: BLE001 — the user's module: any error is theirs, named with its line
        raise InvalidParameterError(field, f"module {module_name!r} failed to import: {_described(err)}") from None


def _missing_is_the_module(module_name: str, missing: str) -> bool:
    """Whether ``missing`` is ``module_name`` or one of its parent packages (a misspelt name), not a module the
    user's module itself imports."""
    parts = module_name.split(".")
    return missing in {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def _described(err: BaseException) -> str:
    return f"{type(err).__name__}: {err} ({source_line(err)})"


def check_importable(module_name: str, field: str) -> None:
    """Refuse a module that cannot be found, before anything heavy is imported (``find_spec`` imports only the
    parent packages); a module that exists but fails to import is reported when it is imported."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(module_name)
    except ModuleNotFoundError as err:
        found = None if _missing_is_the_module(module_name, err.name or "") else True
    except (ImportError, ValueError):
        found = True  # a parent package that fails to import: the import itself reports how
    except (KeyboardInterrupt, SystemExit) as err:
        if isinstance(err, KeyboardInterrupt) and interrupted():
            raise
        found = True
    except Exception:  # noqa: BLE001 — a parent package raising: reported by the import
        found = True
    if found is None:
        raise InvalidParameterError(field, f"cannot import module {module_name!r}: no such module (searched the "
                                           f"working directory {os.getcwd()} and sys.path)")


def add_import_path(directories: Sequence[str], field: str) -> None:
    """Put each directory first on ``sys.path`` (the first given searched first), so that a user's modules in a
    source tree that is not installed can be imported; a directory that does not exist is
    :class:`InvalidParameterError` on ``field``."""
    for directory in reversed(directories):
        path = Path(directory).expanduser().resolve()
        if not path.is_dir():
            raise InvalidParameterError(field, f"{directory!r} is not a directory")
        if str(path) in sys.path:
            sys.path.remove(str(path))
        sys.path.insert(0, str(path))


def run_user_code(call: Callable[[], T], field: str, what: str) -> T:
    """``call()``, a user's code (a constructor, a hook); anything it raises — an exit or interrupt included — is
    :class:`InvalidParameterError` on ``field`` saying ``what`` raised it and the line that raised."""
    try:
        return call()
    except (KeyboardInterrupt, SystemExit) as err:
        if isinstance(err, KeyboardInterrupt) and interrupted():
            raise
        raise InvalidParameterError(field, f"{what} raised {escape_message(err)} ({source_line(err)})") from None
    except Exception as err:  # noqa: BLE001 — the user's code: any error is theirs, named with its line
        raise InvalidParameterError(field, f"{what} raised {_described(err)}") from None


#: optional dependencies: module -> the extra that installs it
EXTRAS = {"torch": "torch", "transformers": "torch", "distributed": "test", "hypothesis": "test", "gguf": "real",
          "accelerate": "real", "mlx_lm": "mlx"}


def require(module_name: str, what: str, field: str) -> None:
    """Refuse ``what`` (a command, an option, a check) when ``module_name`` is not installed, naming the extra
    that installs it (:class:`MissingDependencyError`)."""
    try:
        present = importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):
        present = False
    if not present:
        extra = EXTRAS.get(module_name, module_name)
        raise MissingDependencyError(field, f"{what} needs {module_name}, which is not installed: "
                                            f"pip install -e '.[{extra}]' (or pip install 'specproof[{extra}]')")


def plugin_codes(fn: object) -> frozenset[types.CodeType]:
    """The code a plugin runs, found without running it (:func:`plugin_code_globals`)."""
    return frozenset(plugin_code_globals(fn))


def plugin_code_globals(fn: object) -> dict[types.CodeType, dict]:
    """The code a plugin runs, found without running it, each with the globals its names are looked up in: its
    function (or, for a rule specproof built around the user's functions, such as ``tv(SingleStepRule(...,
    plan=my_plan))``, the user's functions it holds), the functions nested in them, and the functions and classes
    of the same file they name as globals, transitively. Code in specproof's own packages is never a plugin's."""
    todo = [(user_code_of(root), _func(root).__globals__) for root in _roots(fn)]
    seen: dict[types.CodeType, dict] = {}
    while todo:
        code, namespace = todo.pop()
        if code in seen:
            continue
        seen[code] = namespace
        todo += [(c, namespace) for c in code.co_consts if isinstance(c, types.CodeType)]
        for name in _global_names(code):
            for found in _functions_of(namespace.get(name)):
                inner = user_code_of(found)
                if inner is not None and inner.co_filename == code.co_filename:
                    todo.append((inner, _func(found).__globals__))
    return seen


def _roots(fn: object) -> list[object]:
    fn = inspect.unwrap(fn) if callable(fn) else fn
    if user_code_of(fn) is not None:
        return [fn]
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _filled(c)]
    call = [] if inspect.isroutine(fn) or inspect.isclass(fn) else [getattr(type(fn), "__call__", None)]
    held = [fn, *cells, *call] + [v for obj in (fn, *cells) for v in _attributes(obj)]
    return [obj for obj in held if user_code_of(obj) is not None]


def _func(obj: object):
    """A method's function; a function itself."""
    return getattr(obj, "__func__", obj)


def user_code_of(obj: object) -> types.CodeType | None:
    """The code of a user's Python function, method or lambda (``None`` for anything else, or for specproof's)."""
    code = getattr(_func(obj), "__code__", None)
    if not isinstance(code, types.CodeType) or is_own_frame(code.co_filename) or code.co_filename.startswith("<"):
        return None
    return code


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


def _attributes(obj: object) -> list[object]:
    try:
        return list(vars(obj).values())
    except TypeError:  # no __dict__
        return []


def _global_names(code: types.CodeType) -> set[str]:
    return {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}


def _functions_of(obj: object) -> list[object]:
    """A function itself; a class's methods (static and class methods and properties unwrapped)."""
    if inspect.isclass(obj):
        out = []
        for value in vars(obj).values():
            if isinstance(value, property):
                out += [f for f in (value.fget, value.fset, value.fdel) if f is not None]
            else:
                out.append(_func(value))
        return out
    return [obj]
