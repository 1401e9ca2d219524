"""The architecture: each rule has one reference and at most one array form; engines find a rule's array rule in the
registry, and a single-step rule reaches the array rules that lift it, and the exact dynamic programme, as an object
(its array step); no module outside the rule modules computes acceptance or takes RRS's residual step, and none picks
a rule by its name or by an option string.

The scans read the source (``ast``), so a new engine that slips back into a private copy of a rule, or into ``if
name == "tv-rrs"`` or ``plan.startswith("flow:")``, fails here; each test is shown to catch planted copies, the
residual step among them planted into Layer Verification's array rule and into the exact engine.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import exact.recursions.token_dp
import simulator
import simulator.verifiers.batched.layer
from simulator.drafting.drafter_registry import DYNAMIC
from simulator.verifiers import VERIFIERS
from simulator.verifiers.batched.ref import ArrayRuleRef
from simulator.verifiers.rules import RULES
from simulator.verifiers.single_step_arrays import ArrayStep

ROOT = Path(simulator.__file__).resolve().parent.parent
PACKAGES = ("simulator", "exact", "specproof")
#: the acceptance primitives: ``min(1, a/b)`` and the residual ``norm((a − b)_+)``
PRIMITIVES = {"ratio", "residual", "positive_residual"}
#: where they may be called: the arithmetic that defines them, and the rule modules that compute a rule's own
#: acceptance and residual — the single-step rules' plans and their array steps, the controls built on them, block
#: and traversal verification and their array rules. Not the lifts of a single-step rule (token and Layer
#: Verification, reference and array rule) nor the exact engine: they call the rule's step.
ALLOWED = ("simulator/numeric.py", "simulator/array_ops.py",
           "simulator/verifiers/single_step.py", "simulator/verifiers/single_step_arrays.py",
           "simulator/verifiers/controls.py",
           "simulator/verifiers/block.py", "simulator/verifiers/batched/block.py",
           "simulator/verifiers/traversal.py", "simulator/verifiers/batched/traversal.py")
#: a lift's own correction: Layer Verification's Eq. 2, ``y ~ norm((a_v q_v − flow_v)_+)``, in its backward stage only
ALLOWED_FUNCTIONS = {"simulator/verifiers/layer.py": ("sample_back",),
                     "simulator/verifiers/batched/layer.py": ("_backward",)}
#: where RRS's step ``r ← norm((r − p)_+)`` may be taken: the single-step rules, scalar and array
RRS_STEP_ALLOWED = ("simulator/verifiers/single_step.py", "simulator/verifiers/single_step_arrays.py")
#: the option strings array rules chose a single-step rule by, before they received its array step
PLAN_OPTIONS = {"sps-q", "first", "rrsw-phi", "flow:opt", "flow:gr"}
#: modules that may name rules: the registry itself; the theorem checks, whose claims name the rules they are about
#: (Block verification's optimality among the chain rules)
NAMING_ALLOWED = ("simulator/verifiers/registry.py", "specproof/reports/theorems.py")

RRS_STEP_COPY = '''
def _rrs_target(p, q, rejections):
    target = q
    for _ in range(rejections):
        target = positive_residual(target - p, target)
    return target
'''
SCALAR_COPY = '''
def _rrs_acceptance(p, q, x):
    target = q
    for _ in range(2):
        target = residual(target, p)
    return ratio(target[x], p[x])
'''


def _relative(module: object) -> str:
    return Path(inspect.getsourcefile(module)).resolve().relative_to(ROOT).as_posix()


def _modules(plant: dict[str, str] | None = None) -> list[tuple[str, ast.Module]]:
    """Every module of the packages, parsed; ``plant`` maps a module's path to code appended to its source (the
    file is never written)."""
    out = []
    for package in PACKAGES:
        if not (ROOT / package).is_dir():
            continue
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            source = path.read_text(encoding="utf-8") + (plant or {}).get(name, "")
            out.append((name, ast.parse(source)))
    return out


def _called(node: ast.Call) -> str | None:
    return getattr(node.func, "id", getattr(node.func, "attr", None))


def _primitive_calls(tree: ast.Module, allowed_functions: tuple[str, ...] = ()) -> list[int]:
    """Lines calling an acceptance primitive, outside the functions named."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in allowed_functions:
            skip.update(range(node.lineno, node.end_lineno + 1))
    return sorted({node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
                   and _called(node) in PRIMITIVES and node.lineno not in skip})


