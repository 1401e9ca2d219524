"""The architecture: each rule has one reference and at most one array form; engines find a rule's array rule in the
registry, and a single-step rule reaches the array rules that lift it, and the exact dynamic programme, as an object
(its array step); no module outside the rule modules computes acceptance or takes RRS's residual step, and none picks
a rule by its name or by an option string.

The layers: each package imports only from the ones below it, and names none above it in a string or a path; no
module reaches another module's private names.

The scans read the source (``ast``), so a new engine that slips back into a private copy of a rule, or into ``if
name == "tv-rrs"`` or ``plan.startswith("flow:")``, fails here; each test is shown to catch planted copies, the
residual step among them planted into Layer Verification's array rule and into the exact engine.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections import Counter
import re
from pathlib import Path

import exact.law
import exact.prove.prover
import exact.recursions.token_dp
import simulator
import simulator.usercode
import simulator.verifiers.batched.layer
import simulator.verifiers.registry
from simulator.drafting.arrays import ARRAY_SCHEMES
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
           "simulator/verifiers/spechub.py",
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
            planted = (plant or {}).get(name)
            out.append((name, _parsed(name) if planted is None else
                         ast.parse(path.read_text(encoding="utf-8") + planted)))
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
    # every rule the engines batch has its array rule; one function per family, the rule passed to it as an object.
    # A lossy-by-design rule is priced exactly; Monte Carlo runs its reference through the randomness interface, as
    # it does a rule claiming only schemes without an array drafting kernel (tv-hu: greedy-k)
    assert all(spec.array_rule is not None for spec in VERIFIERS.values() if not spec.lossy_by_design
               and (spec.is_control or set(spec.lossless_under) & set(ARRAY_SCHEMES)))


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


@functools.lru_cache(maxsize=None)
def _parsed(path: str) -> ast.Module:
    """The module at ``path`` (relative to the repository), parsed once for every test: the scans only read it."""
    return ast.parse((ROOT / path).read_text(encoding="utf-8"))


def _layer_modules() -> dict[str, ast.Module]:
    """Every module of the layers, parsed; a new dict each call (the shared trees are only read)."""
    return {rel: _parsed(rel) for package in LAYERS
            for rel in sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / package).rglob("*.py"))}


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


# ---- the layer rule on strings and paths ---------------------------------------------------------------------------
#: a reference in a string to a module or file: ``pkg.mod``, ``pkg.mod:function``, ``pkg:function``, ``pkg/sub/x.py``
DOTTED = re.compile(r"(?<![\w./-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?::[\w.]+)?")
BARE_REFERENCE = re.compile(r"(?<![\w./-])([A-Za-z_]\w*):[A-Za-z_][\w.]*")
FILE_PATH = re.compile(r"(?<![\w./-])([A-Za-z_]\w*(?:/[\w.-]+)+)")
#: calls whose string arguments are module names
IMPORTING = {"import_module", "__import__", "find_spec", "get"}
#: calls that build a path from their arguments
PATH_BUILDERS = {"Path", "PurePath", "PosixPath", "joinpath", "join"}


def _docstring_nodes(tree: ast.Module) -> set[int]:
    """The ids of the docstrings' constants: documentation, which may name any module (a command, a page)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _in_tree(parts: list[str]) -> bool:
    """Whether ``parts`` (a layer, then names under it) are a module or a file of the tree: a package, a module, or
    a file or folder by its path."""
    return _exists(tuple(parts))


@functools.lru_cache(maxsize=None)
def _exists(parts: tuple[str, ...]) -> bool:
    base = ROOT.joinpath(*parts)
    return base.exists() or base.with_suffix(".py").is_file()


def _module_references(text: str, above: tuple[str, ...]) -> list[str]:
    """The references in ``text`` to an existing module or file of a layer in ``above``, checked against the tree:
    ``exact.recursions.token_law``, ``exact.recursions.token_law:token_law``, ``exact:certify``,
    ``specproof/gate/mutants.py``. ``specproof.toml``, ``specproof.random`` or the command ``specproof certify``
    name nothing of the tree."""
    found = []
    for match in DOTTED.finditer(text):
        parts = match.group(1).split(".")
        if parts[0] in above and any(_in_tree(parts[:i]) for i in range(2, len(parts) + 1)):
            found.append(match.group(0))
    found += [m.group(0) for m in BARE_REFERENCE.finditer(text) if m.group(1) in above]
    found += [m.group(1) for m in FILE_PATH.finditer(text)
              if m.group(1).split("/")[0] in above and _in_tree(m.group(1).rstrip(".").split("/"))]
    return found


