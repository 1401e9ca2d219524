"""The proof table (``specproof prove-table``, ``reports/proofs.md``): every built-in rule the symbolic run can
follow, proved or refuted on small shapes (:func:`cases`), each case under a wall-clock limit."""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass

from simulator.drafting import draft_models_for
from simulator.drafting.shapes import branching_fits
from simulator.errors import SpecproofError, TimeLimitError
from simulator.limits import time_limit
from simulator.numeric import human_number
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS

from .prover import prove

#: The shapes in the table, by label: ``make_topology``'s arguments.
SHAPES = {
    "one level, 2 children": {"name": "complete", "depth": 1, "branching": 2},
    "chain, depth 1": {"name": "chain", "depth": 1, "branching": 1},
    "chain, depth 2": {"name": "chain", "depth": 2, "branching": 1},
    "explicit -1,0,0,1": {"name": "explicit", "parents": (-1, 0, 0, 1)},
    "two paths of 1 token": {"name": "multi-chain", "depth": 1, "branching": 2},
    "complete, b = 2, depth 3": {"name": "complete", "depth": 3, "branching": 2},
}
TREE_RULES = ("tv-sps", "tv-rrs", "tv-rrsw", "tv-det", "dyspec", "trv", "trv-iid", "lv-sps", "lv-rrs", "match")
CHAIN_RULES = ("bv", "greedy-bv", "gbv")
#: the token-verification lifts proved by lifting (exact/prove/lifting.py) beside their cell search
LIFTED_RULES = ("tv-sps", "tv-rrs", "tv-rrsw", "tv-det", "dyspec")
FIXED_SCHEMES = ("iid", "without-replacement", "almost-greedy", "top-k", "hub", "k-models")  # the schemes of a fixed shape


@dataclass(frozen=True)
class Case:
    verifier: str
    shape: str
    vocab: int
    drafting: str = "iid"
    expect: str = "PROVED"
    method: str = "cells"  # or "lifting" (exact.prove.prover.METHODS)


def cases() -> list[Case]:
    """The table's cases: lossless rules at V = 2 and 3 on one-level trees and chains of depth 1 and 2 (depth 2 at
    V = 2), under every fixed-shape drafting scheme each is lossless under, GBV on two paths, the controls where
    they are lossy (``bug-gbv-clipped`` needs V = 3: at V = 2 its clipped ranking orders the tokens as the
    unclipped one does), and the rules the symbolic run cannot follow; then the token-verification lifts by
    lifting at V = 3, on one level (beside its cell search) and on the complete tree of branching 2 and depth 3,
    with two controls refuted there.

    Each negative control is refuted with its witness, the rules the run cannot follow are listed with the reason,
    and the token-verification lifts are proved by lifting too (:mod:`exact.prove.lifting`), beside their cell search
    and on a tree the cell search cannot reach.
    """
    out = []
    for rule in TREE_RULES:
        for scheme in _schemes(rule):
            for shape, vocabs in (("one level, 2 children", (2, 3)), ("chain, depth 1", (2, 3)),
                                  ("chain, depth 2", (2,))):
                out += [Case(rule, shape, v, scheme) for v in vocabs if _fits(shape, scheme)]
    for rule in CHAIN_RULES:
        for scheme in _schemes(rule):
            out += [Case(rule, "chain, depth 1", v, scheme) for v in (2, 3)] + [Case(rule, "chain, depth 2", 2, scheme)]
    out += [Case("bug-residual-q", "one level, 2 children", 2, expect="REFUTED"),
            Case("bug-accept-all", "one level, 2 children", 2, expect="REFUTED"),
            Case("bug-match-per-row", "one level, 2 children", 2, expect="REFUTED"),
            Case("bug-trv-insertion-order", "explicit -1,0,0,1", 2, "without-replacement", expect="REFUTED"),
            Case("trv", "explicit -1,0,0,1", 2, "without-replacement"),
            Case("bug-greedy-bv-nomod", "chain, depth 2", 2, expect="REFUTED")]
    out += [Case(rule, "one level, 2 children", 2, expect="UNDECIDED") for rule in ("tv-kseq", "lv-kseq")]
    out += [Case(rule, "one level, 2 children", 2, expect="error") for rule in
            ("tv-opt", "lv-opt", "tv-gr", "lv-gr", "bug-dyspec-printed")]
    out += [Case("gbv", "two paths of 1 token", v) for v in (2, 3)]
    out += [Case("bug-gbv-clipped", "two paths of 1 token", 3, expect="REFUTED")]
    for rule in LIFTED_RULES:  # by lifting: one level at V = 3 beside its cell search, and a tree it cannot reach
        for scheme in _schemes(rule):  # (lifting reads one draft row a node: not under k-models)
            out += [Case(rule, shape, 3, scheme, method="lifting")
                    for shape in ("one level, 2 children", "complete, b = 2, depth 3")
                    if _fits(shape, scheme) and draft_models_for(scheme, make_topology(**SHAPES[shape])) == 1]
    out += [Case(rule, "complete, b = 2, depth 3", 3, expect="REFUTED", method="lifting")
            for rule in ("bug-residual-q", "bug-accept-all")]
    # tv-hu (greedy drafting): at V = 3 its identity fails only on cells whose non-linear sign conditions contradict
    # each other, which the prover shows empty from the cells' equalities (docs/rules.md)
    out += [Case("tv-hu", shape, 2, "almost-greedy") for shape in ("one level, 2 children", "chain, depth 1")]
    out += [Case("tv-hu", "one level, 2 children", 3, "almost-greedy", method="lifting")]
    # SpecHub, and at V = 3 by lifting: its pair law p(a)p(x)/(1 − p(a)) leaves non-linear cells the prover shows
    # empty from their equalities
    out += [Case("spechub", shape, v, "hub", method=method) for shape, v, method in
            (("one level, 2 children", 2, "cells"), ("one level, 2 children", 2, "lifting"),
             ("complete, b = 2, depth 3", 2, "lifting"), ("one level, 2 children", 3, "lifting"))]
    # Khisti et al.'s selection among two draft models (two symbolic draft rows; at V = 3 the search is too large)
    out += [Case("khisti-is", "one level, 2 children", 2, "k-models")]
    return out


