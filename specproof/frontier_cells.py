"""The lossy frontier's cells (docs/lossy.md, "The frontier"): one rule at one knob setting on one model pair and
draft shape, certified exactly (:class:`RuleCell`: ``E[τ]``, the TVD over ``Σ^(H+1)``, the KL divergence), and the
lossless references on the same pair and shape, the best lossless built-in rule (:class:`LosslessCell`) and the
ceiling ``E[τ]*`` (:class:`CeilingCell`).

A cell is a frozen value from which a worker builds everything it needs, so a sweep runs its cells anywhere and in
any order (:mod:`specproof.frontier`); :func:`compute_cell` returns a cell's record, JSON data with exact numbers as
``"num/den"`` strings under fraction arithmetic."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from fractions import Fraction

from simulator.drafting import Drafter, FixedShape
from simulator.errors import LimitError, SpecproofError, UndecidedComparisonError
from simulator.limits import limits, time_limit
from simulator.models import ModelPair
from simulator.numeric import Number, to_json_number
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS

from exact.certificate import FLOAT_TOLERANCE, certify
from exact.prove.optimum import claiming_rules, optimum, rule_row
from specproof.cli.specs import ModelSpec

#: Why a cell has no numbers: a limit it passed, or a comparison its intervals could not decide.
REFUSALS = (LimitError, UndecidedComparisonError)


@dataclass(frozen=True)
class Instance:
    """A model pair (``--model`` and its options, seed included) and a fixed draft shape with its drafting scheme, in
    one arithmetic: what a rule and its references are computed on."""

    model: ModelSpec
    topology: str
    depth: int
    branching: int
    drafting: str
    arithmetic: str

    def build(self) -> tuple[ModelPair, Drafter]:
        return self.model.build(), FixedShape(make_topology(self.topology, self.depth, self.branching), self.drafting)

    def key(self) -> dict:
        """The instance as a cell's record names it: its fields, the model's ``draft_models`` left out (the frontier's
        pairs have one draft model), so that a store's cells keep their names."""
        out = asdict(self)
        del out["model"]["draft_models"]
        return out

    def number(self, value: Number) -> object:
        """A number of this instance's arithmetic as JSON: ``"num/den"`` exactly, or a float."""
        return to_json_number(value, self.arithmetic)


@dataclass(frozen=True)
class RuleCell:
    """``rule`` at the knob values ``knobs`` (``(name, value)`` pairs; the others at their defaults) on
    ``instance``, certified within ``max_executions`` (``None``: no limit) and ``timeout`` seconds (0: none)."""

    instance: Instance
    rule: str
    knobs: tuple[tuple[str, object], ...]
    max_executions: int | None
    timeout: float

    def params(self) -> dict:
        return {"cell": "rule", "instance": self.instance.key(), "rule": self.rule,
                "knobs": {name: value_text(value) for name, value in self.knobs},
                "max_executions": self.max_executions, "timeout": self.timeout}

    def compute(self) -> dict:
        """``expected_accepted``, ``tvd``, ``position_tvd``, ``kl`` (``"inf"`` with mass off the target's support)
        and ``lossless``, or ``refused`` saying which limit or comparison stopped it."""
        model, drafter = self.instance.build()
        verifier = VERIFIERS[self.rule].build(dict(self.knobs))
        try:
            with limits(self.max_executions), time_limit(self.timeout):
                cert = certify(model, drafter, verifier, self.instance.arithmetic)
        except REFUSALS as err:
            return {"refused": f"{err.field}: {err.message}"}
        number = self.instance.number
        return {"expected_accepted": number(cert.expected_accepted), "tvd": number(cert.tvd),
                "position_tvd": [number(t) for t in cert.position_tvd],
                "kl": "inf" if cert.kl == float("inf") else float(cert.kl), "lossless": cert.lossless}


@dataclass(frozen=True)
class LosslessCell:
    """The built-in rules that claim the instance's drafting scheme on its shape (:func:`claiming_rules`, as
    ``specproof optimum`` and reports/optimality.md compare them), each certified; the best is the lossless one of
    largest ``E[τ]``. A rule completed by a modified target (greedy BV) is lossless over rounds, not per round, and
    is not ranked."""

    instance: Instance
    max_executions: int | None
    timeout: float

    def params(self) -> dict:
        return {"cell": "lossless", "instance": self.instance.key(), "max_executions": self.max_executions,
                "timeout": self.timeout}

    def compute(self) -> dict:
        """:func:`best_lossless` on the instance's pair and shape."""
        model, drafter = self.instance.build()
        instance = self.instance
        return best_lossless(model, drafter, instance.drafting, instance.topology, instance.arithmetic,
                             self.max_executions, self.timeout)