def _path_parts(node: ast.AST) -> list[ast.AST]:
    """The operands of a path built with ``/`` or by a path call (``Path(a, b)``, ``p.joinpath(a)``), in order."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return [*_path_parts(node.left), node.right]
    if isinstance(node, ast.Call) and _called(node) in PATH_BUILDERS:
        base = [node.func.value] if isinstance(node.func, ast.Attribute) else []
        return [*base, *node.args]
    return [node]


def _upward_path(node: ast.AST, above: tuple[str, ...]) -> bool:
    """Whether ``node`` builds a path into a layer of ``above``: a component naming the layer, then names of the
    tree under it (``Path(x) / "specproof" / "gate"``), or the layer from this file's place
    (``Path(__file__).parents[1] / "specproof"``). ``Path.home() / ".cache" / "specproof"`` names a folder of the
    user's, not the tree."""
    parts = _path_parts(node)
    names = [p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)]
    components = [c for name in names for c in name.split("/") if c]
    from_file = any(isinstance(n, ast.Name) and n.id == "__file__" or isinstance(n, ast.Attribute)
                    and n.attr == "__file__" for part in parts for n in ast.walk(part))
    for i, component in enumerate(components):
        if component in above and (from_file or (i + 1 < len(components) and _in_tree(components[i:]))):
            return True
    return False


def _upward_strings(modules: dict[str, ast.Module]) -> dict[str, list[str]]:
    """``path -> [line: what]`` for each string naming a module or file of a higher layer, outside docstrings: a
    reference (``"exact.recursions.token_law:token_law"``, ``"specproof/gate/mutants.py"``), a layer by its bare
    name where a module name goes (a list of layer names, an import's argument), or a path built into a higher
    layer."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    found: dict[str, list[str]] = {}
    for path, tree in modules.items():
        above = LAYERS[rank[path.split("/")[0]] + 1:]
        if not above:
            continue
        docs, hits = _docstring_nodes(tree), []
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                hits += [f"{node.lineno}: {ref}" for ref in _module_references(node.value, above)]
            elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) > 1 and all(
                    isinstance(e, ast.Constant) and e.value in LAYERS for e in node.elts):
                hits += [f"{node.lineno}: {e.value}" for e in node.elts if e.value in above]
            elif isinstance(node, ast.Call) and _called(node) in IMPORTING:
                hits += [f"{node.lineno}: {a.value}" for a in node.args if isinstance(a, ast.Constant)
                         and isinstance(a.value, str) and a.value.split(".")[0] in above]
            if isinstance(node, (ast.BinOp, ast.Call)) and _upward_path(node, above):
                hits.append(f"{node.lineno}: a path into {' or '.join(above)}")
        if hits:
            found[path] = sorted(set(hits), key=lambda hit: (int(hit.split(":")[0]), hit))
    return found


def _planted(plant: dict[str, str]) -> dict[str, ast.Module]:
    """The modules ``plant`` names (path -> code), each with its code appended; no file is written."""
    return {path: ast.parse((ROOT / path).read_text(encoding="utf-8") + code) for path, code in plant.items()}


def _with(plant: dict[str, str]) -> dict[str, ast.Module]:
    """The layers' modules, with ``plant`` (path -> code) appended to some; no file is written."""
    return {**_layer_modules(), **_planted(plant)}


UPWARD_STRINGS = '''
TOKEN_LAW = "exact.recursions.token_law:token_law"
ZOO = "see specproof/gate/mutants.py"
OWN_PACKAGES = ("simulator", "exact", "specproof")
CERTIFY = "exact:certify"
'''
UPWARD_PATHS = '''
SPECIMENS = Path(__file__).resolve().parents[1] / "specproof" / "gate"
MUTANTS = Path(ROOT) / "specproof" / "gate" / "mutants.py"
PROVER = Path(ROOT, "exact", "prove")
'''
NOT_UPWARD = '''
def f():
    """Computed by exact.recursions.token_law:token_law (docs/engines.md); see specproof/gate/mutants.py."""
    # the same: exact.recursions.token_law
    cache = Path.home() / ".cache" / "specproof"
    raise ValueError("run specproof certify --verifier tv-rrs, or write a specproof.toml", "specproof.random", cache)
'''


def test_no_string_or_path_names_a_module_of_a_layer_above():
    assert _upward_strings(_layer_modules()) == {}
    registry = _relative(simulator.verifiers.registry)
    flagged = _upward_strings(_planted({registry: UPWARD_STRINGS}))
    assert set(flagged) == {registry}
    assert [hit.split(": ", 1)[1] for hit in flagged[registry]] == [
        "exact.recursions.token_law:token_law", "specproof/gate/mutants.py", "exact", "specproof", "exact:certify"]
    usercode = _relative(simulator.usercode)
    flagged = _upward_strings(_planted({usercode: UPWARD_PATHS}))
    assert set(flagged) == {usercode} and len(flagged[usercode]) == 3, flagged
    assert all(hit.endswith(": a path into exact or specproof") for hit in flagged[usercode])
    # docstrings, comments, commands, config file names and folders of the user's name no module of the tree
    assert _upward_strings(_planted({usercode: NOT_UPWARD, registry: NOT_UPWARD})) == {}
    # the exact engine may not name the application either
    law = _relative(exact.law)
    assert set(_upward_strings(_planted({law: 'ZOO = "specproof.gate.zoo"\n'}))) == {law}