def _fits(shape: str, scheme: str) -> bool:
    """Whether the shape gives every inner node the number of children the scheme drafts, where it fixes one."""
    return branching_fits(scheme, make_topology(**SHAPES[shape]).parents)


def _schemes(rule: str) -> list[str]:
    return [s for s in VERIFIERS[rule].lossless_under if s in FIXED_SCHEMES]


def run_case(case: Case, seconds: float) -> dict:
    """One case: verdict, counts, witness TVD, time (or the typed error / the time limit)."""
    topology = make_topology(**SHAPES[case.shape])
    started = time.perf_counter()
    row = {"verifier": case.verifier, "shape": case.shape, "vocab": case.vocab, "drafting": case.drafting,
           "expect": case.expect, "method": case.method}
    try:
        with time_limit(seconds):
            proof = prove(case.verifier, topology, case.drafting, case.vocab, method=case.method)
        row.update(verdict=proof.verdict, paths=proof.paths, cells=len(proof.cells), identities=proof.identities,
                   symbols=len(proof.space.names), reason=proof.reason,
                   expectation="; ".join(f"{'=' if e.holds else '≠'} {e.form.split(' (')[-1].rstrip(')')}"
                                         f"{' (context-independent rows)' if e.rows != 'every pair of rows' else ''}"
                                         for e in proof.expectations),
                   witness_tvd=None if proof.witness_tvd is None else human_number(proof.witness_tvd))
    except TimeLimitError:
        row.update(verdict="NOT FINISHED", reason=f"over the {seconds:g}-s limit")
    except SpecproofError as err:
        row.update(verdict="error", reason=str(err))
    row["seconds"] = time.perf_counter() - started
    return row


def table_markdown(rows: list[dict], command: str, seconds: float) -> str:
    lines = ["# Proofs for every model pair (`specproof prove`)", "",
             f"Command: `{command}`. Machine: {platform.machine()}, Python {platform.python_version()}; each case "
             f"under a {seconds:g}-s limit.", "",
             "PROVED: the rule is lossless for **every** pair of draft and target rows at every context of the shape "
             "(the rows are symbols on the simplex; zeros included), under the drafting scheme named. REFUTED: a "
             "cell of the space where the identity fails, with an exact rational witness that the ordinary exact "
             "engine certifies LOSSY (its TVD below). UNDECIDED: a failing cell without a witness (its non-linear "
             "conditions may have no solution). error: a rule the symbolic run cannot follow, with the reason.", "",
             "E[τ] (chains): the rule's expected accepted length checked, term by term on every cell, against its "
             "paper's closed form (`=` holds for every pair of rows; docs/proofs.md): Leviathan et al.'s for token "
             "verification (and `(1 − α^{γ+1})/(1 − α)` on context-independent rows), Sun et al.'s Lemma 3 for block "
             "verification and the rules that reduce to it on a chain, Lemma 9 for greedy block verification.", "",
             "Method `lifting` (docs/proofs.md, \"Proofs by lifting\"): the rule's single step proved for every "
             "branching of the shape (its paths, cells and symbols are the single step's), then lifted by the "
             "token-tree argument; PROVED then covers every tree whose branchings are among the shape's, at that V "
             "and scheme. `cells`: the whole round run symbolically.", "",
             "| verifier | shape | V | drafting | method | verdict | expected | paths | cells | symbols | witness TVD "
             "| E[τ] | time (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['verifier']} | {r['shape']} | {r['vocab']} | {r['drafting']} | {r.get('method', 'cells')} "
                     f"| **{r['verdict']}** | "
                     f"{r['expect']} | {r.get('paths', '')} | {r.get('cells', '')} | {r.get('symbols', '')} | "
                     f"{r.get('witness_tvd') or ''} | {r.get('expectation', '')} | {r['seconds']:.1f} |")
    notes = [r for r in rows if r["verdict"] in ("error", "UNDECIDED", "NOT FINISHED")]
    if notes:
        lines += ["", "## Reasons", ""]
        lines += [f"- {r['verifier']} ({r['shape']}, V = {r['vocab']}): {r['verdict']} — {r['reason']}" for r in notes]
    return "\n".join(lines) + "\n"
