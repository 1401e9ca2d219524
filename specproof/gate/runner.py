"""The regression gate (:func:`run_gate`; docs/gate.md): exact certificates of every verifier, plugin, kernel or
generation loop a config names, checked against expected verdicts and committed acceptance baselines."""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable, Iterator

from specproof.gate.battery import baseline_key, battery, build, instance_key, instances, merged
from exact.certificate import certify
from specproof.gate.hunt import hunt
from specproof.gate.isolated import Stopped, Task, run_isolated
from specproof.gate.loop_battery import (certify_loop_instance, loop_baseline_key, loop_battery, loop_instance_key,
                                         loop_instances, loop_result, loop_subject)
from exact.reproducer import capture
from specproof.gate.shrink import shrink
from exact.subject import Subject, subject

from simulator.errors import InvalidParameterError, OutputError, SpecproofError, TimeLimitError
from simulator.jsonfile import check_output_dir, read_json, read_text, write_json
from simulator.loops.builtin import plain_sampling
from simulator.loops.sampling import Sampling
from simulator.usercode import require
from simulator.verifiers.knobs import decimal
from simulator.verifiers.registry import check_arithmetic_for

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXPECT = ("lossless", "lossy")
GATE_DEFAULTS: dict[str, object] = {"baselines": "specproof-baselines.json", "state": ".specproof-gate",
                                    "hunt_seconds": 5.0, "shrink_seconds": 10.0, "check_seconds": 600.0,
                                    "tolerance": 1e-9,
                                    "pythonpath": []}
BASELINES_FIELD = "config.gate.baselines"
STATE_FIELD = "config.gate.state"
CHECK_SECONDS_FIELD = "config.gate.check_seconds"


#: what a loop check takes beside ``name``, ``expect`` and ``battery`` (docs/gate.md, "Loop checks")
LOOP_CHECK_KEYS = ("loop", "sampling")


@dataclass(frozen=True)
class Check:
    name: str
    description: dict  # the subject, as in a reproducer; a loop's: {"loop": ..., "sampling": {...}}
    expect: str | None  # None: a check with only a TVD budget
    battery: dict  # a loop check's: specproof.gate.loop_battery.loop_battery's
    tvd_budget: Fraction | None = None  # the TVD every instance must stay within (docs/gate.md, "TVD budgets")

    @property
    def loop(self) -> bool:
        """Whether the check names a whole generation loop (certified against plain sampling, not hunted)."""
        return "loop" in self.description


@dataclass(frozen=True)
class Config:
    path: Path
    gate: dict
    checks: tuple[Check, ...]

    def resolve(self, key: str) -> Path:
        """A gate path, relative to the config file."""
        return (self.path.parent / str(self.gate[key])).resolve()

    def search_path(self) -> list[str]:
        """Where the config's module names are looked up, in order: its ``pythonpath`` folders (relative to the
        config file), the working directory, the config's folder and its project's root — the nearest folder at
        or above the config's that holds a ``pyproject.toml``, as pytest finds its rootdir. So a config that names
        ``examples.plugin_verifier:my_tv`` finds it from any working directory."""
        folder = self.path.resolve().parent
        root = next((d for d in (folder, *folder.parents) if (d / "pyproject.toml").is_file()), None)
        found = [str((folder / entry).resolve()) for entry in self.gate.get("pythonpath", [])]
        found += [os.getcwd(), str(folder)] + ([str(root)] if root is not None else [])
        return list(dict.fromkeys(found))

    @contextmanager
    def import_path(self) -> Iterator[None]:
        """:meth:`search_path` in front of ``sys.path`` for the block, then taken out again; worker processes
        started in the block inherit it."""
        added = [entry for entry in self.search_path() if entry not in sys.path]
        sys.path[:0] = added
        try:
            yield
        finally:
            for entry in added:
                if entry in sys.path:
                    sys.path.remove(entry)