def test_the_exact_engine_supplies_every_recursion_the_registry_names():
    from exact.recursions.laws import LAWS
    from simulator.verifiers.registry import Recursion

    assert set(LAWS) == set(Recursion)
    named = {spec.exact_law.recursion for spec in VERIFIERS.values() if spec.exact_law is not None}
    assert named == set(Recursion)


# ---- private names stay in their module ----------------------------------------------------------------------------
def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_privates(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, variables, arguments and attributes it assigns
    (computed once per tree: the entry keeps the tree alive, so its id is not reused)."""
    if id(tree) in _DEFINED:
        return _DEFINED[id(tree)][1]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    _DEFINED[id(tree)] = (tree, {name for name in names if _private(name)})
    return _DEFINED[id(tree)][1]


_DEFINED: dict[int, tuple[ast.Module, set[str]]] = {}


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _bound_modules(path: str, tree: ast.Module) -> dict[str, bool]:
    """The names ``path`` binds by an import, each with whether it is one of the layers' own (``False``: a library
    such as torch, whose privates are its own business)."""
    package = path.rsplit("/", 1)[0].split("/")
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = alias.name.split(".")[0] in LAYERS
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else (node.module or "").split(".")
            for alias in node.names:
                bound[alias.asname or alias.name] = base[0] in LAYERS
    return bound


def _private_reach(modules: dict[str, ast.Module], only: set[str] | None = None) -> dict[str, list[str]]:
    """``path -> [line: what]`` for each private name of another of the layers' modules it reaches: ``from x import
    _name``, ``module._name`` of an imported module of the layers, or ``obj._name`` where only another module
    defines ``_name`` (``self.mode._resolve(...)`` calling another module's class's private method). ``only``:
    scan these modules alone (every module still tells which privates are whose)."""
    defined = {path: _defined_privates(tree) for path, tree in modules.items()}
    modules_defining = Counter(name for names in defined.values() for name in names)
    found: dict[str, list[str]] = {}
    for path, tree in modules.items():
        if only is not None and path not in only:
            continue
        elsewhere = {name for name in modules_defining if name not in defined[path]}
        bound, package, hits = _bound_modules(path, tree), path.rsplit("/", 1)[0].split("/"), []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else (node.module or "").split(".")
                source = "." * node.level + (node.module or "")
                hits += [f"{node.lineno}: from {source} import {a.name}" for a in node.names
                         if base[0] in LAYERS and _private(a.name)]
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                root = _root_name(node.value)
                own_module = bound.get(root) is True
                if own_module or (root not in bound and node.attr in elsewhere):
                    hits.append(f"{node.lineno}: {ast.unparse(node)}")
        if hits:
            found[path] = sorted(hits, key=lambda hit: (int(hit.split(":")[0]), hit))
    return found


PRIVATE_REACH = '''
from simulator.drafting.aded import _Node
import simulator.models.model_pairs as pairs


def reach(capture):
    pairs._context_key(())
    return capture._symbolic
'''


def test_no_module_reaches_another_modules_private_names():
    assert _private_reach(_layer_modules()) == {}
    triton = "simulator/kernels/triton_capture.py"
    flagged = _private_reach(_with({triton: PRIVATE_REACH}), {triton})
    assert set(flagged) == {triton}
    assert [hit.split(": ", 1)[1] for hit in flagged[triton]] == [
        "from simulator.drafting.aded import _Node", "pairs._context_key", "capture._symbolic"], flagged
    # a library's private (torch.jit._state), and a private of this module's own class, are not another module's
    assert _private_reach(_with({triton: "\nimport torch\nx = torch.jit._state._enabled\n"}), {triton}) == {}
    # across the other layers too: the prover calling the proof's private helper
    prover = _relative(exact.prove.prover)
    assert set(_private_reach(_with({prover: "\nfrom .proof import _signs_json\n"}), {prover})) == {prover}


def test_the_exact_engine_is_organised_by_role():
    top = [p.name for p in (ROOT / "exact").glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= 10, sorted(top)
    assert {p.name for p in (ROOT / "exact").iterdir() if p.is_dir() and (p / "__init__.py").exists()} == {
        "recursions", "prove"}


def test_the_core_is_grouped():
    """``simulator/`` keeps at most 14 modules at its top: drafting and the model set-up are packages, and so are
    the two jobs of torch: the capture of kernels (``kernels``) and real causal-LM pairs (``real``)."""
    top = [p.name for p in (ROOT / "simulator").glob("*.py") if p.name != "__init__.py"]
    assert len(top) <= 14, sorted(top)
    packages = {p.name for p in (ROOT / "simulator").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert {"drafting", "models", "verifiers", "montecarlo", "kernels", "real"} <= packages
    assert "torch_path" not in packages
    kernels = {p.stem for p in (ROOT / "simulator" / "kernels").glob("*.py")}
    assert {"kernel", "loading", "adapters", "conventions", "capture", "triton_capture", "triton_compat"} <= kernels
    real = {p.stem for p in (ROOT / "simulator" / "real").glob("*.py")}
    assert {"causal_lm", "kv_cache", "spec_bench", "crosscheck", "draft_training", "trained_draft", "fetch"} <= real
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
