"""``reports/optimality.md``: every claiming rule's distance from the exact ceiling ``E[τ]*`` (docs/optimum.md), on
random rational pairs and the synthetic pair (:func:`write_optimality_report`)."""

from __future__ import annotations

import json
import os
import platform
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from fractions import Fraction
from multiprocessing import get_context
from pathlib import Path
from typing import Callable

from exact.prove.optimum import claiming_rules, optimum, rule_row
from simulator.drafting import draft_models_for
from simulator.drafting.drafter_registry import make_drafter
from simulator.models import make_model, table_json
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS
from simulator.verifiers.flows import GR_TOLERANCE
from simulator.workers import pool_options

from .certification import EXTRA_DRAFT_RHO, with_draft_models

#: The shapes: name → (topology, depth, branching), the small members of the toy study's families.
SHAPES = {"chain": ("chain", 3, 1), "complete": ("complete", 2, 2), "multi-chain": ("multi-chain", 2, 3),
          "tapered": ("tapered", 2, 2)}
#: The fixed drafting schemes compared on each shape. A chain draws the same trees under every scheme, so it has
#: i.i.d. drafting only; SpecHub's ``hub`` drafts exactly two children a node; ``k-models`` drafts each node's
#: child ``i`` from draft model ``i`` (Khisti et al.), on the trees ``khisti-is`` is defined on.
SCHEMES = {"chain": ("iid",),
           "complete": ("iid", "without-replacement", "greedy-k", "hub", "k-models"),
           "multi-chain": ("iid", "without-replacement", "greedy-k", "k-models"),
           "tapered": ("iid", "without-replacement", "greedy-k")}
VOCAB = 3
#: The synthetic pair's settings: the toy study's similarity sweep at τ = 1 and its temperature sweep at ρ = 0.5
#: (Cha et al. 2026, Tables 10–15), each with model seeds 0 and 1.
SYNTHETIC = ((0.0, 1.0), (0.25, 1.0), (0.5, 1.0), (0.5, 0.5), (0.5, 0.75), (0.5, 1.5))
SYNTHETIC_SEEDS = (0, 1)
RANDOM_SEEDS = tuple(range(20))
#: Rules whose flows are solved numerically (GR): at the optimum within this, not exactly.
NUMERICAL = ("tv-gr", "lv-gr")


@dataclass(frozen=True)
class Instance:
    """One model pair, shape and drafting scheme."""

    model: str  # "random-rational" or "synthetic"
    seed: int
    shape: str
    scheme: str
    rho: float = 0.5
    tau: float = 1.0

    def build(self):
        topology = make_topology(*SHAPES[self.shape])
        model = with_draft_models(make_model(self.model, None, VOCAB, self.seed, rho=self.rho, tau_p=self.tau,
                                             tau_q=self.tau), self.draft_models)
        return model, make_drafter(self.scheme, topology, model)

    @property
    def draft_models(self) -> int:
        return draft_models_for(self.scheme, make_topology(*SHAPES[self.shape]))

    @property
    def rhos(self) -> str:
        """The draft models' similarities as ``--rho`` takes them."""
        return ",".join(f"{rho:g}" for rho in (self.rho,) + (EXTRA_DRAFT_RHO,) * (self.draft_models - 1))

    def label(self) -> str:
        extra = f" ρ={self.rhos} τ={self.tau}" if self.model == "synthetic" else (
            f" ({self.draft_models} draft models)" if self.draft_models > 1 else "")
        return f"{self.model} seed {self.seed}{extra}"

    def command(self, table: str | None = None) -> str:
        """The ``specproof optimum`` command line of this instance (on the written model table, if given)."""
        topology, depth, branching = SHAPES[self.shape]
        model = f"--model table --table {table}" if table else (
            f"--model {self.model} --vocab {VOCAB} --seed {self.seed}"
            + (f" --rho {self.rhos} --tau-p {self.tau} --tau-q {self.tau}" if self.model == "synthetic" else
               f" --draft-models {self.draft_models}" if self.draft_models > 1 else ""))
        return (f"specproof optimum {model} --topology {topology} --depth {depth} --branching {branching} "
                f"--drafting {self.scheme}")


