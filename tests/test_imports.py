"""Importing specproof changes nothing around it, and the module paths its documentation names import.

Importing a module of the three packages sets no environment variable (Triton's interpreter is asked for by the
kernel loader, docs/kernels.md); every ``simulator.…``, ``exact.…``, ``specproof.…`` or ``examples.…`` path, and
every ``from … import`` line, that ``docs/``, ``README.md`` and ``examples/`` name resolves to what they say.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from simulator.errors import MissingDependencyError

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("simulator", "exact", "specproof")
#: the packages whose paths the documentation names (the examples are imported from the repository's root)
NAMED = (*LAYERS, "examples")
#: a dotted path, optionally ``:attribute``; ``specproof.toml`` and the like are files, not modules
DOTTED = re.compile(r"(?<![\w./-])((?:%s)(?:\.\w+)+)(?::([\w.]+))?" % "|".join(NAMED))
FILE_SUFFIXES = {"toml", "json", "jsonl", "md", "py", "txt", "gguf", "yaml", "yml", "csv", "png", "svg"}
FROM_IMPORT = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+\(?([\w\s,]+?)\)?\s*(?:#.*)?$", re.M)
IMPORT = re.compile(r"^\s*import\s+([\w.]+)(?:\s+as\s+\w+)?\s*(?:#.*)?$", re.M)

#: imports every module of the packages named on the command line; prints what changed in ``os.environ``
IMPORT_ALL = r"""
import importlib, json, os, pkgutil, sys
before, skipped = dict(os.environ), []
for name in sys.argv[1:]:
    package = importlib.import_module(name)
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        try:
            importlib.import_module(module.name)
        except Exception as err:  # an optional dependency not installed here: named, not counted
            if type(err).__name__ != "MissingDependencyError" and not isinstance(err, ModuleNotFoundError):
                raise
            skipped.append(module.name)
after = dict(os.environ)
changed = {k: [before.get(k), after.get(k)] for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
print(json.dumps({"changed": changed, "skipped": skipped}))
"""


def _environment_change(packages: list[str], extra_path: Path | None = None) -> dict:
    """What importing every module of ``packages`` changes in ``os.environ``, in a fresh process whose environment
    has no ``TRITON_INTERPRET`` (this process's, set by tests/conftest.py, would hide one set at import)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, "-c", IMPORT_ALL, *packages], capture_output=True, text=True,
                            cwd=REPO, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.slow
def test_importing_every_module_leaves_the_environment_unchanged(tmp_path):
    found = _environment_change(list(LAYERS))
    assert found["changed"] == {}, found
    # the check sees a module that sets a variable at import
    (tmp_path / "sets_at_import").mkdir()
    (tmp_path / "sets_at_import" / "__init__.py").write_text("")
    (tmp_path / "sets_at_import" / "kernels.py").write_text(
        'import os\nos.environ.setdefault("TRITON_INTERPRET", "1")\n')
    assert _environment_change(["sets_at_import"], tmp_path)["changed"] == {"TRITON_INTERPRET": [None, "1"]}


# ---- the module paths the documentation names --------------------------------------------------------------------
def _documents() -> list[Path]:
    return sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md"),
                   *(p for p in (REPO / "examples").rglob("*") if p.is_file())])


def _python_imports(source: str) -> list[tuple[str, list[str]]]:
    """``(module, names)`` for each import of a Python file (``names`` empty for ``import module``)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def named_paths(text: str, python: bool = False) -> set[tuple[str, tuple[str, ...]]]:
    """Every ``(module path, attributes)`` ``text`` names in our packages: a dotted path (``exact.certify``, whose
    longest importable prefix is the module and the rest attributes), ``module:attribute``, ``from module import
    a, b`` and ``import module`` (from a Python file's syntax tree when ``python``, else line by line)."""
    found = set()
    for match in DOTTED.finditer(text):
        dotted, attribute = match.group(1), match.group(2)
        if dotted.rsplit(".", 1)[1] not in FILE_SUFFIXES:
            found.add((dotted, tuple(attribute.split(".")) if attribute else ()))
    imports = _python_imports(text) if python else (
        [(m.group(1), [n.strip() for n in m.group(2).split(",") if n.strip()]) for m in FROM_IMPORT.finditer(text)]
        + [(m.group(1), []) for m in IMPORT.finditer(text)])
    for module, names in imports:
        if module.split(".")[0] in NAMED:
            found |= {(module, (name.split()[0],)) for name in names} | {(module, ())}
    return found


def _optional_missing(err: BaseException) -> bool:
    """Whether ``err`` is an optional dependency this install lacks (torch, triton, transformers): skipped here,
    as the suite skips their tests."""
    if isinstance(err, MissingDependencyError):
        return True
    name = getattr(err, "name", None) or ""
    return (isinstance(err, ModuleNotFoundError) and name.split(".")[0] not in NAMED
            and importlib.util.find_spec(name.split(".")[0]) is None)


def resolve(dotted: str, attributes: tuple[str, ...]) -> str | None:
    """Why ``dotted`` (then ``attributes``) does not resolve, or ``None`` when it does: its longest importable
    prefix is imported and the rest looked up as attributes (a submodule imported when it is not one yet)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj: object = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name is not None and (name == err.name or name.startswith(err.name + ".")):
                continue  # not a module: a shorter prefix, the rest attributes
            return None if _optional_missing(err) else f"{name} fails to import: {err!r}"
        except Exception as err:  # noqa: BLE001 - any failure to import is the finding
            return None if _optional_missing(err) else f"{name} fails to import: {err!r}"
        for attribute in (*parts[i:], *attributes):
            if not hasattr(obj, attribute) and isinstance(obj, ModuleType):
                try:
                    importlib.import_module(f"{obj.__name__}.{attribute}")
                except ImportError:
                    pass
            if not hasattr(obj, attribute):
                return f"{name} has no {'.'.join((*parts[i:], *attributes))}"
            obj = getattr(obj, attribute)
        return None
    return f"no module {dotted}"


def test_every_module_path_the_documentation_names_imports():
    named = {(path.relative_to(REPO).as_posix(), dotted, attributes) for path in _documents()
             for dotted, attributes in named_paths(path.read_text(encoding="utf-8"), path.suffix == ".py")}
    assert len(named) > 50  # the scan reads what the pages say
    failures = sorted(f"{where}: {why}" for where, dotted, attributes in named
                      if (why := resolve(dotted, attributes)) is not None)
    assert failures == []


def test_the_scan_of_the_documentation_fails_on_a_path_that_moved():
    page = """
Capture with `simulator.capture` or `simulator.kernels.capture.Capture`; certify with
`specproof certify --kernel specproof.gate.torch_kernels:sps_chain`, configured by `examples/specproof.toml`.

```python
from simulator.kernels.kernel import Kernel, chain_nodes
from exact import certify
```
"""
    named = named_paths(page)
    assert ("specproof.gate.torch_kernels", ("sps_chain",)) in named and ("exact", ("certify",)) in named
    assert not any(dotted.startswith("specproof.toml") for dotted, _ in named)
    failures = {dotted + ":" + ".".join(attributes) for dotted, attributes in named
                if resolve(dotted, attributes) is not None}
    assert failures == {"simulator.capture:", "simulator.kernels.kernel:chain_nodes"}