def load_config(path: str | Path) -> Config:
    """Read and validate ``specproof.toml``; every problem is a typed error naming the field
    (``config.check[2].expect``, say), raised before anything runs. Kernel checks on a machine without torch are
    refused together, each named, with the extra that installs torch."""
    path = Path(path)
    try:
        data = tomllib.loads(read_text(path, "config"))
    except tomllib.TOMLDecodeError as err:
        raise InvalidParameterError("config", f"{path} is not TOML: {err}") from None
    except RecursionError:
        raise InvalidParameterError("config", f"{path} nests arrays or tables too deeply to read") from None
    unknown = set(data) - {"gate", "battery", "loop_battery", "check"}
    if unknown:
        raise InvalidParameterError(f"config.{sorted(unknown)[0]}",
                                    "unknown table (expected gate, battery, loop_battery, check)")
    gate = merged(GATE_DEFAULTS, data.get("gate", {}), "config.gate")
    for key in ("hunt_seconds", "shrink_seconds", "check_seconds", "tolerance"):
        _number(gate[key], f"config.gate.{key}")
    for key in ("baselines", "state"):
        if not isinstance(gate[key], str) or not gate[key]:
            raise InvalidParameterError(f"config.gate.{key}", f"must be a path (a string), got {gate[key]!r}")
    _pythonpath(gate["pythonpath"], path.parent)
    shared = battery(data.get("battery", {}), "config.battery")
    loops = loop_battery(data.get("loop_battery", {}), "config.loop_battery", folder=path.parent)
    raw = data.get("check")
    if not isinstance(raw, list) or not raw:
        raise InvalidParameterError("config.check", "missing: add at least one [[check]] table")
    _require_torch(raw)
    checks, names = [], set()
    with Config(path, gate, ()).import_path():
        for i, entry in enumerate(raw):
            check = _check(entry, shared, loops, f"config.check[{i}]", path.parent)
            if check.name in names:
                raise InvalidParameterError(f"config.check[{i}].name",
                                            f"{check.name!r} is used twice: name the checks")
            names.add(check.name)
            checks.append(check)
    return Config(path, gate, tuple(checks))


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidParameterError(where, f"must be a finite number ≥ 0, got {value!r}")
    return float(value)


def _pythonpath(value: object, folder: Path) -> None:
    """``[gate] pythonpath``: folders (relative to the config file) that must exist."""
    if not isinstance(value, list) or not all(isinstance(entry, str) for entry in value):
        raise InvalidParameterError("config.gate.pythonpath", f"must be a list of folders, got {value!r}")
    for i, entry in enumerate(value):
        if not (folder / entry).is_dir():
            raise InvalidParameterError(f"config.gate.pythonpath[{i}]", f"no folder {folder / entry}")


def _require_torch(raw: list) -> None:
    """Refuse every kernel and loop check at once when torch is not installed, before any module is imported."""
    needing = [(f"config.check[{i}]", kind, entry.get("name", entry[kind])) for i, entry in enumerate(raw)
               if isinstance(entry, dict) for kind in ("kernel", "loop") if kind in entry]
    if needing:
        listed = ", ".join(f"{where} ({'loop ' * (kind == 'loop')}{name!r})" for where, kind, name in needing)
        require("torch", f"the torch check{'s' * (len(needing) > 1)} {listed}",
                f"{needing[0][0]}.{needing[0][1]}")


def _check(entry: object, shared: dict, loops: dict, where: str, folder: Path) -> Check:
    """One ``[[check]]``: a verifier or kernel on ``shared`` (the ``[battery]``), or a loop on ``loops`` (the
    ``[loop_battery]``), each under the check's own ``battery`` keys."""
    if not isinstance(entry, dict):
        raise InvalidParameterError(where, "must be a table")
    entry = dict(entry)
    expect = entry.pop("expect", None)
    budget = _budget(entry.pop("tvd_budget", None), f"{where}.tvd_budget")
    if expect not in EXPECT and not (expect is None and budget is not None):
        raise InvalidParameterError(f"{where}.expect", f"must be one of {EXPECT}, got {expect!r} (or omitted "
                                                       "beside a tvd_budget)")
    name = entry.pop("name", None)
    try:
        if "loop" in entry:
            description, own, what = _loop_check(entry, loops, where, folder)
        else:
            description, own, what = _rule_check(entry, shared, expect, where)
    except SpecproofError as err:  # named by its check: config.check[3].verifier
        if err.field.startswith(where):
            raise
        raise InvalidParameterError(f"{where}.{err.field}", err.message) from None
    if name is None:
        name = what.name + (f" ({entry['adapter']})" if "adapter" in entry else "")
    if not isinstance(name, str) or not name:
        raise InvalidParameterError(f"{where}.name", "must be a non-empty string")
    return Check(name, description, expect, own, budget)


