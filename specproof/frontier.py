"""``specproof frontier``'s sweep (docs/lossy.md, "The frontier"): rules swept over a grid of knob values and
model options (:class:`Sweep`, :class:`Frontier`), or given points (:meth:`Point.parse`), each point certified on
one or more model pairs and draft shapes (:class:`Shape`), with the lossless references of each pair and shape;
its cells run through a resumable store, locally or on Dask (:func:`run_frontier`), and are summed up per point and
shape (:func:`summarise`)."""

from __future__ import annotations

import ast
import itertools
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Callable

from specproof.frontier_cells import Cell, CeilingCell, Instance, LosslessCell, RuleCell, compute_cell, value_text
from exact.subject import shape_names
from simulator.errors import InvalidParameterError
from simulator.trees import TOPOLOGIES, make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.knobs import FIELD, bind, split_items
from specproof.study import Store, run_tasks

#: The model options a sweep may vary (the synthetic pair's), as ``--sweep`` names them.
MODEL_OPTIONS = ("rho", "tau_p", "tau_q")
#: The name under which the store keeps a frontier cell's record (``STORE/cache/frontier-<hash>.json``).
STORE_NAME = "frontier"


def parse_value(text: str) -> object:
    """A sweep value as exactly as it is typed: a number (``0.09``, ``1/3``, ``1e-2``) as a rational, a whole one
    as an ``int``; else a Python literal (``True``; a list as a tuple: ``[0.8, 0.9]``), else the text itself
    (``argmax``)."""
    text = text.strip()
    try:
        number = Fraction(text)
    except (ValueError, ZeroDivisionError):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
        return tuple(value) if isinstance(value, list) else value  # a cell is hashable
    return number.numerator if number.denominator == 1 else number


@dataclass(frozen=True)
class Sweep:
    """One ``--sweep``: a name (a rule's knob or a model option) and its values, in order."""

    name: str
    values: tuple

    @classmethod
    def parse(cls, text: str) -> Sweep:
        """``NAME=START:STOP:N`` (``N ≥ 2`` evenly spaced points, both ends included, exact rationals) or
        ``NAME=v1,v2,...`` (a value may be a bracketed list, ``[0.8, 0.9]``); :class:`InvalidParameterError` on
        ``sweep`` for anything else."""
        name, sep, rest = text.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name.isidentifier() or not rest.strip():
            raise InvalidParameterError("sweep", f"expected NAME=START:STOP:N or NAME=v1,v2,..., got {text!r}")
        if rest.count(":") == 2 and "," not in rest:
            start, stop, count = (part.strip() for part in rest.split(":"))
            ends = [parse_value(start), parse_value(stop)]
            if not all(isinstance(e, (int, Fraction)) for e in ends) or not count.isdigit() or int(count) < 2:
                raise InvalidParameterError("sweep", f"{text!r}: START:STOP:N takes two numbers and N ≥ 2 points")
            low, high = (Fraction(e) for e in ends)
            steps = int(count) - 1
            points = (low + (high - low) * i / steps for i in range(steps + 1))
            return cls(name, tuple(p.numerator if p.denominator == 1 else p for p in points))
        values = tuple(parse_value(v) for v in split_items(rest))
        if any(v == "" for v in values):
            raise InvalidParameterError("sweep", f"{text!r} has an empty value")
        return cls(name, values)


