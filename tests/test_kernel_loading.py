"""How a kernel is named and loaded: ``module:Class.method``, ``module:Class`` and nested classes constructed with
``--kernel-init``, ``--import-path``, an adapter's ``before_kernel_import`` hook stubbing a heavy import, and
TorchScript and ``torch.compile``d helpers run as Python under the capture (or refused, named).

The kernels are in tests/kernel_modules/, found through ``--import-path`` only. The LOSSY numbers come from a
closed form (:func:`_target_residual_tvd`), not from the code under test.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from fractions import Fraction
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from exact import certify  # noqa: E402
from exact.subject import subject  # noqa: E402
from simulator.drafting.drafter_registry import make_drafter  # noqa: E402
from simulator.errors import KernelError  # noqa: E402
from simulator.kernels import capture as torch_capture  # noqa: E402
from simulator.kernels import kernel as kernels  # noqa: E402
from simulator.kernels.kernel import Kernel  # noqa: E402
from simulator.models import RandomRationalModel  # noqa: E402
from simulator.trees import make_topology  # noqa: E402
from specproof.cli import app as cli  # noqa: E402

MODULES = Path(__file__).resolve().parent / "kernel_modules"
MODEL = RandomRationalModel(3, seed=1)


@pytest.fixture(autouse=True)
def fresh_imports(monkeypatch):
    """Each test imports the kernel modules afresh (``kl_*``, and the stubbed ``kl_serving_engine``) and leaves
    ``sys.path`` as it found it."""
    def forget() -> None:
        for name in [n for n in sys.modules if n.startswith("kl_")]:
            del sys.modules[name]
    forget()
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    forget()


def _certify(kernel: Kernel):
    """A chain of one draft: the closed form below is for depth 1."""
    return certify(MODEL, make_drafter("iid", make_topology("chain", 1, 1)), kernel)


def _target_residual_tvd() -> Fraction:
    """Depth 1 with the token after a rejection drawn from the target ``q`` instead of ``(q − p)_+``: the first
    token has law ``min(p, q)(y) + (1 − s)·q(y)``, ``s = Σ min(p, q)``, and the target completes the rest, so the
    TVD to ``q`` is ``½ Σ_y |min(p, q)(y) − s·q(y)|``."""
    p, q = MODEL.p(()), MODEL.q(())
    s = sum(min(a, b) for a, b in zip(p, q))
    return sum(abs(min(a, b) - s * b) for a, b in zip(p, q)) / 2


def _assert_lossless_and_twin_lossy(lossless, lossy) -> None:
    closed = _target_residual_tvd()
    assert closed > 1e-3  # the bug shows on this pair
    assert lossless.lossless and lossless.tvd <= 1e-12, lossless.tvd
    assert not lossy.lossless and abs(lossy.tvd - closed) <= 1e-10, (lossy.tvd, closed)


def _cli(*args: str, adapter: str = "chain", path: Path | None = MODULES, json_out: Path | None = None):
    words = ["certify", "--adapter", adapter, "--depth", "1", "--model", "random-rational", "--vocab", "3",
             "--seed", "1", *(["--import-path", str(path)] if path else []),
             *(["--json", str(json_out)] if json_out else []), *args]
    return CliRunner().invoke(cli.main, words)


# ---- classes, methods, --kernel-init and --import-path ------------------------------------------------------------
def test_a_method_of_a_class_built_with_kernel_init_certifies_from_the_import_path(tmp_path):
    ok = _cli("--kernel", "kl_classes:Sampler.sample", json_out=tmp_path / "ok.json")
    assert ok.exit_code == 0 and "LOSSLESS" in ok.output, ok.output
    bad = _cli("--kernel", "kl_classes:Sampler.sample", "--kernel-init", "buggy=True", json_out=tmp_path / "bad.json")
    assert bad.exit_code == 1 and "LOSSY" in bad.output, bad.output
    tvd = [Fraction(json.loads((tmp_path / f"{n}.json").read_text())["tvd"]) for n in ("ok", "bad")]
    assert tvd[0] <= 1e-12 and abs(tvd[1] - _target_residual_tvd()) <= 1e-10, tvd


@pytest.mark.parametrize("spec", ["kl_classes:SamplerModule", "kl_classes:Outer.Inner.sample"])
def test_a_class_instance_and_a_nested_method_are_kernels(spec):
    """``module:Class``: the constructed instance is called (an ``nn.Module``: its ``forward``)."""
    path = (str(MODULES),)
    _assert_lossless_and_twin_lossy(_certify(Kernel(spec, "chain", import_path=path)),
                                    _certify(Kernel(spec, "chain", init={"buggy": True}, import_path=path)))


def test_a_description_with_kernel_init_and_import_path_rebuilds_the_kernel():
    """What a gate config, a reproducer or ``hunt`` rebuilds a kernel from carries both."""
    kernel = Kernel("kl_classes:Sampler.sample", "chain", init={"buggy": True}, import_path=(str(MODULES),))
    desc = kernel.describe()
    assert desc["kernel_init"] == {"buggy": True} and desc["import_path"] == [str(MODULES)]
    assert "kernel_init" not in Kernel("kl_classes:speculative", "chain").describe()  # absent when not given
    rebuilt = subject(desc).fn
    assert abs(_certify(rebuilt).tvd - _target_residual_tvd()) <= 1e-10


# ---- the adapter's hook -------------------------------------------------------------------------------------------
def test_an_adapter_hook_stubs_the_heavy_import_of_the_kernels_module():
    without = _cli("--kernel", "kl_heavy:sps")  # the built-in adapter has no hook: the engine is missing
    assert without.exit_code == 2 and "error: kernel:" in without.output, without.output
    assert "No module named 'kl_serving_engine'" in without.output and "Traceback" not in without.output
    hooked = _cli("--kernel", "kl_heavy:sps", "--topology", "chain", adapter="kl_heavy_adapter:adapter")
    assert hooked.exit_code == 0 and "LOSSLESS" in hooked.output, hooked.output


def test_a_built_in_adapter_may_carry_the_hook(monkeypatch):
    sys.path.insert(0, str(MODULES))
    hook = importlib.import_module("kl_heavy_adapter").before_kernel_import
    monkeypatch.setattr(kernels.chain, "before_kernel_import", hook, raising=False)
    assert _certify(Kernel("kl_heavy:sps", "chain")).lossless


def test_a_hook_that_raises_names_the_adapter_and_its_line(tmp_path):
    (tmp_path / "kl_bad_hook.py").write_text("from simulator.kernels.adapters import chain as adapter\n\n\n"
                                             "def before_kernel_import():\n"
                                             "    raise ImportError('the engine needs CUDA')\n")
    out = _cli("--kernel", "kl_classes:Sampler.sample", "--import-path", str(tmp_path),
               adapter="kl_bad_hook:adapter")
    assert out.exit_code == 2 and "error: adapter: before_kernel_import raised ImportError: the engine needs CUDA" \
        in out.output and "kl_bad_hook.py:5" in out.output and "Traceback" not in out.output, out.output


# ---- TorchScript and torch.compile ----------------------------------------------------------------------------------
@pytest.mark.parametrize("imported_before", [False, True], ids=["imported-here", "imported-before"])
def test_a_torchscript_helper_runs_as_python_under_the_capture(imported_before):
    """kl_scripted draws its tokens in a ``@torch.jit.script`` race, as vLLM's sampler does. Imported here, it is
    imported with scripting off; imported before, its scripted race runs as its Python original under the
    capture. Either way TorchScript is as it was after."""
    call = vars(torch.jit.ScriptFunction)["__call__"]
    sys.path.insert(0, str(MODULES))
    if imported_before:
        assert isinstance(importlib.import_module("kl_scripted").race, torch.jit.ScriptFunction)
    _assert_lossless_and_twin_lossy(_certify(Kernel("kl_scripted:sps", "chain")),
                                    _certify(Kernel("kl_scripted:sps_target_residual", "chain")))
    assert isinstance(sys.modules["kl_scripted"].race, torch.jit.ScriptFunction) == imported_before
    assert torch.jit._state._enabled.enabled and vars(torch.jit.ScriptFunction)["__call__"] is call


def test_a_scripted_helper_left_to_torchscript_escapes_the_capture(monkeypatch):
    """The negative control: with TorchScript left to run, the race draws where the mode sees nothing."""
    sys.path.insert(0, str(MODULES))
    importlib.import_module("kl_scripted")
    monkeypatch.setattr(torch_capture, "scripted_code_as_python", contextlib.nullcontext)
    with pytest.raises(KernelError):
        _certify(Kernel("kl_scripted:sps", "chain"))


def test_a_scripted_module_is_refused_naming_it(tmp_path):
    """A ``ScriptModule`` keeps no Python original: refused at its call, naming it and the kernel's line."""
    (tmp_path / "kl_script_module.py").write_text(
        "import torch\n\n\nclass Double(torch.nn.Module):\n    def forward(self, x):\n        return 2 * x\n\n\n"
        "double = torch.jit.script(Double())\n\n\ndef kernel(parents, tokens, p, q):\n"
        "    return torch.tensor(0), torch.multinomial(double(q[0]), 1)\n")
    sys.path.insert(0, str(tmp_path))
    importlib.import_module("kl_script_module")  # imported before specproof: double is a ScriptModule
    with pytest.raises(KernelError) as err:
        _certify(Kernel("kl_script_module:kernel", "tree"))
    message = err.value.message
    assert "Double.forward" in message and "PYTORCH_JIT=0" in message and "kl_script_module.py:13" in message