def _budget(value: object, where: str) -> Fraction | None:
    """A check's ``tvd_budget``: a number in [0, 1], held as the exact rational its decimal says (``None``: none)."""
    if value is None:
        return None
    try:
        budget = decimal(value)
    except ValueError as err:
        raise InvalidParameterError(where, str(err)) from None
    if not 0 <= budget <= 1:
        raise InvalidParameterError(where, f"must be in [0, 1], got {value!r}")
    return budget


def _rule_check(entry: dict, shared: dict, expect: str, where: str) -> tuple[dict, dict, Subject]:
    """A verifier's or kernel's description, battery and subject (imported now: a bad name is a config error)."""
    if "sampling" in entry:
        raise InvalidParameterError(f"{where}.sampling", "applies to a loop check (loop = NAME or module:function) "
                                                         "only")
    own = battery(entry.pop("battery", {}), f"{where}.battery", shared)
    what = subject(entry, where)
    check_arithmetic_for(what.name, own["arithmetic"])
    if expect == "lossless":  # a claim is checked under exactly the schemes claimed
        for scheme in own["drafting"]:
            what.require_claimed(scheme, f"{where}.battery.drafting")
    return entry, own, what


def _loop_check(entry: dict, loops: dict, where: str, folder: Path) -> tuple[dict, dict, Subject]:
    """A loop's description (``{"loop": ..., "sampling": {...}}``, the parameters that are on), battery and
    subject (imported now). Only :data:`LOOP_CHECK_KEYS` and ``battery``: a verifier or kernel key is refused."""
    other = sorted(set(entry) - {*LOOP_CHECK_KEYS, "battery"})
    if other:
        raise InvalidParameterError(f"{where}.{other[0]}", "a loop check takes loop, sampling, battery, name and "
                                                           "expect: a verifier, kernel or their keys belong to "
                                                           "another check")
    if not isinstance(entry["loop"], str) or not entry["loop"]:
        raise InvalidParameterError(f"{where}.loop", "must be a name (transformers-assisted, "
                                                     f"transformers-prompt-lookup, plain) or module:function, got "
                                                     f"{entry['loop']!r}")
    sampling = Sampling.from_dict(entry.get("sampling"), f"{where}.sampling").as_dict()
    own = loop_battery(entry.get("battery", {}), f"{where}.battery", loops, folder)
    seeded = [m for m in own["models"] if m != "prefix-table"]
    if seeded:
        require("transformers", f"the loop check {where} on {seeded[0]}", f"{where}.battery.models")
    description = {"loop": entry["loop"], "sampling": sampling}
    return description, own, loop_subject(description, own["depth"])


def run_instance(task: tuple[dict, dict, dict]) -> dict:
    """Certify one instance (a worker's job): the verdict, TVD and ``E[τ]`` as JSON (a loop's: its TVD, worst
    continuation and ``E[tokens per target pass]``, :func:`specproof.gate.loop_battery.loop_result`); a typed error
    (a verifier that raised, a limit) as ``{"error": {"field": ..., "message": ...}}``, so that it stays this
    instance's."""
    description, b, inst = task
    try:
        if "loop" in description:
            return loop_result(certify_loop_instance(description, b, inst))
        what = subject(description)
        model, drafter = build(inst, b)
        cert = certify(model, drafter, what.fn, b["arithmetic"])
    except SpecproofError as err:
        return {"error": {"field": err.field, "message": err.message}}
    js = cert.to_json()
    return {"lossless": cert.lossless, "tvd": js["tvd"], "off_support": js["off_support"],
            "expected_accepted": js["expected_accepted"], "arithmetic": cert.arithmetic}