def instances() -> list[Instance]:
    out = []
    for shape in SHAPES:
        for scheme in SCHEMES[shape]:
            out += [Instance("random-rational", s, shape, scheme) for s in RANDOM_SEEDS]
            out += [Instance("synthetic", s, shape, scheme, rho, tau) for rho, tau in SYNTHETIC
                    for s in SYNTHETIC_SEEDS]
    return out


def rules_for(instance: Instance) -> list[str]:
    """The built-in per-round lossless rules that claim the instance's scheme and shape."""
    return claiming_rules(instance.scheme, SHAPES[instance.shape][0])


def measure(instance: Instance) -> dict:
    """The optimum and every claiming rule's row, as JSON (fractions as strings)."""
    model, drafter = instance.build()
    result = optimum(model, drafter)
    rules = {}
    for name in rules_for(instance):
        row = rule_row(model, drafter, name, result.optimum if result.proved else None)
        if row.outside:
            continue  # greedy BV: lossless over rounds through a modified target, outside the per-round LP
        rules[name] = {"expected_accepted": str(row.expected_accepted), "lossless": row.lossless,
                       "efficiency": None if row.efficiency is None else str(row.efficiency)}
    return {"instance": asdict(instance), "optimum": str(result.optimum), "proved": result.proved,
            "columns": result.columns, "seconds": round(result.seconds, 3), "rules": rules}


def _measure_cached(root: str, instance: Instance) -> dict:
    from specproof.study import Store

    params = {**asdict(instance), "topology": SHAPES[instance.shape], "vocab": VOCAB, "rules": rules_for(instance)}
    return Store(Path(root)).cached("optimality", params, lambda: measure(instance))


def measure_all(store_root: Path, jobs: int = 1, tick: Callable[[str, int], None] | None = None) -> list[dict]:
    """Every instance's record, from the store's cache or computed (in ``jobs`` processes).

    For each shape (a chain, the complete, multi-chain and tapered trees) and fixed drafting scheme it is compared
    under (:data:`SCHEMES`), ``V = 3``: the optimum, proved exactly (:func:`exact.prove.optimum.optimum`), and each built-in rule
    that claims the scheme and the shape, certified exactly, with its efficiency ``E[τ] / E[τ]*``. The report
    summarises per rule the minimum, the median and the share of instances at the optimum, and writes the instance
    where the best rule is farthest from the ceiling as a model table (``--model table``). Written by ``specproof
    report --full``; each instance is cached in the report's store.
    """
    todo = instances()
    step = (lambda: tick("optimality instances", len(todo))) if tick is not None else (lambda: None)
    records = []
    if jobs <= 1:
        for inst in todo:
            records.append(_measure_cached(str(store_root), inst))
            step()
        return records
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), **pool_options()) as pool:
        for record in pool.map(_measure_cached, [str(store_root)] * len(todo), todo):
            records.append(record)
            step()
    return records


# ---- summaries --------------------------------------------------------------------------------------------------
def _at_optimum(name: str, efficiency: Fraction) -> bool:
    return efficiency >= 1 - GR_TOLERANCE if name in NUMERICAL else efficiency == 1


@dataclass
class Summary:
    instances: int
    minimum: float
    median: float
    at_optimum: float

    def cells(self) -> list[str]:
        if not self.instances:
            return ["–"] * 3
        return [f"{self.minimum:.4f}", f"{self.median:.4f}", f"{self.at_optimum:.0%}"]


def summarise(records: list[dict], name: str) -> Summary:
    effs = [Fraction(r["rules"][name]["efficiency"]) for r in records
            if name in r["rules"] and r["rules"][name]["efficiency"] is not None]
    if not effs:
        return Summary(0, float("nan"), float("nan"), float("nan"))
    return Summary(len(effs), float(min(effs)), float(statistics.median(effs)),
                   sum(_at_optimum(name, e) for e in effs) / len(effs))


