"""The toy study's exact columns (:func:`add_exact_laws`): per model seed, the round's exact law by the rule's
recursion beside the Monte Carlo mean, for every cell a recursion reaches."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Collection, Protocol

import numpy as np

from simulator.errors import ExecutionLimitError
from simulator.limits import limits
from simulator.verifiers import VERIFIERS
from specproof.study import Cell, Store, exact_law_summary

#: Executions one seed's recursion may take here: TRV on complete(b = 2, H = 2) at V = 15 takes 800,177 (10 s);
#: H = 3 passes this within a minute, once per rule and structure (the failure is kept in the store).
LAW_EXECUTIONS = 1_000_000
#: Why a rule left out of a run's recursions (``add_exact_laws(rules=…)``) has no exact law in it.
NOT_ATTEMPTED = "not attempted in the quick run (`specproof report --full` attempts every rule's recursion)"


def seed_z(mean: float, exact: float, se: float, trials: int) -> float:
    """``(mean − exact)/se``: a seed's Monte Carlo mean against the exact ``E[τ]``, in its own standard errors. A
    constant sample (SE 0, possible at a handful of trials) is consistent, z = 0, when the exact law puts less than
    ``1/(100 N)`` elsewhere; one that is not has no finite z (``±inf``: shown as ∞, written as ``null``)."""
    gap = mean - exact
    if se > 0:
        return gap / se
    return 0.0 if abs(gap) * trials < 0.01 else math.copysign(math.inf, gap)


def finite(value: float | None) -> float | None:
    """``value`` for JSON (which has no infinity): ``None`` for an infinite z."""
    return None if value is None or math.isinf(value) else value


class Row(Protocol):
    """What this module reads and fills of a toy-study row (:class:`specproof.reports.toy_study.CellRow`)."""

    table: int
    column: str
    method: str
    cell: Cell
    ours: dict | None
    exact: float | None
    exact_z: float | None
    law: dict | None
    law_note: str | None


def add_exact_laws(rows: list[Row], store: Store, rules: Collection[str] | None = None,
                   tick: Callable[[str, int], None] = lambda stage, total: None) -> None:
    """Fill ``law`` (over the seeds run: how many certified, how many LOSSLESS, the largest TVD, the largest gap
    between the law's ``E[τ]`` and the dynamic programme's where both exist) or ``law_note`` (why the cell stays
    Monte Carlo only) on every row that has records; rows without a dynamic programme take ``exact`` and
    ``exact_z`` from the law. ``rules``: attempt only these rules' recursions (``None``: every rule that has one);
    the others' rows get :data:`NOT_ATTEMPTED`. ``tick("exact laws", total)`` once per seed whose law was missing,
    as it is certified (or found blocked by a smaller cell).

    For every cell whose rule has an exact recursion in the registry (``VerifierSpec.exact_law``: token
    verification's law over (prefix, shape node), TRV's over subtrees, LV's over the deepest level), each seed's round
    is certified in float64 (``certify --method recursion``): its TVD to ``q^(H+1)`` with the verdict, and ``E[τ]``,
    set against the Monte Carlo mean of the same seed in its own standard errors. Results are kept in the seed's store
    record (``exact_law``). Which cells a recursion reaches is measured: each seed's recursion runs under
    :data:`LAW_EXECUTIONS`, cells in order of depth and branching, and a cell past the limit blocks the larger cells
    of its rule and structure, which stay Monte Carlo only with the reason.
    """
    attempted = [r for r in rows if r.ours is not None and VERIFIERS[r.method].exact_law is not None
                 and (rules is None or r.method in rules)]
    total = sum(1 for r in attempted for rec in store.records(r.cell) if "exact_law" not in rec)
    blocked: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
    for r in sorted((r for r in rows if r.ours is not None), key=lambda r: (r.cell.depth, r.cell.branching)):
        if VERIFIERS[r.method].exact_law is None:
            r.law_note = "no exact recursion for this rule (enumerating its draft trees is not attempted here)"
            continue
        if rules is not None and r.method not in rules:
            r.law_note = NOT_ATTEMPTED
            continue
        key = (r.method, r.cell.topology)
        note = next((f"larger than H = {d}, b = {b}, where {why}" for d, b, why in blocked.get(key, ())
                     if r.cell.depth >= d and r.cell.branching >= b), None)
        records = store.records(r.cell)
        if note is None:
            note = _fill(r.cell, records, store, lambda: tick("exact laws", total))
            if note is not None:
                blocked.setdefault(key, []).append((r.cell.depth, r.cell.branching, note))
        if note is not None:
            for _ in range(sum(1 for rec in records if "exact_law" not in rec)):
                tick("exact laws", total)  # not certified: settled by the smaller cell's failure
            r.law_note = note
            continue
        laws = [rec["exact_law"] for rec in records]
        gaps = [abs(rec["exact_law"]["accept_len"] - rec["exact_accept_len"]) for rec in records
                if "exact_accept_len" in rec]
        r.law = {"seeds": len(laws), "lossless": sum(law["lossless"] for law in laws),
                 "max_tvd": max(law["tvd"] for law in laws), "tolerance": laws[0]["tolerance"],
                 "max_dp_gap": max(gaps) if gaps else None}
        if r.exact is None:
            z = [abs(seed_z(rec["accept_len_mean"], rec["exact_law"]["accept_len"], rec["accept_len_se"],
                            rec["trials"])) for rec in records]
            r.exact = float(np.mean([law["accept_len"] for law in laws]))
            r.exact_z = float(max(z))


def _fill(cell: Cell, records: list[dict], store: Store, tick: Callable[[], None]) -> str | None:
    """Certify the seeds of ``cell`` not yet certified, saving each (``tick()`` after each); the reason the cell
    is not reached, if so."""
    for record in records:
        law = record.get("exact_law")
        if law is not None:
            if "unreached" in law:
                return law["unreached"]
            continue
        try:
            with limits(max_executions=LAW_EXECUTIONS):
                record["exact_law"] = exact_law_summary(cell, record["seed"])
        except ExecutionLimitError:
            record["exact_law"] = {"unreached": f"the recursion passes {LAW_EXECUTIONS:,} executions"}
        store.save(record, cell, record["seed"])
        tick()
        if "unreached" in record["exact_law"]:
            return record["exact_law"]["unreached"]
    return None


@dataclass(frozen=True)
class ExactColumns:
    """What the exact-columns section shows (:func:`exact_columns`); :meth:`to_json` is its part of
    ``toy_study.json``."""

    certified_cells: int  # distinct cells whose seeds a recursion certified
    seed_cells: int
    lossless: int  # seed-cells LOSSLESS
    max_tvd: float | None
    max_dp_gap: float | None  # the largest gap to the dynamic programme's E[τ], where both exist
    reach: dict[str, dict[str, list[tuple[int, int]]]]  # method → structure → the largest (H, b) certified
    monte_carlo_only: list[tuple[str, str, list[tuple[int, int]], str]]  # (method, structure, (H, b)s, why)
    table1: list[dict]  # Table 1's certified cells: label, max_tvd, lossless, seeds
    table1_seeds: dict[str, dict[int, dict]]  # label → seed → exact, monte_carlo, se, tvd, lossless and z

    def to_json(self) -> dict:
        per_seed: dict[str, list[dict]] = {}
        for seed in sorted({s for seeds in self.table1_seeds.values() for s in seeds}):
            for label, seeds in self.table1_seeds.items():
                if seed in seeds:
                    entry = {k: v for k, v in seeds[seed].items() if k != "z"}
                    per_seed.setdefault(label, []).append({"seed": seed, **entry})
        return {"certified_cells": self.certified_cells, "certified_seed_cells": self.seed_cells,
                "lossless": self.lossless, "max_tvd": self.max_tvd, "max_dp_gap": self.max_dp_gap,
                "executions_limit": LAW_EXECUTIONS, "table1_per_seed": per_seed}


def exact_columns(rows: list[Row], store: Store) -> ExactColumns:
    """What is certified, the reach of each recursion, the cells that stay Monte Carlo only, and Table 1 seed by
    seed, from rows :func:`add_exact_laws` filled."""
    certified = {r.cell: r for r in rows if r.law is not None}
    gaps = [r.law["max_dp_gap"] for r in certified.values() if r.law["max_dp_gap"] is not None]
    found: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for r in certified.values():
        found.setdefault((r.method, r.cell.topology), []).append((r.cell.depth, r.cell.branching))
    reach = {method: {topology: _maxima(found[method, topology]) for topology in _STRUCTURES
                      if found.get((method, topology))}
             for method in dict.fromkeys(r.method for r in rows if VERIFIERS[r.method].exact_law is not None)}
    only: dict[tuple[str, str, str], set[tuple[int, int]]] = {}
    for r in rows:
        if r.law is None and r.law_note is not None:
            only.setdefault((r.method, r.cell.topology, r.law_note), set()).add((r.cell.depth, r.cell.branching))
    table1 = [r for r in rows if r.table == 1 and r.law is not None]
    table1_seeds = {}
    for r in table1:
        table1_seeds[f"{r.method} {r.column}"] = {
            rec["seed"]: {"exact": rec["exact_law"]["accept_len"], "monte_carlo": rec["accept_len_mean"],
                          "se": rec["accept_len_se"], "tvd": rec["exact_law"]["tvd"],
                          "lossless": rec["exact_law"]["lossless"],
                          "z": abs(seed_z(rec["accept_len_mean"], rec["exact_law"]["accept_len"], rec["accept_len_se"],
                                          rec["trials"]))}
            for rec in store.records(r.cell)}
    return ExactColumns(
        len(certified), sum(r.law["seeds"] for r in certified.values()),
        sum(r.law["lossless"] for r in certified.values()),
        max((r.law["max_tvd"] for r in certified.values()), default=None), max(gaps) if gaps else None, reach,
        [(method, topology, sorted(sizes), note) for (method, topology, note), sizes in sorted(only.items())],
        [{"label": f"{r.method} {r.column}", **{k: r.law[k] for k in ("max_tvd", "lossless", "seeds")}}
         for r in table1], table1_seeds)


def exact_markdown(columns: ExactColumns) -> str:
    """The section on the exact columns (:func:`exact_columns`)."""
    worst, gap = columns.max_tvd, columns.max_dp_gap
    lines = ["## Exact columns", "",
             f"Every cell whose rule has an exact recursion that finishes within {LAW_EXECUTIONS:,} executions per "
             "seed (token verification's law over (prefix, shape node); TRV's over subtrees; LV's over the deepest "
             "level: docs/engines.md) is certified seed by seed in float64 (`certify --method recursion`; lossless "
             "means TVD ≤ 1e-10, the recursion's rounding bound with a margin). The law's E[τ] is the exact column "
             "beside the Monte Carlo mean of the same seed, and the tables give its distance in that seed's "
             "standard errors.", "",
             f"**{columns.certified_cells} distinct cells, {columns.seed_cells} seed-cells certified: "
             f"{columns.lossless} LOSSLESS" + (f", largest TVD {worst:.1e}" if worst is not None else "") + ".**"
             + (f" Where the dynamic programme over contexts (`exact.recursions.token_dp`) gives E[τ] too, the two "
                f"agree within {gap:.1e}." if gap is not None else ""), ""]
    lines += ["The largest cells each recursion certified here, by structure, as (H, b) (none larger in both):", "",
              "| method | " + " | ".join(_STRUCTURES) + " |", "|---|" + "---|" * len(_STRUCTURES)]
    for method, by_structure in columns.reach.items():
        cells = [", ".join(f"({d}, {b})" for d, b in by_structure.get(topology, [])) or "–"
                 for topology in _STRUCTURES]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "Cells that stay Monte Carlo only, and why:", "", "| method | structure | (H, b) | why |",
              "|---|---|---|---|"]
    for method, topology, sizes, note in columns.monte_carlo_only:
        lines.append(f"| {method} | {topology} | {', '.join(f'({d}, {b})' for d, b in sizes)} | {note} |")
    if columns.table1:
        lines += _table1_lines(columns)
    return "\n".join(lines) + "\n"


def _table1_lines(columns: ExactColumns) -> list[str]:
    labels = [cell["label"] for cell in columns.table1]
    lines = ["", "### Table 1 seed by seed", "",
             "Each entry: exact E[τ] / Monte Carlo mean (|difference| in that seed's standard errors); the last "
             "row: the largest TVD to q^(H+1) over the seeds, and how many are LOSSLESS.", "",
             "| seed | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for seed in sorted({s for seeds in columns.table1_seeds.values() for s in seeds}):
        entries = []
        for label in labels:
            entry = columns.table1_seeds[label].get(seed)
            if entry is None:
                entries.append("–")
                continue
            z = entry["z"]
            entries.append(f"{entry['exact']:.4f} / {entry['monte_carlo']:.4f} "
                           f"({'∞' if math.isinf(z) else f'{z:.1f}'})")
        lines.append(f"| {seed} | " + " | ".join(entries) + " |")
    lines.append("| TVD | " + " | ".join(f"{cell['max_tvd']:.1e} ({cell['lossless']}/{cell['seeds']} LOSSLESS)"
                                           for cell in columns.table1) + " |")
    return lines


_STRUCTURES = ("multi-chain", "tapered", "complete")


def _maxima(sizes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The sizes no other one dominates (deeper and at least as wide, or wider and at least as deep)."""
    return sorted(s for s in set(sizes) if not any(o != s and o[0] >= s[0] and o[1] >= s[1] for o in sizes))