def _acceptance_offenders(modules: list[tuple[str, ast.Module]]) -> dict[str, list[int]]:
    return {path: lines for path, tree in modules if path not in ALLOWED
            and (lines := _primitive_calls(tree, ALLOWED_FUNCTIONS.get(path, ())))}


def _rrs_steps(tree: ast.Module) -> list[int]:
    """Lines taking RRS's step ``r ← norm((r − p)_+)``: ``residual(r, p)`` unscaled, or ``positive_residual(r − p,
    r)`` (the positive part of a difference, falling back to the row it was taken from)."""
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or len(node.args) != 2:
            continue
        first, second = node.args
        if _called(node) == "residual" and not node.keywords:
            hits.append(node.lineno)
        elif (_called(node) == "positive_residual" and isinstance(first, ast.BinOp) and isinstance(first.op, ast.Sub)
              and ast.dump(first.left) == ast.dump(second)):
            hits.append(node.lineno)
    return sorted(set(hits))


def _rrs_step_offenders(modules: list[tuple[str, ast.Module]]) -> dict[str, list[int]]:
    return {path: lines for path, tree in modules if path not in RRS_STEP_ALLOWED and (lines := _rrs_steps(tree))}


def _name_tests(tree: ast.Module) -> list[int]:
    """Lines comparing something with a verifier's name, a single-step rule's name or an option string that once
    named one (``plan == "kseq"``), or testing a name's prefix (``startswith("lv-")``, ``startswith("flow:")``)."""
    names = set(VERIFIERS) - set(DYNAMIC)  # "dyspec" also names DySpec's drafting scheme
    names |= set(RULES) | {step.rule.name for step in _array_steps()} | PLAN_OPTIONS
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                    hits.append(node.lineno)
        if isinstance(node, ast.Call) and _called(node) in ("startswith", "split") and any(
                isinstance(a, ast.Constant) and a.value in ("lv-", "tv-", "bug-", "-", "flow:") for a in node.args):
            hits.append(node.lineno)
    return hits


def _array_steps() -> list[ArrayStep]:
    """Every single-step rule's array step the registry hands out (to array rules, and to the exact programme)."""
    steps = [value for spec in VERIFIERS.values() if spec.array_rule is not None
             for _, value in spec.array_rule.options if isinstance(value, ArrayStep)]
    return steps + [spec.exact_dp for spec in VERIFIERS.values() if spec.exact_dp is not None]


def test_each_rule_has_one_reference_and_at_most_one_array_rule():
    for name, spec in VERIFIERS.items():
        assert callable(spec.fn) and spec.fn.__module__.startswith("simulator.verifiers."), name
        assert not spec.fn.__module__.startswith("simulator.verifiers.batched"), name
        if spec.array_rule is not None:
            assert isinstance(spec.array_rule, ArrayRuleRef)
            rule = spec.array_rule.resolve().func
            assert rule.__module__.startswith("simulator.verifiers.batched."), name
            assert list(inspect.signature(rule).parameters)[0] == "batch", name
            # a single-step rule is passed as its array step, never as a string naming it
            assert not any(isinstance(value, str) for _, value in spec.array_rule.options), name
    # every rule the engines batch has its array rule; one function per family, the rule passed to it as an object
    assert all(spec.array_rule is not None for spec in VERIFIERS.values())


