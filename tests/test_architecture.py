"""The architecture issue 17 fixed: each rule has one reference and at most one batched array kernel, engines find
the kernel in the registry, and no other module implements acceptance logic or picks a rule by its name.

Both scans read the source (``ast``), so a new engine that slips back into a private copy of a rule, or into
``if name == "tv-rrs"``, fails here; each test is shown to catch a planted copy.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import simulator
from simulator.drafter_registry import DYNAMIC
from simulator.verifiers import VERIFIERS
from simulator.verifiers.batched.ref import KernelRef

ROOT = Path(simulator.__file__).resolve().parent.parent
#: the acceptance primitives: ``min(1, a/b)`` and the residual ``norm((a − b)_+)``
PRIMITIVES = {"ratio", "residual", "positive_residual"}
#: where they may be called: the rules (references and kernels) and the shared arithmetic that defines them; and
#: the exact dynamic programme for token verification (``exact/dp.py``), a second *method* for the exact ``E[τ]``
#: (a recursion over contexts, not a sampler), against which the Monte Carlo engine is cross-checked
ALLOWED = ("simulator/verifiers/", "simulator/numeric.py", "simulator/array_ops.py", "exact/dp.py")


def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for package in ("simulator", "exact"):
        for path in sorted((ROOT / package).rglob("*.py")):
            out.append((path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))))
    return out


def _primitive_calls(tree: ast.Module) -> list[int]:
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) in PRIMITIVES]


def _name_tests(tree: ast.Module) -> list[int]:
    """Lines comparing something with a verifier's name, or testing a name's prefix (``startswith("lv-")``)."""
    names = set(VERIFIERS) - set(DYNAMIC)  # "dyspec" also names DySpec's drafting scheme
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                    hits.append(node.lineno)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("startswith", "split") and any(
                isinstance(a, ast.Constant) and a.value in ("lv-", "tv-", "bug-", "-") for a in node.args):
            hits.append(node.lineno)
    return hits


def test_each_rule_has_one_reference_and_at_most_one_kernel():
    for name, spec in VERIFIERS.items():
        assert callable(spec.fn) and spec.fn.__module__.startswith("simulator.verifiers."), name
        assert not spec.fn.__module__.startswith("simulator.verifiers.batched"), name
        if spec.kernel is not None:
            assert isinstance(spec.kernel, KernelRef)
            kernel = spec.kernel.resolve().func
            assert kernel.__module__.startswith("simulator.verifiers.batched."), name
            assert list(inspect.signature(kernel).parameters)[0] == "batch", name
    # every rule the engines batch has its kernel; one kernel function per family, the rule chosen by options
    assert all(spec.kernel is not None for spec in VERIFIERS.values())


def test_no_module_outside_the_rules_computes_acceptance():
    offenders = {path: lines for path, tree in _modules() if not path.startswith(ALLOWED)
                 and (lines := _primitive_calls(tree))}
    assert offenders == {}
    planted = ast.parse("def accept(q, p, u):\n    return u < ratio(q, p)\n")
    assert _primitive_calls(planted) == [2]


def test_no_engine_picks_a_rule_by_its_name():
    # the registry itself; the theorem checks, whose claims name the rules they are about (Block verification's
    # optimality among the chain rules)
    allowed = ("simulator/verifiers/registry.py", "exact/theorems.py")
    offenders = {path: lines for path, tree in _modules() if path not in allowed and (lines := _name_tests(tree))}
    assert offenders == {}
    planted = ast.parse('if name.startswith("lv-"):\n    pass\nelif name in ("trv", "trv-iid"):\n    pass\n')
    assert _name_tests(planted) == [1, 3]