@dataclass(frozen=True)
class Point:
    """One rule at one setting: ``knobs``, every knob given (swept and fixed); ``model``, the model options of
    the setting (``(name, value)``, the swept ones); ``swept``, the values the sweep sets, as a table shows them;
    ``label``, a given point's words for its setting (where it comes from)."""

    rule: str
    knobs: tuple[tuple[str, object], ...]
    model: tuple[tuple[str, object], ...]
    swept: tuple[tuple[str, object], ...]
    label: str = ""

    @classmethod
    def parse(cls, text: str) -> Point:
        """One ``--point``: ``RULE`` (its defaults) or ``RULE:NAME=VALUE,...`` (values as :func:`parse_value` reads
        them; a list in brackets), then optionally ``@LABEL``, words the table shows beside the knobs;
        :class:`InvalidParameterError` on ``point`` for anything else (the knobs are checked by
        :meth:`Frontier.check`)."""
        body, _, label = text.partition("@")
        rule, _, rest = body.partition(":")
        rule = rule.strip()
        if not rule:
            raise InvalidParameterError("point", f"expected RULE[:NAME=VALUE,...][@LABEL], got {text!r}")
        knobs: dict[str, object] = {}
        for item in split_items(rest) if rest.strip() else []:
            name, sep, value = item.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or not name.isidentifier() or not value.strip():
                raise InvalidParameterError("point", f"{text!r}: expected NAME=VALUE, got {item.strip()!r}")
            if name in knobs:
                raise InvalidParameterError("point", f"{text!r} sets {name} twice")
            knobs[name] = parse_value(value)
        pairs = tuple(knobs.items())
        return cls(rule, pairs, (), pairs, label.strip())


@dataclass(frozen=True)
class Shape:
    """A draft tree's shape: ``topology``, ``depth`` and ``branching`` (1 on a chain)."""

    topology: str
    depth: int
    branching: int

    @classmethod
    def parse(cls, text: str) -> Shape:
        """One ``--shape``: ``TOPOLOGY:DEPTH[:BRANCHING]`` (branching 2 unless given; a chain's is 1);
        :class:`InvalidParameterError` on ``shape`` for anything else, an unknown topology or a tree too large."""
        parts = [part.strip() for part in text.split(":")]
        if len(parts) not in (2, 3) or not all(part.isdigit() for part in parts[1:]):
            raise InvalidParameterError("shape", f"expected TOPOLOGY:DEPTH[:BRANCHING] (whole numbers), got "
                                                 f"{text!r}")
        if parts[0] not in TOPOLOGIES or parts[0] == "explicit":
            raise InvalidParameterError("shape", f"{text!r}: the topology is one of "
                                                 f"{', '.join(t for t in TOPOLOGIES if t != 'explicit')}")
        depth, branching = int(parts[1]), int(parts[2]) if len(parts) == 3 else 2
        shape = cls(parts[0], depth, 1 if parts[0] == "chain" else branching)
        try:
            shape.tree()
        except InvalidParameterError as err:
            raise InvalidParameterError("shape", f"{text!r}: {err.message}") from None
        return shape

    def tree(self):
        return make_topology(self.topology, self.depth, self.branching)

    def label(self) -> str:
        """The shape in a table: ``chain, H = 3``, ``complete, b = 2, H = 2``."""
        width = "" if self.topology == "chain" else f", b = {self.branching}"
        return f"{self.topology}{width}, H = {self.depth}"