def _best(record: dict) -> tuple[Fraction, str]:
    """The best claiming rule's efficiency on one instance, and its name."""
    return max((Fraction(row["efficiency"]), name) for name, row in record["rules"].items()
               if row["efficiency"] is not None)


def _rated(record: dict) -> bool:
    """Whether the instance has efficiencies: its optimum proved and positive (at ``E[τ]* = 0`` every rule accepts
    nothing, and ``0/0`` is no efficiency)."""
    return record["proved"] and Fraction(record["optimum"]) > 0


def _rule_order(records: list[dict]) -> list[str]:
    seen = {name for r in records for name in r["rules"]}
    return [name for name in VERIFIERS if name in seen]


def _group(records: list[dict], shape: str, scheme: str, model: str | None = None) -> list[dict]:
    return [r for r in records if r["instance"]["shape"] == shape and r["instance"]["scheme"] == scheme
            and (model is None or r["instance"]["model"] == model)]


@dataclass(frozen=True)
class Worst:
    """The instance of one shape and drafting scheme where the best claiming rule is farthest from ``E[τ]*``."""

    shape: str
    scheme: str
    instance: Instance
    record: dict  # its measured record (:func:`measure`)
    best: Fraction  # the best rule's efficiency
    rule: str


@dataclass(frozen=True)
class OptimalityResults:
    """What the report shows, computed from every instance's record (:func:`optimality_results`)."""

    records: list[dict]
    proved: int  # instances whose optimum is proved
    above: list[tuple[dict, str]]  # (record, rule): a lossless rule above the optimum
    lossy: list[tuple[dict, str]]  # (record, rule): a claiming rule found lossy
    zero: int  # instances with E[τ]* = 0, which have no efficiency
    worst: list[Worst]  # per shape and scheme, in the report's order

    @property
    def ok(self) -> bool:
        """Every optimum proved, no lossless rule above it, no claiming rule lossy."""
        return self.proved == len(self.records) and not self.above and not self.lossy


def _groups() -> list[tuple[str, str]]:
    """(shape, scheme) in the report's order (:data:`SCHEMES`)."""
    return [(shape, scheme) for shape in SHAPES for scheme in SCHEMES[shape]]


def optimality_results(records: list[dict]) -> OptimalityResults:
    """The counts and the worst instances of ``records`` (:func:`measure_all`'s)."""
    worst = []
    for shape, scheme in _groups():
        record = min((r for r in _group(records, shape, scheme) if _rated(r)), key=lambda r: _best(r)[0])
        best, rule = _best(record)
        worst.append(Worst(shape, scheme, Instance(**record["instance"]), record, best, rule))
    return OptimalityResults(
        records, sum(r["proved"] for r in records),
        [(r, name) for r in records for name, row in r["rules"].items()
         if row["lossless"] and row["efficiency"] is not None and Fraction(row["efficiency"]) > 1],
        [(r, name) for r in records for name, row in r["rules"].items() if not row["lossless"]],
        sum(r["proved"] and Fraction(r["optimum"]) == 0 for r in records), worst)


def write_optimality_report(out: Path, store_root: Path, jobs: int, command: str,
                            tick: Callable[[str, int], None] | None = None) -> bool:
    """``optimality.md``, ``optimality.json``, ``optimality.png`` and the worst instances' model tables in
    ``optimality_cases/``; True when every optimum is proved and no lossless rule is above it."""
    results = optimality_results(measure_all(store_root, jobs, tick))
    tables = write_worst_tables(out / "optimality_cases", results)
    machine = f"{platform.machine()} / Python {platform.python_version()}"
    (out / "optimality.md").write_text(optimality_markdown(results, command, machine, tables))
    (out / "optimality.json").write_text(json.dumps(results.records, indent=1) + "\n")
    _plot(results.records, out / "optimality.png")
    return results.ok