def test_each_single_step_rule_has_one_array_step_beside_its_reference():
    by_rule: dict[int, set[int]] = {}
    for step in _array_steps():
        by_rule.setdefault(id(step.rule), set()).add(id(step))
        reference = step.rule.plan or step.rule.solver
        assert type(step).__module__ in ("simulator.verifiers.single_step_arrays", reference.__module__), step
    assert all(len(steps) == 1 for steps in by_rule.values())
    # every single-step rule some lift uses has its array step
    lifted = {id(rule) for rule in RULES.values()}
    assert lifted <= set(by_rule)


def test_no_module_outside_the_rules_computes_acceptance():
    assert _acceptance_offenders(_modules()) == {}
    planted = ast.parse("def accept(q, p, u):\n    return u < ratio(q, p)\n")
    assert _primitive_calls(planted) == [2]
    assert _primitive_calls(planted, ("accept",)) == []
    # a copy of the residual step in Layer Verification's array rule, and of RRS's acceptance in the exact engine
    layer, dp = _relative(simulator.verifiers.batched.layer), _relative(exact.recursions.token_dp)
    flagged = _acceptance_offenders(_modules({layer: RRS_STEP_COPY, dp: SCALAR_COPY}))
    assert set(flagged) == {layer, dp}
    assert len(flagged[layer]) == 1 and len(flagged[dp]) == 2


def test_rrs_residual_step_is_taken_in_the_single_step_rules_only():
    modules = _modules()
    assert _rrs_step_offenders(modules) == {}
    # it is taken there, scalar and array: the plans, and the array step's one target update
    assert {path for path, tree in modules if _rrs_steps(tree)} == set(RRS_STEP_ALLOWED)
    layer, dp = _relative(simulator.verifiers.batched.layer), _relative(exact.recursions.token_dp)
    assert set(_rrs_step_offenders(_modules({layer: RRS_STEP_COPY, dp: SCALAR_COPY}))) == {layer, dp}
    # neither a scaled residual (Eq. 2 of LV, BV's Eq. 4) nor a residual against another row is the step
    assert _rrs_steps(ast.parse("residual(q, flow, scale=a)\npositive_residual(a * q - f, q)\n")) == []


def test_no_engine_picks_a_rule_by_its_name():
    offenders = {path: lines for path, tree in _modules()
                 if path not in NAMING_ALLOWED and (lines := _name_tests(tree))}
    assert offenders == {}
    planted = ast.parse('if name.startswith("lv-"):\n    pass\nelif name in ("trv", "trv-iid"):\n    pass\n')
    assert _name_tests(planted) == [1, 3]
    # an array rule choosing its single-step rule by an option string
    planted = ast.parse('if plan.startswith("flow:"):\n    pass\nelif rule == "kseq":\n    pass\n'
                        'elif plan in ("rrsw", "rrsw-phi"):\n    pass\n')
    assert _name_tests(planted) == [1, 3, 5]
    token_tree = _relative(simulator.verifiers.batched.layer).replace("layer.py", "token_tree.py")
    flagged = {path for path, tree in _modules({token_tree: '\nif plan == "det":\n    pass\n'})
               if path not in NAMING_ALLOWED and _name_tests(tree)}
    assert flagged == {token_tree}


# ---- the three layers ----------------------------------------------------------------------------------------------
#: the layers, lowest first: each may import only from its own layer and the ones below
LAYERS = ("simulator", "exact", "specproof")


def _layer_modules() -> dict[str, ast.Module]:
    return {path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
            for package in LAYERS for path in sorted((ROOT / package).rglob("*.py"))}


def _imported(path: str, tree: ast.Module) -> set[str]:
    """Every module ``path`` imports, at any depth of the file (function-level imports too), relative ones
    resolved against the file's package."""
    package = path.rsplit("/", 1)[0].split("/")
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            out.add(".".join([*base, *([node.module] if node.module else [])]))
    return out