@dataclass(frozen=True)
class Frontier:
    """A sweep's plan: ``rules`` at the ``fixed`` knob values (``--verifier-kwargs``, each to the rules that have
    the knob), over the grid of ``sweeps``, or else the ``given`` points (``--point``; ``rules`` their rules), on
    model seeds ``--seed … --seed + seeds − 1`` of ``base``'s pair, on each of ``shapes`` (none: ``base``'s shape)
    where a rule is defined; with the best lossless rule on each pair and shape, and the ceiling unless ``ceiling``
    is false."""

    rules: tuple[str, ...]
    sweeps: tuple[Sweep, ...]
    fixed: tuple[tuple[str, object], ...]
    base: Instance
    seeds: int
    ceiling: bool
    max_columns: float
    ceiling_timeout: float
    max_executions: int | None
    timeout: float
    shapes: tuple[Shape, ...] = ()
    given: tuple[Point, ...] = ()

    def check(self) -> None:
        """Refuse, before anything runs, what would fail a cell: an unknown rule or one defined on none of the
        shapes, a sweep name no rule has as a knob nor a model option, a model option swept on a pair it does not
        shape, a name both swept and fixed or swept twice, a fixed knob no rule has, points given beside a sweep or
        fixed knobs, and every value a knob's or a model's check refuses (:class:`InvalidParameterError` on
        ``sweep.NAME``, ``point.NAME`` or ``verifier-kwargs.NAME``)."""
        option = "point" if self.given else "verifier"
        if self.given and (self.sweeps or self.fixed):
            raise InvalidParameterError("point", "a --point gives its rule's knobs itself: it does not mix with "
                                                 "--sweep or --verifier-kwargs")
        for rule in self.rules:
            spec = VERIFIERS.get(rule)
            if spec is None:
                raise InvalidParameterError(option, f"unknown rule {rule!r}: frontier takes the built-in rules "
                                                    "(specproof list)")
            if not any(self.defined(rule, shape) for shape in self.shape_list()):
                shapes = "; ".join(shape.label() for shape in self.shape_list())
                raise InvalidParameterError(option, f"{rule} is defined on {', '.join(spec.shapes)} trees, not on "
                                                    f"the shape given ({shapes})")
        knobs = {k.name for rule in self.rules for k in VERIFIERS[rule].knobs}
        seen: set[str] = set()
        for sweep in self.sweeps:
            if sweep.name in seen:
                raise InvalidParameterError(f"sweep.{sweep.name}", f"{sweep.name} is swept twice: give one --sweep "
                                                                   "per name")
            seen.add(sweep.name)
            if sweep.name in dict(self.fixed):
                raise InvalidParameterError(f"sweep.{sweep.name}", f"{sweep.name} is both swept and fixed by "
                                                                   "--verifier-kwargs: drop one")
            if sweep.name in MODEL_OPTIONS and self.base.model.model_kind != "synthetic":
                raise InvalidParameterError(f"sweep.{sweep.name}", f"{sweep.name} shapes the synthetic pair only "
                                                                   f"(the model is {self.base.model.model_kind})")
            if sweep.name not in knobs and sweep.name not in MODEL_OPTIONS:
                raise InvalidParameterError(f"sweep.{sweep.name}", f"no rule given has a knob {sweep.name!r} "
                                                                   f"({_knob_list(self.rules)}), and it is not a "
                                                                   f"model option ({', '.join(MODEL_OPTIONS)})")
        unknown = [name for name, _ in self.fixed if name not in knobs]
        if unknown:
            raise InvalidParameterError(f"{FIELD}.{unknown[0]}", f"no rule given has a knob {unknown[0]!r} "
                                                                 f"({_knob_list(self.rules)})")
        for point in self.points():
            self._check_point(point)

    def _check_point(self, point: Point) -> None:
        try:
            bind(point.rule, VERIFIERS[point.rule].knobs, dict(point.knobs))
        except InvalidParameterError as err:
            name = err.field.removeprefix(f"{FIELD}.")
            if self.given:
                raise InvalidParameterError(f"point.{name}", f"--point {point.rule}: {err.message}") from None
            if name in dict(point.swept):
                raise InvalidParameterError(f"sweep.{name}", f"--sweep {name}: {err.message}") from None
            raise
        try:
            self.instance(point.model, self.base.model.seed).build()
        except InvalidParameterError as err:
            if err.field not in dict(point.model):
                raise
            raise InvalidParameterError(f"sweep.{err.field}", f"--sweep {err.field}: {err.message}") from None

    def shape_list(self) -> tuple[Shape, ...]:
        """The shapes the points run on: ``shapes``, or ``base``'s."""
        return self.shapes or (Shape(self.base.topology, self.base.depth, self.base.branching),)

    @staticmethod
    def defined(rule: str, shape: Shape) -> bool:
        """Whether ``rule`` is defined on ``shape`` (a chain-only rule is not on a tree)."""
        return bool(set(VERIFIERS[rule].shapes) & shape_names(shape.tree().parents))

    def points(self) -> list[Point]:
        """The given points, or every rule's settings: the grid of its own knobs' sweeps and the model options'
        sweeps, in the order the sweeps were given (the last varies fastest)."""
        if self.given:
            return list(self.given)
        out = []
        for rule in self.rules:
            own = {k.name for k in VERIFIERS[rule].knobs}
            sweeps = [s for s in self.sweeps if s.name in own or s.name in MODEL_OPTIONS]
            fixed = tuple((name, value) for name, value in self.fixed if name in own)
            for values in itertools.product(*(s.values for s in sweeps)):
                swept = tuple((s.name, v) for s, v in zip(sweeps, values))
                out.append(Point(rule, fixed + tuple(p for p in swept if p[0] in own),
                                 tuple(p for p in swept if p[0] in MODEL_OPTIONS), swept))
        return out

    def settings(self) -> list[tuple[tuple[str, object], ...]]:
        """The model settings (swept model options) the points run on, each once, in order."""
        return list(dict.fromkeys(point.model for point in self.points()))

    def instance(self, model: tuple[tuple[str, object], ...], seed: int, shape: Shape | None = None) -> Instance:
        """The base instance on model seed ``seed`` with the model options ``model`` (``(name, value)``), on
        ``shape`` (``None``: the first shape)."""
        shape = shape or self.shape_list()[0]
        values = {name: float(value) for name, value in model}
        return replace(self.base, model=replace(self.base.model, seed=seed, **values), topology=shape.topology,
                       depth=shape.depth, branching=shape.branching)

    def seed_list(self) -> range:
        first = self.base.model.seed
        return range(first, first + self.seeds)

    def rule_cell(self, point: Point, seed: int, shape: Shape | None = None) -> RuleCell:
        return RuleCell(self.instance(point.model, seed, shape), point.rule, point.knobs, self.max_executions,
                        self.timeout)

    def reference_cells(self, model: tuple[tuple[str, object], ...], seed: int,
                        shape: Shape | None = None) -> tuple[Cell, ...]:
        """The best lossless rule's cell, and the ceiling's unless it is skipped."""
        instance = self.instance(model, seed, shape)
        best = LosslessCell(instance, self.max_executions, self.timeout)
        return (best, CeilingCell(instance, self.max_columns, self.ceiling_timeout)) if self.ceiling else (best,)

    def cells(self) -> list[Cell]:
        """Every cell, each once: the references first (the sweep's table needs them whatever else finishes),
        then the points seed by seed, so that a run stopped early has every point on about as many pairs; a point
        on a shape its rule is not defined on has none."""
        shapes = self.shape_list()
        references = [c for shape in shapes for m in self.settings() for s in self.seed_list()
                      for c in self.reference_cells(m, s, shape)]
        points = [self.rule_cell(p, s, shape) for s in self.seed_list() for shape in shapes for p in self.points()
                  if self.defined(p.rule, shape)]
        return list(dict.fromkeys(references + points))