@pytest.mark.slow  # importing torch._dynamo alone takes about 3 s
def test_a_compiled_helper_runs_eagerly_under_the_capture():
    """kl_compiled's race is ``torch.compile``d: under the capture dynamo stands aside, so nothing is compiled
    (no C compiler needed) and the mode sees the race's ops."""
    from torch._dynamo.utils import counters

    path = (str(MODULES),)
    compiled = counters["stats"]["unique_graphs"]
    ok = _certify(Kernel("kl_compiled:sps", "chain", import_path=path))
    _assert_lossless_and_twin_lossy(ok, _certify(Kernel("kl_compiled:sps_target_residual", "chain",
                                                        import_path=path)))
    assert counters["stats"]["unique_graphs"] == compiled


# ---- bad names and options ------------------------------------------------------------------------------------------
BROKEN_LINE = next(i for i, line in enumerate((MODULES / "kl_classes.py").read_text().splitlines(), 1)
                   if "no GPU here" in line)


@pytest.mark.parametrize("args, path, field, words", [
    (("--kernel", "kl_classes:Nope.sample"), MODULES, "kernel", "has no attribute 'Nope'"),
    (("--kernel", "kl_classes:Sampler.nope"), MODULES, "kernel", "has no attribute 'nope'"),
    (("--kernel", "kl_classes:torch"), MODULES, "kernel", "torch in 'kl_classes' is a module, not callable"),
    (("--kernel", "kl_classes:Outer"), MODULES, "kernel", "an instance of Outer is not callable"),
    (("--kernel", "kl_classes:speculative", "--kernel-init", "buggy=True"), MODULES, "kernel-init",
     "nothing to construct"),
    (("--kernel", "kl_classes:Sampler.sample", "--kernel-init", "temperature=2"), MODULES, "kernel-init",
     "does not take ['temperature']"),
    (("--kernel", "kl_classes:Sampler.sample", "--kernel-init", "buggy"), MODULES, "kernel-init",
     "expected NAME=VALUE"),
    (("--kernel", "kl_classes:Broken.sample"), MODULES, "kernel",
     f"constructing Broken raised RuntimeError: no GPU here ({MODULES / 'kl_classes.py'}:{BROKEN_LINE}"),
    (("--kernel", "kl_classes:Sampler.sample"), Path("/no/such/directory"), "import-path", "is not a directory"),
    (("--kernel", "kl_classes:Sampler.sample"), None, "kernel", "cannot import module 'kl_classes'"),
    (("--verifier", "tv-sps", "--kernel-init", "buggy=True"), None, "kernel-init", "applies to --kernel only"),
])
def test_bad_names_and_options_exit_2_naming_the_option(args, path, field, words):
    out = _cli(*args, path=path, adapter="tree" if args[0] == "--verifier" else "chain")
    assert out.exit_code == 2 and f"error: {field}: " in out.output and words in out.output, out.output
    assert "Traceback" not in out.output



def test_loading_a_kernel_asks_for_tritons_interpreter_unless_the_environment_chose(monkeypatch):
    # importing specproof set nothing (tests/test_imports.py); loading a kernel, before its modules import triton
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    Kernel("specproof.gate.torch_kernels:sps_chain", "chain")
    assert os.environ["TRITON_INTERPRET"] == "1"
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # a GPU run's choice stays
    Kernel("specproof.gate.torch_kernels:sps_chain", "chain")
    assert os.environ["TRITON_INTERPRET"] == "0"