# ---- state and baselines -----------------------------------------------------------------------------------------
def fingerprint(check: Check, what: Subject, inst: dict | str) -> str:
    """What a kept result depends on: the check's description, the instance, the arithmetic, specproof's version
    and the bytes of the subject's source file; for a loop also :func:`_loop_inputs`."""
    source = _source(getattr(what.fn, "fn", None) or what.fn)
    if check.loop:
        source += _loop_inputs(inst)
    text = json.dumps([check.description, check.battery, inst, _version()], sort_keys=True, default=str)
    return hashlib.sha256(text.encode() + hashlib.sha256(source).digest()).hexdigest()[:32]


def _source(fn: object) -> bytes:
    """The bytes of the file that defines ``fn`` (none found: empty)."""
    try:
        return Path(inspect.getsourcefile(fn) or "").read_bytes()  # type: ignore[arg-type]
    except (TypeError, OSError):
        return b""


def _loop_inputs(inst: dict | str) -> bytes:
    """What a loop's result depends on beyond its check and its source: the reference's source (plain sampling and
    its processing), the versions of torch and transformers (the shipped loops are transformers' code, the tiny
    Llamas' weights torch's draws) and the bytes of the instance's table."""
    versions = json.dumps([_version(name) for name in ("torch", "transformers")]).encode()
    table = inst.get("table") if isinstance(inst, dict) else None
    try:
        rows = Path(table).read_bytes() if table else b""
    except OSError:
        rows = b""  # a table gone since the config loaded: its instance errs when certified
    return _source(plain_sampling) + _source(Sampling) + versions + rows


def _version(package: str = "specproof") -> str:
    try:
        return version(package)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "source"


def _stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