def _knob_list(rules: tuple[str, ...]) -> str:
    return "; ".join(f"{rule}: {', '.join(k.name for k in VERIFIERS[rule].knobs) or 'no knobs'}" for rule in rules)


def run_frontier(plan: Frontier, store: Store | None, jobs: int = 1, scheduler: str | None = None,
                 progress: Callable[[int], None] | None = None) -> tuple[dict[Cell, dict], float]:
    """Every cell's record, and the seconds the cells computed here took (the wall time of this run's sweep).

    Records found in ``store`` (for this cell and code version, :meth:`Store.lookup`) are read back; the others are
    computed (:func:`specproof.study.run_tasks`: here, in ``jobs`` worker processes, or on a Dask ``scheduler``) and
    stored as each comes back, the store locked for the run. A cell depends only on its own values, so a resumed,
    parallel or Dask run gives the same numbers. ``progress(n)`` as ``n`` more cells are ready."""
    records: dict[Cell, dict] = {}
    todo = []
    for cell in plan.cells():
        found, record = store.lookup(STORE_NAME, cell.params()) if store is not None else (False, None)
        if found:
            records[cell] = record
        else:
            todo.append(cell)
    if progress is not None and records:
        progress(len(records))

    def done(task: tuple[Cell], record: dict) -> None:
        (cell,) = task
        if store is not None:
            store.put(STORE_NAME, cell.params(), record)
        records[cell] = record
        if progress is not None:
            progress(1)

    start = time.perf_counter()
    try:
        with store.lock() if store is not None else nullcontext():
            run_tasks([(cell,) for cell in todo], compute_cell, done, jobs, scheduler)
    except InvalidParameterError as err:  # a knob value a rule refuses only as it runs (relaxed_topk past V)
        name = err.field.removeprefix(f"{FIELD}.")
        if plan.given and name in {knob for point in plan.given for knob, _ in point.knobs}:
            raise InvalidParameterError(f"point.{name}", err.message) from None
        if name in {sweep.name for sweep in plan.sweeps}:
            raise InvalidParameterError(f"sweep.{name}", err.message) from None
        raise
    return records, time.perf_counter() - start