def write_worst_tables(cases: Path, results: OptimalityResults) -> list[str]:
    """Each worst instance's model table (``--model table``) in ``cases``; their paths relative to the current
    folder, in the order of ``results.worst``."""
    cases.mkdir(parents=True, exist_ok=True)
    paths = []
    for w in results.worst:
        path = cases / f"worst-{w.shape}-{w.scheme}.json"
        model, _ = w.instance.build()
        path.write_text(json.dumps(table_json(model, SHAPES[w.shape][1]), indent=1) + "\n")
        paths.append(os.path.relpath(path))
    return paths


def optimality_markdown(results: OptimalityResults, command: str, machine: str, tables: list[str]) -> str:
    """``optimality.md``; ``tables``: the worst instances' table files, as the reader's commands name them."""
    records = results.records
    lines = _intro_lines(results, command, machine)
    lines += ["## Every rule, over all shapes", "",
              "| rule | random: instances | min | median | at `E[τ]*` | synthetic: instances | min | median | "
              "at `E[τ]*` |", "|---|---|---|---|---|---|---|---|---|"]
    rr = [r for r in records if r["instance"]["model"] == "random-rational"]
    syn = [r for r in records if r["instance"]["model"] == "synthetic"]
    for name in _rule_order(records):
        a, b = summarise(rr, name), summarise(syn, name)
        lines.append(f"| `{name}` | {a.instances} | " + " | ".join(a.cells()) + f" | {b.instances} | "
                     + " | ".join(b.cells()) + " |")
    for w, relative in zip(results.worst, tables):
        _, depth, branching = SHAPES[w.shape]
        lines += ["", f"## {w.shape} (depth {depth}, branching {branching}), {w.scheme} drafting", "",
                  "| rule | random: min | median | at `E[τ]*` | synthetic: min | median | at `E[τ]*` |",
                  "|---|---|---|---|---|---|---|"]
        for name in _rule_order(_group(records, w.shape, w.scheme)):
            a = summarise(_group(records, w.shape, w.scheme, "random-rational"), name)
            b = summarise(_group(records, w.shape, w.scheme, "synthetic"), name)
            lines.append(f"| `{name}` | " + " | ".join(a.cells()) + " | " + " | ".join(b.cells()) + " |")
        lines += ["", f"Farthest from the ceiling: {w.instance.label()}, `E[τ]*` = {_short(w.record['optimum'])}, "
                      f"the best rule `{w.rule}` at efficiency {float(w.best):.4f}. Reproduce it from the written "
                      f"table: `{w.instance.command(relative)}`."]
    lines += ["", "## The worst instances", "",
              "| shape | drafting | instance | `E[τ]*` | best rule | its efficiency | model table |",
              "|---|---|---|---|---|---|---|"]
    for w, relative in zip(results.worst, tables):
        name = Path(relative).name
        lines.append(f"| {w.shape} | {w.scheme} | {w.instance.label()} | {_short(w.record['optimum'])} | "
                     f"`{w.rule}` | {float(w.best):.4f} | [{name}](optimality_cases/{name}) |")
    lines += ["", "Each table holds the pair's exact rows at every context of at most depth tokens (no default "
                  "row), so `specproof certify --model table --table FILE` with the same shape certifies any rule "
                  "on it, and `specproof optimum` proves the same `E[τ]*`.", ""]
    return "\n".join(lines)