class State:
    """Finished results, one JSON file each under ``folder`` (the gate's resume store).

    The folder is made (or refused, :class:`OutputError` on ``config.gate.state``) before anything is certified.
    A result that cannot be kept later (a full disk) is reported once through ``warn`` and the run goes on: the
    store only saves a rerun time, so losing it must not lose the verdict."""

    def __init__(self, folder: Path, fresh: bool = False, warn: Callable[[str], None] = _stderr) -> None:
        self.folder = folder
        self.fresh = fresh
        self.warn = warn
        self.failed = False

    def open(self) -> State:
        check_output_dir(self.folder, STATE_FIELD)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OutputError(STATE_FIELD, f"cannot make the folder {self.folder}: {err.strerror or err}") from None
        return self

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def load(self, key: str) -> dict | None:
        path = self._path(key)
        if self.fresh or not path.exists():
            return None
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            return None  # a file cut off mid-write, or not text: certify again
        return kept if isinstance(kept, dict) and "error" not in kept else None

    def save(self, key: str, result: dict) -> None:
        path = self._path(key)
        tmp = path.with_suffix(".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(result))
            tmp.replace(path)  # atomic: an interrupted write leaves no half file
        except OSError as err:
            self.lost(f"cannot keep results in {self.folder}: {err.strerror or err} (a rerun certifies them again)")

    def lost(self, message: str) -> None:
        """Report a write under the state folder that failed (the first one only)."""
        if not self.failed:
            self.failed = True
            self.warn(f"{STATE_FIELD}: {message}")


def acceptance(value: object, where: str) -> Fraction:
    """A baseline ``E[τ]``: ``"n/d"`` or a finite number; anything else is an error naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidParameterError(BASELINES_FIELD, f"{where}: expected \"n/d\" or a number, got {value!r}")
    try:
        return Fraction(value) if isinstance(value, (int, float)) else Fraction(value.strip())
    except (ValueError, ZeroDivisionError, OverflowError):
        raise InvalidParameterError(BASELINES_FIELD, f"{where}: {value!r} is not a finite number") from None


def load_baselines(path: Path) -> dict[str, dict[str, str | float | dict]]:
    """The baselines file (none when it does not exist), checked whole before anything is certified: a JSON
    object of check name → object of instance → ``E[τ]`` (:func:`acceptance`), or for a check with a TVD budget
    an object ``{"expected_accepted": E[τ], "tvd": TVD}``."""
    if not path.exists():
        return {}
    data = read_json(path, BASELINES_FIELD)
    if not isinstance(data, dict):
        raise InvalidParameterError(BASELINES_FIELD, f"{path}: expected an object of checks, got "
                                                     f"{type(data).__name__}")
    for check, values in data.items():
        if not isinstance(values, dict):
            raise InvalidParameterError(BASELINES_FIELD, f"{path}: {check!r}: expected an object of instances, "
                                                         f"got {type(values).__name__}")
        for key, value in values.items():
            for figure in (value.values() if isinstance(value, dict) and set(value) <= set(BASELINE_FIGURES)
                           else [value]):
                acceptance(figure, f"{path}: {check!r}: {key!r}")
    return data


#: what a baseline records of a check with a TVD budget (of any other: ``E[τ]`` alone)
BASELINE_FIGURES = ("expected_accepted", "tvd")


def same_acceptance(current: str | float, baseline: str | float, exact: bool, tolerance: float) -> bool:
    if exact:
        return Fraction(str(current)) == Fraction(str(baseline))
    return abs(float(Fraction(str(current))) - float(Fraction(str(baseline)))) <= tolerance


# ---- the run -----------------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One instance of one check, with its result and what the gate concluded."""

    key: str  # the instance's name (:func:`specproof.gate.battery.instance_key`)
    result: dict
    baseline: str | float | dict | None = None
    moved: tuple[str, object, object] | None = None  # what moved from the baseline: (figure, now, baseline)
    baseline_key: str = ""  # its key in the baselines file (:func:`specproof.gate.battery.baseline_key`)

    @property
    def error(self) -> str | None:
        """``field: message`` of the typed error that stopped this instance's certificate (``None``: certified)."""
        err = self.result.get("error")
        return None if err is None else f"{err['field']}: {err['message']}"

    @property
    def lossy(self) -> bool:
        return self.error is None and not self.result["lossless"]

    @property
    def figure(self) -> str | float | None:
        """The figure compared with the baseline: ``E[τ]``, or a loop's ``E[tokens per target pass]`` (``None``:
        none, a loop that never called its target)."""
        if "expected_accepted" in self.result:
            return self.result["expected_accepted"]
        return self.result.get("expected_tokens_per_pass")

    @property
    def figure_name(self) -> str:
        return "E[tokens per target pass]" if "expected_tokens_per_pass" in self.result else "E[τ]"

    def figures(self, budgeted: bool) -> str | float | dict | None:
        """What the baselines file keeps of this instance: its :attr:`figure`, or with a TVD budget ``E[τ]`` and the
        TVD together."""
        if not budgeted or self.figure is None:
            return self.figure
        return {"expected_accepted": self.figure, "tvd": self.result["tvd"]}

    def moved_from(self, baseline: str | float | dict, exact: bool,
                   tolerance: float) -> tuple[str, object, object] | None:
        """What moved from ``baseline`` (``E[τ]``, or with a budget ``E[τ]`` and the TVD): ``(figure name, now,
        baseline)``, or ``None``."""
        figures = baseline if isinstance(baseline, dict) else {"expected_accepted": baseline}
        for key, old in figures.items():
            now = self.figure if key == "expected_accepted" else self.result.get(key)
            if now is not None and not same_acceptance(now, old, exact, tolerance):
                return self.figure_name if key == "expected_accepted" else "TVD", now, old
        return None

    @property
    def worst(self) -> str | None:
        """A loop's continuation that differs most, with its two probabilities (``None``: none recorded)."""
        ce = self.result.get("counterexample")
        if ce is None:
            return None
        return (f"continuation {ce['sequence']} has probability {ce['loop_prob']:.6g} under the loop, "
                f"{ce['reference_prob']:.6g} under plain sampling")

    def shown(self, key: str) -> str:
        """A number of the result as reported (``tvd``, ``off_support``): a rule's exact ``n/d``, a loop's float to
        6 digits."""
        value = self.result[key]
        return f"{value:.6g}" if isinstance(value, float) else str(value)


@dataclass
class CheckOutcome:
    check: Check
    subject: Subject
    cases: list[Case] = field(default_factory=list)
    hunt: dict | None = None
    reproducer: str | None = None
    error: str | None = None  # a typed error outside the instances (the hunt)
    hunt_error: tuple[str, str] | None = None  # the same, as (field, message)

    @property
    def lossy_cases(self) -> list[Case]:
        return [c for c in self.cases if c.lossy]

    @property
    def over_budget(self) -> list[Case]:
        """The instances whose TVD exceeds the check's ``tvd_budget`` (none without one)."""
        budget = self.check.tvd_budget
        return [] if budget is None else [c for c in self.cases if c.error is None and
                                          Fraction(str(c.result["tvd"])) > budget]

    @property
    def expected(self) -> str:
        """What the check expects, in words: ``lossless``, ``lossy``, ``TVD ≤ 1/20``, or both."""
        budget = None if self.check.tvd_budget is None else f"TVD ≤ {self.check.tvd_budget}"
        return ", ".join(x for x in (self.check.expect, budget) if x)

    @property
    def errors(self) -> list[str]:
        """Every typed error of this check: ``INSTANCE: field: message`` per instance, then the hunt's."""
        return [f"{c.key}: {c.error}" for c in self.cases if c.error] + ([self.error] if self.error else [])

    @property
    def failures(self) -> list[str]:
        """Why this check is a regression (empty: it holds, or it has only errors)."""
        out = []
        if self.check.expect == "lossless" and self.lossy_cases:
            first = self.lossy_cases[0]
            out.append(f"LOSSY on {len(self.lossy_cases)} of {len(self.cases)} instances "
                       f"(first: {first.key}, TVD {first.shown('tvd')}" + (f"; {first.worst}" if first.worst else "")
                       + ")")
        if self.check.expect == "lossy" and not self.lossy_cases and not self.errors:
            out.append(f"expected LOSSY (a control), certified LOSSLESS on all {len(self.cases)} instances")
        over = self.over_budget
        if over:
            out.append(f"OVER BUDGET on {len(over)} of {len(self.cases)} instances (first: {over[0].key}, TVD "
                       f"{over[0].shown('tvd')} > {self.check.tvd_budget})")
        moved = [c for c in self.cases if c.moved]
        if moved:
            name, now, old = moved[0].moved
            out.append(f"{name} moved on {len(moved)} instance(s) (first: {moved[0].key}: {now} vs baseline {old})")
        if self.hunt_failure:
            out.append(self.hunt_failure)
        return out

    @property
    def hunt_failure(self) -> str | None:
        """Why the hunt fails this check: it found a loss."""
        if self.hunt is None or not self.hunt["lossy"]:
            return None
        return f"the hunt found a loss after {self.hunt['pairs']} pairs"


def verdict(outcomes: list[CheckOutcome]) -> int:
    """The gate's exit code: 1 when any check regressed (its errors listed beside it), else 2 when any check
    erred (no verdict for it), else 0."""
    if any(o.failures for o in outcomes):
        return 1
    return 2 if any(o.errors for o in outcomes) else 0


def run_gate(config: Config, jobs: int = 1, fresh: bool = False, tick: Callable[[int], None] = lambda n: None,
             total: Callable[[int], None] = lambda n: None, record_errors: bool = False,
             warn: Callable[[str], None] = _stderr, check_seconds: float | None = None) -> list[CheckOutcome]:
    """Certify every instance of every check, then hunt and shrink: each check in a process of its own, ``jobs``
    at a time, under the time limit ``check_seconds`` (``None``: the config's ``check_seconds``; 0: none), so a
    check whose user code loops or kills its process is an error of that check and the others still run
    (:mod:`specproof.gate.isolated`).

    The state folder and the baselines file are checked before anything is certified. A typed error of one
    instance or hunt (a verifier that raised, a limit) is kept on its check's outcome when ``record_errors``
    (the gate command: every check still runs and is reported), else raised.
    ``warn`` hears of results that could not be kept (a full disk).

    A check passes when its expectation (``lossless``, with a bounded :func:`specproof.gate.hunt.hunt` finding no
    loss, or ``lossy``, a negative control) holds on every instance and each instance's exact ``E[τ]`` matches its
    baseline. Finished instances are kept in a state folder while their :func:`fingerprint` holds, so a rerun
    certifies only what is missing. Config problems are typed errors raised before anything is certified;
    :func:`verdict` gives the exit code.
    """
    with config.import_path():
        baselines = load_baselines(config.resolve("baselines"))
        state = State(config.resolve("state"), fresh, warn).open()
        outcomes, todo = [], []
        for check in config.checks:
            what = loop_subject(check.description, check.battery["depth"]) if check.loop \
                else subject(check.description)
            outcome = CheckOutcome(check, what)
            for inst, name, base_key in _instances(check, what):
                key = fingerprint(check, what, inst)
                outcome.cases.append(Case(name, state.load(key) or {}, baseline_key=base_key))
                if not outcome.cases[-1].result:
                    todo.append((outcome.cases[-1], key, (check.description, check.battery, inst)))
            outcomes.append(outcome)
        total(len(todo))
        tick(sum(len(o.cases) for o in outcomes) - len(todo))
        limit = float(config.gate["check_seconds"] if check_seconds is None else check_seconds) or None
        tasks = [Task(_check_task(outcome, [t for t in todo if any(t[0] is c for c in outcome.cases)], config,
                                  state), _check_messages(outcome, tick, warn)) for outcome in outcomes]
        for i, (outcome, ran) in enumerate(zip(outcomes, run_isolated(tasks, jobs, limit))):
            _checked(outcome, ran, i, check_seconds is not None)
        if not record_errors:
            for outcome in outcomes:
                for case in outcome.cases:
                    if case.error is not None:
                        raise SpecproofError(**case.result["error"])
                if outcome.hunt_error is not None:
                    raise SpecproofError(*outcome.hunt_error)
        tolerance = float(config.gate["tolerance"])
        for outcome in outcomes:
            exact = "verifier" in outcome.check.description and outcome.check.battery["arithmetic"] == "fraction"
            for case in outcome.cases:
                case.baseline = baselines.get(outcome.check.name, {}).get(case.baseline_key)
                if case.baseline is not None and case.error is None and case.figure is not None:
                    case.moved = case.moved_from(case.baseline, exact, tolerance)
    return outcomes


def _instances(check: Check, what: Subject) -> list[tuple[dict, str, str]]:
    """``(instance, its name, its baselines key)`` for every instance of the check's battery."""
    if check.loop:
        sampling = check.description["sampling"]
        return [(inst, loop_instance_key(inst), loop_baseline_key(inst, check.battery, sampling))
                for inst in loop_instances(check.battery)]
    return [(inst, instance_key(inst), baseline_key(inst, check.battery))
            for inst in instances(check.battery, what)]


def _check_task(outcome: CheckOutcome, todo: list, config: Config, state: State):
    """What a check's process does (:func:`specproof.gate.isolated.run_isolated`): certify its instances not
    kept (``todo``), keeping each, then hunt and shrink; each instance's result and the state's warnings are
    relayed as they come, the hunt and reproducer returned."""
    def run(send: Callable[[str, object], None]) -> dict:
        state.warn = lambda message: send("warn", message)
        for case, key, task in todo:
            case.result = run_instance(task)
            if "error" not in case.result:  # an error is not kept: the next run tries again
                state.save(key, case.result)
            send("case", (next(i for i, c in enumerate(outcome.cases) if c is case), case.result))
        try:
            _hunt(outcome, config, state)
        except SpecproofError as err:
            return {"hunt": None, "hunt_error": (err.field, err.message), "reproducer": None}
        _reproduce(outcome, config, state)
        return {"hunt": outcome.hunt, "hunt_error": None, "reproducer": outcome.reproducer}
    return run


def _check_messages(outcome: CheckOutcome, tick: Callable[[int], None], warn: Callable[[str], None]):
    """This process's side of :func:`_check_task`: each instance's result onto its case, the warnings to
    ``warn``."""
    def on_message(kind: str, value) -> None:
        if kind == "case":
            index, result = value
            outcome.cases[index].result = result
            tick(1)
        elif kind == "warn":
            warn(value)
    return on_message


def _checked(outcome: CheckOutcome, ran: dict | Stopped, index: int, from_option: bool) -> None:
    """A check's process's result onto its outcome; a process stopped at the check's time limit, or ended
    without a result, is an error of every instance it did not finish (or of the hunt, when it finished
    them)."""
    if not isinstance(ran, Stopped):
        outcome.hunt, outcome.reproducer = ran["hunt"], ran["reproducer"]
        outcome.hunt_error = ran["hunt_error"]
    else:
        field = ("check_timeout" if from_option else CHECK_SECONDS_FIELD) if ran.ended is None \
            else f"config.check[{index}]"
        message = ran.describe("the check") + (
            "; raise --check-timeout or [gate] check_seconds (0: no limit)" if ran.ended is None else "")
        unfinished = [case for case in outcome.cases if not case.result]
        for case in unfinished:
            case.result = {"error": {"field": field, "message": f"not certified: {message}"}}
        if not unfinished:
            outcome.hunt_error = (field, message)
    if outcome.hunt_error is not None:
        outcome.error = "hunt: {}: {}".format(*outcome.hunt_error)


def _hunt(outcome: CheckOutcome, config: Config, state: State) -> None:
    """A bounded hunt for a check expected lossless that no instance failed or erred on (kept in the state like
    an instance). A hunt that certified no pair in its time shows nothing: a :class:`TimeLimitError`, not
    "holds" (and not kept, so a rerun hunts again). A loop is not hunted: the hunt draws rows for a verifier, and
    a loop computes its own rows from its models."""
    seconds = float(config.gate["hunt_seconds"])
    if outcome.check.expect != "lossless" or seconds <= 0 or outcome.lossy_cases or outcome.errors \
            or outcome.check.loop:
        return
    key = fingerprint(outcome.check, outcome.subject, f"hunt {seconds}")
    kept = state.load(key)
    if kept is None:
        found = hunt(outcome.subject, seconds, arithmetic=outcome.check.battery["arithmetic"],
                     shrink_time=float(config.gate["shrink_seconds"]))
        if not found.pairs:
            raise TimeLimitError("config.gate.hunt_seconds", f"the hunt certified no model pair within {seconds:g} s, "
                                                             "so it gives no verdict: raise hunt_seconds (0: no hunt)")
        kept = {"lossy": found.found is not None, "pairs": found.pairs, "coverage": found.coverage(),
                "shrunk": found.shrunk.case.to_json(found.shrunk.certificate) if found.shrunk else None}
        state.save(key, kept)
    outcome.hunt = kept


def _reproduce(outcome: CheckOutcome, config: Config, state: State) -> None:
    """For a lossless check found lossy: the shrunk reproducer, written beside the state (a write that fails is
    reported through the state's warning; the failure stands without a reproducer). A loop has none (a reproducer
    holds one draft tree's rows): its failure names the continuation that differs most."""
    if outcome.check.expect != "lossless" or not outcome.failures or outcome.check.loop:
        return
    folder = config.resolve("state") / "cases"
    path = folder / (re.sub(r"[^A-Za-z0-9_.-]+", "_", outcome.check.name) + ".json")
    try:
        if outcome.lossy_cases:
            inst = next(i for i in instances(outcome.check.battery, outcome.subject)
                        if instance_key(i) == outcome.lossy_cases[0].key)
            model, drafter = build(inst, outcome.check.battery)
            try:
                case = capture(model, drafter, outcome.subject, outcome.check.battery["arithmetic"])
                found = shrink(case, float(config.gate["shrink_seconds"]), outcome.subject)
            except SpecproofError:  # ADED's drafts have no reproducer: the failure stands without one
                return
            found.case.write(path, found.certificate)
        elif outcome.hunt is not None and outcome.hunt.get("shrunk"):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, outcome.hunt["shrunk"], STATE_FIELD)
        else:
            return
    except OutputError as err:
        state.lost(err.message)
        return
    except OSError as err:
        state.lost(f"cannot write {path}: {err.strerror or err}")
        return
    outcome.reproducer = str(path)


def write_baselines(path: Path, outcomes: list[CheckOutcome]) -> Path:
    """This run's ``E[τ]`` (a loop's ``E[tokens per target pass]``) per check and instance; an instance that erred,
    or has no figure, keeps its old baseline, if any."""
    def kept(case: Case, budgeted: bool) -> str | float | dict | None:
        return case.figures(budgeted) if case.error is None and case.figure is not None else case.baseline

    write_json(path, {o.check.name: {c.baseline_key: kept(c, o.check.tvd_budget is not None) for c in o.cases
                                     if kept(c, o.check.tvd_budget is not None) is not None}
                      for o in outcomes}, BASELINES_FIELD)
    return path
