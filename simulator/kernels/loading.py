"""How a kernel is named and loaded (docs/kernels.md, "Naming and loading a kernel"): ``module:function``,
``module:Class`` or ``module:Class.method`` resolved and constructed (:func:`load_kernel`), the adapter's
``before_kernel_import`` hook (:func:`run_before_kernel_import`), and modules imported with TorchScript off
(:func:`scripting_off`), so that their ``@torch.jit.script`` helpers stay Python functions the capture sees into
(functions scripted earlier are run as Python by :func:`simulator.kernels.capture.scripted_code_as_python`).
Triton's interpreter is asked for before any of those modules is imported (:func:`request_interpreter`), never
at import of specproof's own modules.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from types import ModuleType
from typing import Callable, Iterator

import torch

from simulator.errors import InvalidParameterError, KernelError
from simulator.usercode import import_user_module, run_user_code

HOOK = "before_kernel_import"
#: read by triton once, when it is first imported: ``1`` makes ``@triton.jit`` build kernels that Triton's
#: interpreter runs on the CPU one operation at a time, where the capture follows their random values
TRITON_INTERPRET = "TRITON_INTERPRET"


def request_interpreter() -> None:
    """Ask for Triton's interpreter, ``TRITON_INTERPRET=1``, unless the environment sets it already (to ``0`` for a
    GPU run, say): called when a kernel is loaded, before its adapter's and its own modules are imported."""
    os.environ.setdefault(TRITON_INTERPRET, "1")


def check_interpreter() -> None:
    """A :class:`KernelError` when triton was imported without its interpreter (before :func:`request_interpreter`;
    importing ``torch._dynamo`` imports triton, for one): its own ``@triton.jit`` functions (``tl.cumsum``) are then
    compiled ones, which do not run on the CPU. Nothing when triton's language is not imported."""
    if "triton.language" not in sys.modules:
        return
    from triton.language import standard
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(standard.cumsum, InterpretedFunction):
        raise KernelError("kernel", f"triton was imported before {TRITON_INTERPRET}=1 was set, so its kernels are "
                                    f"compiled, not interpreted: run with {TRITON_INTERPRET}=1 in the environment")


def interpreter_on() -> None:
    """:func:`request_interpreter` then :func:`check_interpreter`: for code about to import Triton kernels (an
    adapter's hook for a Triton convention)."""
    request_interpreter()
    check_interpreter()


def uses_triton(module: ModuleType) -> bool:
    """Whether ``module`` holds triton or one of its modules among its globals (``import triton``, ``from
    vllm.triton_utils import tl``): a Triton kernel's module."""
    return any(isinstance(value, ModuleType) and value.__name__.partition(".")[0] == "triton"
               for value in vars(module).values())


@contextlib.contextmanager
def scripting_off() -> Iterator[None]:
    """``@torch.jit.script`` returns the function itself inside the block (what ``PYTORCH_JIT=0`` does), so a
    module imported here keeps its helpers in Python; the switch is put back as it was, even on error."""
    state = torch.jit._state._enabled
    before = state.enabled
    state.enabled = False
    try:
        yield
    finally:
        state.enabled = before


def run_before_kernel_import(adapter: Callable, adapter_module: str | None) -> None:
    """Call the adapter's hook before the kernel's module is imported: the adapter's ``before_kernel_import``
    attribute, else (a user's ``module:function`` adapter, ``adapter_module``) its module's function of that name.
    There an adapter installs stubs for a kernel's heavy imports; its errors name ``adapter`` and their line."""
    hook = getattr(adapter, HOOK, None)
    if hook is None and adapter_module is not None:
        hook = getattr(sys.modules.get(adapter_module), HOOK, None)
    if hook is None:
        return
    if not callable(hook):
        raise InvalidParameterError("adapter", f"{HOOK} is {type(hook).__name__}, not a function")
    run_user_code(hook, "adapter", HOOK)


def load_kernel(spec: str, init: dict[str, object]) -> Callable:
    """The kernel ``spec`` names: ``module:function``; ``module:Class`` constructed with ``init`` (the instance is
    called); ``module:Class.method``, the method of an instance constructed with ``init``. Attribute paths may
    nest (``module:Outer.Inner.method``). Errors name ``kernel``, or ``kernel-init`` for arguments the constructor
    does not take and for a kernel with nothing to construct."""
    module_name, _, path = spec.partition(":")
    parts = path.split(".")
    if not module_name or not all(part.isidentifier() for part in parts):
        raise InvalidParameterError("kernel", f"expected module:function, module:Class or module:Class.method, "
                                              f"got {spec!r}")
    owner, obj = None, import_user_module(module_name, "kernel")
    if uses_triton(obj):  # its Triton kernels must be interpreted ones; a torch kernel runs either way
        check_interpreter()
    for i, part in enumerate(parts):
        if not hasattr(obj, part):
            where = module_name if i == 0 else f"{module_name}:{'.'.join(parts[:i])}"
            raise InvalidParameterError("kernel", f"{where!r} has no attribute {part!r}")
        owner, obj = obj, getattr(obj, part)
    if isinstance(obj, type):
        instance = _construct(obj, init)
        if not callable(instance):
            raise InvalidParameterError("kernel", f"an instance of {path} is not callable (no __call__ or forward): "
                                                  f"name a method, module:{path}.METHOD")
        return instance
    if isinstance(owner, type) and inspect.isfunction(inspect.getattr_static(owner, parts[-1])):
        return getattr(_construct(owner, init), parts[-1])  # a plain method: bound to a new instance
    if init:
        raise InvalidParameterError("kernel-init", f"{path} is not a class or a method of one: there is nothing to "
                                                   "construct (--kernel-kwargs sets the call's arguments)")
    if not callable(obj):
        raise InvalidParameterError("kernel", f"{path} in {module_name!r} is a {type(obj).__name__}, not callable")
    return obj


def _construct(cls: type, init: dict[str, object]) -> object:
    """``cls(**init)``: arguments it does not take are refused on ``kernel-init`` before it runs; whatever it
    raises names ``kernel`` and its line."""
    try:
        inspect.signature(cls).bind(**init)
    except TypeError as err:
        raise InvalidParameterError("kernel-init", f"{cls.__qualname__}() does not take {sorted(init)}: {err}") \
            from None
    except ValueError:  # no signature to read (a class implemented in C): its constructor says
        pass
    return run_user_code(lambda: cls(**init), "kernel", f"constructing {cls.__qualname__}")