def number(value: object) -> Fraction | float | None:
    """A record's number: ``"num/den"`` exactly, a float as it is, ``"inf"`` as infinity."""
    if value is None:
        return None
    if value == "inf":
        return float("inf")
    return Fraction(value) if isinstance(value, str) else value


def _mean(values: list) -> Fraction | float:
    return sum(values) / len(values)


def summarise(plan: Frontier, records: dict[Cell, dict]) -> dict:
    """The sweep's numbers: per shape and model setting, the references (``best``: the best lossless rule's name
    per pair and its ``E[τ]`` averaged over the pairs; ``ceiling``: ``E[τ]*`` averaged, or why it is missing); per
    point and shape, ``E[τ]``, TVD and KL averaged over the pairs (exactly under fraction arithmetic; KL ∞ when one
    pair's is), each pair's numbers, and ``refused`` where a pair's cell has no numbers, or ``undefined`` where the
    rule is not defined on the shape. Numbers are ``Fraction`` or ``float``."""
    seeds = list(plan.seed_list())
    references = []
    for shape in plan.shape_list():
        for model in plan.settings():
            references.append({"shape": shape, "model": model,
                               **_references([plan.reference_cells(model, s, shape) for s in seeds], seeds,
                                             records, plan.ceiling)})
    points = []
    for point in plan.points():
        for shape in plan.shape_list():
            row = {"rule": point.rule, "knobs": point.knobs, "model": point.model, "swept": point.swept,
                   "label": point.label, "shape": shape}
            if not plan.defined(point.rule, shape):
                points.append({**row, "undefined": f"{point.rule} is defined on "
                                                   f"{', '.join(VERIFIERS[point.rule].shapes)} trees only"})
                continue
            pairs = [records[plan.rule_cell(point, s, shape)] for s in seeds]
            row["pairs"] = [{"seed": s, **r} for s, r in zip(seeds, pairs)]
            refused = [(s, r["refused"]) for s, r in zip(seeds, pairs) if "refused" in r]
            if refused:
                row["refused"] = f"seed {refused[0][0]}: {refused[0][1]}"
            else:
                for key in ("expected_accepted", "tvd", "kl"):
                    row[key] = _mean([number(r[key]) for r in pairs])
            points.append(row)
    return {"references": references, "points": points, "seeds": seeds}


def _references(cells: list[tuple[Cell, ...]], seeds: list[int], records: dict[Cell, dict], ceiling: bool) -> dict:
    """One shape and setting's references over the pairs (the cells of :meth:`Frontier.reference_cells` per seed)."""
    best = [records[c[0]] for c in cells]
    names = [b["best"] for b in best]
    row = {"best": names, "tied": [b["tied"] for b in best],
           "best_expected_accepted": None if None in names else
           _mean([number(b["rules"][n]["expected_accepted"]) for b, n in zip(best, names)]),
           "rules": [b["rules"] for b in best]}
    if not ceiling:
        row["ceiling_missing"] = "skipped (--no-ceiling)"
        return row
    ceilings = [records[c[1]] for c in cells]
    refused = [(s, c["refused"]) for s, c in zip(seeds, ceilings) if "refused" in c]
    unsettled = [s for s, c in zip(seeds, ceilings) if "refused" not in c and c["optimum"] is None]
    if refused:
        row["ceiling_missing"] = f"refused on seed {refused[0][0]}: {refused[0][1]}"
    elif unsettled:
        row["ceiling_missing"] = f"not settled exactly on seed {unsettled[0]}"
    else:
        row["ceiling"] = _mean([number(c["optimum"]) for c in ceilings])
        row["ceiling_proved"] = all(c["proved"] for c in ceilings)
    return row
