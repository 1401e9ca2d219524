"""The regression gate: a battery of exact certificates for every verifier, plugin or kernel a config names,
checked against expected verdicts and committed acceptance baselines (docs/gate.md).

A check passes when its expectation holds on every instance of its battery — ``lossless``: every instance
certifies LOSSLESS and a bounded :func:`exact.hunt.hunt` finds no loss; ``lossy`` (a negative control): at least
one instance is LOSSY — and when every instance's exact ``E[τ]`` equals its baseline (exactly for rules under
fractions; within ``tolerance`` for kernels, which compute in floats, and under float arithmetic). Finished
instances are kept in a state folder, so an interrupted gate loses nothing: a rerun certifies only what is
missing. A kept result is reused only while its fingerprint holds: the check's description, the instance, the
arithmetic, specproof's version and the bytes of the subject's source file.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from importlib.metadata import PackageNotFoundError, version
from multiprocessing import get_context
from pathlib import Path
from typing import Callable

from exact.battery import battery, build, instance_key, instances, merged
from exact.certificate import certify
from exact.hunt import hunt
from exact.reproducer import capture
from exact.shrink import shrink
from exact.subject import Subject, subject

from simulator.errors import InvalidParameterError, SpecproofError
from simulator.jsonfile import read_json, write_json
from simulator.verifiers.registry import check_arithmetic_for

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXPECT = ("lossless", "lossy")
GATE_DEFAULTS: dict[str, object] = {"baselines": "specproof-baselines.json", "state": ".specproof-gate",
                                    "hunt_seconds": 5.0, "shrink_seconds": 10.0, "tolerance": 1e-9}


@dataclass(frozen=True)
class Check:
    name: str
    description: dict  # the subject, as in a reproducer
    expect: str
    battery: dict


@dataclass(frozen=True)
class Config:
    path: Path
    gate: dict
    checks: tuple[Check, ...]

    def resolve(self, key: str) -> Path:
        """A gate path, relative to the config file."""
        return (self.path.parent / str(self.gate[key])).resolve()


def load_config(path: str | Path) -> Config:
    """Read and validate ``specproof.toml``; every problem is an :class:`InvalidParameterError` naming the field
    (``config.check[2].expect``, say)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as err:
        raise InvalidParameterError("config", f"cannot read {path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise InvalidParameterError("config", f"{path} is not TOML: {err}") from None
    unknown = set(data) - {"gate", "battery", "check"}
    if unknown:
        raise InvalidParameterError(f"config.{sorted(unknown)[0]}", "unknown table (expected gate, battery, check)")
    gate = merged(GATE_DEFAULTS, data.get("gate", {}), "config.gate")
    for key in ("hunt_seconds", "shrink_seconds", "tolerance"):
        _number(gate[key], f"config.gate.{key}")
    shared = battery(data.get("battery", {}), "config.battery")
    raw = data.get("check")
    if not isinstance(raw, list) or not raw:
        raise InvalidParameterError("config.check", "missing: add at least one [[check]] table")
    checks, names = [], set()
    for i, entry in enumerate(raw):
        check = _check(entry, shared, f"config.check[{i}]")
        if check.name in names:
            raise InvalidParameterError(f"config.check[{i}].name", f"{check.name!r} is used twice: name the checks")
        names.add(check.name)
        checks.append(check)
    return Config(path, gate, tuple(checks))


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InvalidParameterError(where, f"must be a number ≥ 0, got {value!r}")
    return float(value)


def _check(entry: object, shared: dict, where: str) -> Check:
    if not isinstance(entry, dict):
        raise InvalidParameterError(where, "must be a table")
    entry = dict(entry)
    expect = entry.pop("expect", None)
    if expect not in EXPECT:
        raise InvalidParameterError(f"{where}.expect", f"must be one of {EXPECT}, got {expect!r}")
    name = entry.pop("name", None)
    own = battery(entry.pop("battery", {}), f"{where}.battery", shared)
    what = subject(entry, where)  # imports the plugin or kernel now: a bad name is a config error
    check_arithmetic_for(what.name, own["arithmetic"])
    if name is None:
        name = what.name + (f" ({entry['adapter']})" if "adapter" in entry else "")
    if not isinstance(name, str) or not name:
        raise InvalidParameterError(f"{where}.name", "must be a non-empty string")
    return Check(name, entry, expect, own)


def run_instance(task: tuple[dict, dict, dict]) -> dict:
    """Certify one instance (a worker's job): the verdict, TVD and ``E[τ]`` as JSON."""
    description, b, inst = task
    what = subject(description)
    model, drafter = build(inst, b)
    cert = certify(model, drafter, what.fn, b["arithmetic"])
    js = cert.to_json()
    return {"lossless": cert.lossless, "tvd": js["tvd"], "off_support": js["off_support"],
            "expected_accepted": js["expected_accepted"], "arithmetic": cert.arithmetic}


# ---- state and baselines -----------------------------------------------------------------------------------------
def fingerprint(check: Check, what: Subject, inst: dict | str) -> str:
    """What a kept result depends on (module docstring)."""
    try:
        source = Path(inspect.getsourcefile(getattr(what.fn, "fn", None) or what.fn) or "").read_bytes()
    except (TypeError, OSError):
        source = b""
    text = json.dumps([check.description, check.battery, inst, _version()], sort_keys=True, default=str)
    return hashlib.sha256(text.encode() + hashlib.sha256(source).digest()).hexdigest()[:32]


def _version() -> str:
    try:
        return version("specproof")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "source"


class State:
    """Finished results, one JSON file each under ``folder`` (the gate's resume store)."""

    def __init__(self, folder: Path, fresh: bool = False) -> None:
        self.folder = folder
        self.fresh = fresh

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def load(self, key: str) -> dict | None:
        path = self._path(key)
        if self.fresh or not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None  # a file cut off mid-write: certify again

    def save(self, key: str, result: dict) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(path)  # atomic: an interrupted write leaves no half file


def same_acceptance(current: str | float, baseline: str | float, exact: bool, tolerance: float) -> bool:
    if exact:
        return Fraction(str(current)) == Fraction(str(baseline))
    return abs(float(Fraction(str(current))) - float(Fraction(str(baseline)))) <= tolerance


# ---- the run -----------------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One instance of one check, with its result and what the gate concluded."""

    key: str
    result: dict
    baseline: str | float | None = None
    moved: bool = False

    @property
    def lossy(self) -> bool:
        return not self.result["lossless"]


@dataclass
class CheckOutcome:
    check: Check
    subject: Subject
    cases: list[Case] = field(default_factory=list)
    hunt: dict | None = None
    reproducer: str | None = None

    @property
    def lossy_cases(self) -> list[Case]:
        return [c for c in self.cases if c.lossy]

    @property
    def failures(self) -> list[str]:
        """Why this check is a regression (empty: it holds)."""
        out = []
        if self.check.expect == "lossless" and self.lossy_cases:
            out.append(f"LOSSY on {len(self.lossy_cases)} of {len(self.cases)} instances "
                       f"(first: {self.lossy_cases[0].key}, TVD {self.lossy_cases[0].result['tvd']})")
        if self.check.expect == "lossy" and not self.lossy_cases:
            out.append(f"expected LOSSY (a control), certified LOSSLESS on all {len(self.cases)} instances")
        moved = [c for c in self.cases if c.moved]
        if moved:
            out.append(f"E[τ] moved on {len(moved)} instance(s) (first: {moved[0].key}: "
                       f"{moved[0].result['expected_accepted']} vs baseline {moved[0].baseline})")
        if self.hunt is not None and self.hunt["lossy"]:
            out.append(f"the hunt found a loss after {self.hunt['pairs']} pairs")
        return out


def run_gate(config: Config, jobs: int = 1, fresh: bool = False, tick: Callable[[int], None] = lambda n: None,
             total: Callable[[int], None] = lambda n: None) -> list[CheckOutcome]:
    """Certify every instance of every check (``jobs`` worker processes), then hunt and shrink in this one."""
    state = State(config.resolve("state"), fresh)
    baselines_path = config.resolve("baselines")
    baselines = read_json(baselines_path, "config.gate.baselines") if baselines_path.exists() else {}
    outcomes, todo = [], []
    for check in config.checks:
        what = subject(check.description)
        outcome = CheckOutcome(check, what)
        for inst in instances(check.battery, what):
            key = fingerprint(check, what, inst)
            outcome.cases.append(Case(instance_key(inst), state.load(key) or {}))
            if not outcome.cases[-1].result:
                todo.append((outcome.cases[-1], key, (check.description, check.battery, inst)))
        outcomes.append(outcome)
    total(len(todo))
    tick(sum(len(o.cases) for o in outcomes) - len(todo))
    for case, key, result in _results(todo, jobs):
        case.result = result
        state.save(key, result)
        tick(1)
    tolerance = float(config.gate["tolerance"])
    for outcome in outcomes:
        exact = outcome.check.battery["arithmetic"] == "fraction" and "kernel" not in outcome.check.description
        for case in outcome.cases:
            case.baseline = baselines.get(outcome.check.name, {}).get(case.key)
            if case.baseline is not None:
                case.moved = not same_acceptance(case.result["expected_accepted"], case.baseline, exact, tolerance)
        _hunt(outcome, config, state)
        _reproduce(outcome, config)
    return outcomes


def _results(todo: list, jobs: int):
    """``(case, key, result)`` for each task, in parallel when ``jobs > 1`` (results in submission order)."""
    tasks = [task for _, _, task in todo]
    if jobs <= 1 or len(tasks) <= 1:
        results = map(run_instance, tasks)
        for (case, key, _), result in zip(todo, results):
            yield case, key, result
        return
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        for (case, key, _), result in zip(todo, pool.map(run_instance, tasks)):
            yield case, key, result


def _hunt(outcome: CheckOutcome, config: Config, state: State) -> None:
    """A bounded hunt for a check expected lossless (kept in the state like an instance)."""
    seconds = float(config.gate["hunt_seconds"])
    if outcome.check.expect != "lossless" or seconds <= 0 or outcome.lossy_cases:
        return
    key = fingerprint(outcome.check, outcome.subject, f"hunt {seconds}")
    kept = state.load(key)
    if kept is None:
        found = hunt(outcome.subject, seconds, arithmetic=outcome.check.battery["arithmetic"],
                     shrink_time=float(config.gate["shrink_seconds"]))
        kept = {"lossy": found.found is not None, "pairs": found.pairs, "coverage": found.coverage(),
                "shrunk": found.shrunk.case.to_json(found.shrunk.certificate) if found.shrunk else None}
        state.save(key, kept)
    outcome.hunt = kept


def _reproduce(outcome: CheckOutcome, config: Config) -> None:
    """For a lossless check found lossy: the shrunk reproducer, written beside the state."""
    if outcome.check.expect != "lossless" or not outcome.failures:
        return
    folder = config.resolve("state") / "cases"
    path = folder / (re.sub(r"[^A-Za-z0-9_.-]+", "_", outcome.check.name) + ".json")
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
        write_json(path, outcome.hunt["shrunk"])
    else:
        return
    outcome.reproducer = str(path)


def write_baselines(path: Path, outcomes: list[CheckOutcome]) -> None:
    write_json(path, {o.check.name: {c.key: c.result["expected_accepted"] for c in o.cases} for o in outcomes})