def _upward(modules: dict[str, ast.Module]) -> dict[str, list[str]]:
    """``path -> [modules of a higher layer it imports]``."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    found = {}
    for path, tree in modules.items():
        own = rank[path.split("/")[0]]
        higher = sorted(m for m in _imported(path, tree) if rank.get(m.split(".")[0], -1) > own)
        if higher:
            found[path] = higher
    return found


def test_no_module_imports_from_a_layer_above_it():
    assert _upward(_layer_modules()) == {}
    planted = {"simulator/montecarlo/engine.py": ast.parse("def f():\n    from exact.certificate import certify\n"),
               "exact/law.py": ast.parse("from specproof.gate import hunt\nimport specproof.cli.app\n")}
    assert _upward(planted) == {"simulator/montecarlo/engine.py": ["exact.certificate"],
                                "exact/law.py": ["specproof.cli.app", "specproof.gate"]}


def test_the_exact_engine_is_organised_by_role():
    top = [p.name for p in (ROOT / "exact").glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= 10, sorted(top)
    assert {p.name for p in (ROOT / "exact").iterdir() if p.is_dir() and (p / "__init__.py").exists()} == {
        "recursions", "prove"}


def test_the_core_is_grouped():
    """``simulator/`` keeps at most 14 modules at its top: drafting and the model set-up are packages."""
    top = [p.name for p in (ROOT / "simulator").glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= 14, sorted(top)
    packages = {p.name for p in (ROOT / "simulator").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {"drafting", "models", "verifiers", "montecarlo", "kernels", "real"} <= packages
    drafting = {p.stem for p in (ROOT / "simulator" / "drafting").glob("*.py")}
    assert {"shapes", "arrays", "lazy_draft", "dyspec", "aded", "drafter_registry"} <= drafting
    assert {p.stem for p in (ROOT / "simulator" / "models").glob("*.py")} >= {"model_pairs", "seeded_normals"}


def test_module_file_names_repeat_only_for_a_rule_and_its_array_form():
    names: dict[str, list[str]] = {}
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            if path.name not in ("__init__.py", "__main__.py"):
                names.setdefault(path.name, []).append(path.relative_to(ROOT).as_posix())
    repeated = {name: sorted(paths) for name, paths in names.items() if len(paths) > 1}
    parallel = {name for name, paths in repeated.items()
                if paths == sorted([f"simulator/verifiers/{name}", f"simulator/verifiers/batched/{name}"])}
    assert {name: paths for name, paths in repeated.items() if name not in parallel} == {}


def _module_graph(modules: dict[str, ast.Module]):
    """Every import as a directed graph of the tree's own modules: module-level, inside functions and under ``if
    TYPE_CHECKING:`` alike, since a deferred import is still a dependency (``from pkg import sub`` is an edge to
    ``pkg.sub``; an import of a module's own parent package, initialised first anyway, is no edge)."""
    import networkx as nx

    def dotted(path: str) -> str:
        return path[:-3].replace("/", ".").removesuffix(".__init__")

    known = {dotted(p) for p in modules}
    graph = nx.DiGraph()
    for path, tree in modules.items():
        source, package = dotted(path), path.rsplit("/", 1)[0].split("/")
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join((package[: len(package) - node.level + 1] if node.level else [])
                                + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                while parts and ".".join(parts) not in known:
                    parts.pop()
                target = ".".join(parts)
                if target and target != source and not source.startswith(target + "."):
                    graph.add_edge(source, target)
    return graph


def test_no_import_cycle():
    import networkx as nx

    assert list(nx.simple_cycles(_module_graph(_layer_modules()))) == []
    planted = {"specproof/cli/a.py": ast.parse("from specproof.cli import b\n"),
               "specproof/cli/b.py": ast.parse("from specproof.cli.a import main\n")}
    assert list(nx.simple_cycles(_module_graph(planted))) != []
    # a circle closed by a function-level import, or by one under TYPE_CHECKING, is a circle too
    for deferred in ("def f():\n    from specproof.cli.a import main\n",
                     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specproof.cli.a import main\n"):
        planted["specproof/cli/b.py"] = ast.parse(deferred)
        assert list(nx.simple_cycles(_module_graph(planted))) != [], deferred