def best_lossless(model: ModelPair, drafter: Drafter, drafting: str, topology: str, arithmetic: str,
                  max_executions: int | None = None, timeout: float = 0) -> dict:
    """The built-in rules that claim ``drafting`` on ``topology`` (:func:`claiming_rules`), each certified on
    ``model`` with ``drafter`` in ``arithmetic`` within ``max_executions`` (``None``: no limit) and ``timeout``
    seconds (0: none).

    Returns ``rules``: each rule's ``expected_accepted`` and ``lossless``, or ``skipped`` (why it has no row);
    ``best``: the best rule's name, ``None`` when no rule claims the scheme on the shape; of rules tied (within the
    float tolerance under floats) the one defined on the fewest shapes, the rule made for the shape (``bv`` on
    chains, where Layer Verification and TRV reach the same ``E[τ]``), then the first in the registry; ``tied``: the
    others. Numbers are JSON numbers of ``arithmetic`` (``"num/den"`` under fractions)."""
    rows: dict[str, dict] = {}
    for name in claiming_rules(drafting, topology):
        try:
            with limits(max_executions), time_limit(timeout):
                row = rule_row(model, drafter, name, None, name, arithmetic)
        except SpecproofError as err:  # not defined on this tree, or past a limit: said in its row
            rows[name] = {"skipped": f"{err.field}: {err.message}"}
            continue
        rows[name] = {"expected_accepted": to_json_number(row.expected_accepted, arithmetic),
                      "lossless": row.lossless and not row.outside}
    accepted = {name: Fraction(row["expected_accepted"]) for name, row in rows.items() if row.get("lossless")}
    top = max(accepted.values(), default=None)
    tolerance = 0 if arithmetic == "fraction" else FLOAT_TOLERANCE  # a tie is not a rounding's
    tied = [name for name, value in accepted.items() if value >= top - tolerance]
    best = min(tied, key=lambda name: len(VERIFIERS[name].shapes), default=None)  # stable: registry order
    return {"rules": rows, "best": best, "tied": [name for name in tied if name != best]}


@dataclass(frozen=True)
class CeilingCell:
    """The ceiling ``E[τ]*`` of the instance (:func:`exact.prove.optimum.optimum`, always exact), refused past
    ``max_columns`` LP columns or ``timeout`` seconds (0: none)."""

    instance: Instance
    max_columns: float
    timeout: float

    def params(self) -> dict:
        return {"cell": "ceiling", "instance": {**self.instance.key(), "arithmetic": "fraction"},
                "max_columns": self.max_columns, "timeout": self.timeout}

    def compute(self) -> dict:
        """``optimum`` (``"num/den"``, ``None`` when neither side checked), ``proved``, ``columns`` and
        ``seconds``; or ``refused`` saying which limit stopped it."""
        model, drafter = self.instance.build()
        start = time.perf_counter()
        try:
            with time_limit(self.timeout):
                result = optimum(model, drafter, max_columns=self.max_columns)
        except SpecproofError as err:  # over the column limit (a typed error naming vocab or depth), or the time
            return {"refused": f"{err.field}: {err.message}"}
        return {"optimum": None if result.optimum is None else to_json_number(result.optimum, "fraction"),
                "proved": result.proved, "columns": result.columns,
                "seconds": round(time.perf_counter() - start, 3)}


Cell = RuleCell | LosslessCell | CeilingCell


def compute_cell(cell: Cell, workers: int = 1) -> dict:
    """The record of ``cell`` (a top-level function, so worker processes and Dask can run it); ``workers``, the
    processes sharing the machine, changes nothing: a cell is one exact computation."""
    return cell.compute()


def value_text(value: object) -> str:
    """A knob or model value as a user types it: a rational with a finite decimal expansion in decimals (``0.09``),
    another as ``num/den`` (``1/3``), anything else as ``str``."""
    if not isinstance(value, Fraction) or value.denominator == 1:
        return str(value.numerator if isinstance(value, Fraction) else value)
    twos = fives = 0
    rest = value.denominator
    while rest % 2 == 0:
        rest, twos = rest // 2, twos + 1
    while rest % 5 == 0:
        rest, fives = rest // 5, fives + 1
    if rest != 1:
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)
    digits = str(abs(value.numerator) * 10**places // value.denominator).rjust(places + 1, "0")
    return f"{'-' if value < 0 else ''}{digits[:-places]}.{digits[-places:]}"