def _intro_lines(results: OptimalityResults, command: str, machine: str) -> list[str]:
    records = results.records
    return ["# How far each rule is from the ceiling", "",
            f"Generated by `{command}` on {machine} "
            f"({len(records)} instances, cached in the report's store; the optimality part alone takes minutes).",
            "",
            "For each instance (a model pair, a fixed draft-tree shape, a fixed drafting scheme, vocabulary "
            f"{VOCAB}), `E[τ]*` is the exact best `E[τ]` any per-round lossless verifier could reach "
            "([docs/optimum.md](../docs/optimum.md)), proved by an exact primal point and an exact dual "
            "certificate; each built-in rule that claims the scheme and the shape is certified exactly "
            "(enumeration), and its **efficiency** is `E[τ] / E[τ]*`. "
            f"Optimum proved on {results.proved} of {len(records)} instances; "
            f"lossless rules above it: {len(results.above)}; claiming rules found lossy: {len(results.lossy)}. "
            f"On {results.zero} instances `E[τ]*` = 0 (no lossless rule accepts anything: the root's draft and "
            "target rows are disjoint); they have no efficiency and are left out of the summaries.", "",
            "`E[τ]*` is an oracle's bound: its verifier may read the model's rows off the drafted tree. On chains it "
            "is Block Verification's `E[τ]` (BV's Theorem 2); on trees no rule is known to reach it, and an "
            "efficiency below 1 there is a gap to this bound, not necessarily to the best tree-local rule. "
            "Greedy block verification is lossless over rounds through a modified target, not per round, and is "
            "left out.", "",
            "Instances: random rational pairs (`--model random-rational`, zero probability 0.25) with seeds "
            f"{RANDOM_SEEDS[0]}–{RANDOM_SEEDS[-1]}; the synthetic pair (`--model synthetic`) at the toy study's "
            "similarity and temperature sweeps, (ρ, τ_p = τ_q) ∈ {"
            + ", ".join(f"({rho:g}, {tau:g})" for rho, tau in SYNTHETIC) + "}, model seeds "
            + ", ".join(map(str, SYNTHETIC_SEEDS)) + ". Shapes: "
            + ", ".join(f"{name} (depth {d}, branching {b})" for name, (_, d, b) in SHAPES.items())
            + ". Drafting: i.i.d. and without replacement on every tree; Hu et al.'s `greedy-k` on every tree; "
              "SpecHub's `hub` (exactly two children a node) on the complete tree; `k-models` (child `i` from draft "
              "model `i`) on the complete tree and the multi-chain, with one draft model per child: the random "
              "rational pair draws the extra draft rows after its own (`--draft-models`), the synthetic pair adds "
              f"draft models of similarity ρ = {EXTRA_DRAFT_RHO:g} (`--rho ρ,{EXTRA_DRAFT_RHO:g}`). A chain draws "
              "the same trees under every scheme, so it has i.i.d. drafting only.", "",
            "**At `E[τ]*`** is the share of instances where the rule reaches the ceiling exactly (GR's flows, "
            f"solved numerically: within {GR_TOLERANCE:g}).", "",
            "![efficiency per rule, shape and drafting](optimality.png)", ""]


def _short(value: str) -> str:
    return value if len(value) <= 24 else f"{float(Fraction(value)):.6f}"


def _plot(records: list[dict], path: Path) -> None:
    """Efficiency per rule (a dot per instance: random rational pairs and the synthetic pair), one panel per shape
    and drafting scheme."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups()
    figure, axes = plt.subplots(len(groups), 1, figsize=(9, 2.2 * len(groups)), sharex=True,
                                squeeze=False)
    axes = axes[:, 0]
    for ax, (shape, scheme) in zip(axes, groups):
        group = _group(records, shape, scheme)
        names = _rule_order(group)
        for model, colour, offset in (("random-rational", "tab:blue", -0.15), ("synthetic", "tab:orange", 0.15)):
            xs, ys = [], []
            for i, name in enumerate(names):
                for r in _group(records, shape, scheme, model):
                    row = r["rules"].get(name)
                    if row is not None and row["efficiency"] is not None:
                        xs.append(float(Fraction(row["efficiency"])))
                        ys.append(i + offset)
            ax.scatter(xs, ys, s=8, alpha=0.5, color=colour, label=model)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.axvline(1.0, color="grey", linewidth=0.8)
        ax.set_title(f"{shape}, {scheme}", fontsize=9)
    axes[0].legend(fontsize=7, loc="lower left")
    axes[-1].set_xlabel("efficiency E[τ] / E[τ]* (1: at the exact ceiling)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
