"""``specproof prove``: losslessness proved (or refuted) for every model pair of a shape and vocabulary
(:mod:`exact.prove.prover`, docs/proofs.md). Registered on :func:`specproof.cli.group.main`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from simulator.drafting import DRAFTING
from simulator.jsonfile import check_output_dir, check_output_file, write_text
from simulator.limits import time_limit
from simulator.numeric import human_number
from simulator.trees import TOPOLOGIES
from exact.subject import parse_schemes, subject
from specproof.cli.group import main
from specproof.cli.option_groups import SCHEMES_OPTION, timeout_option
from specproof.cli.output import command_line, kept, write_output
from specproof.cli.params import COUNT_LIMIT, SECONDS_LIMIT, TREE_BRANCHING, TREE_DEPTH, Output, Whole
from specproof.cli.progress import progress_bar
from specproof.cli.requests import tree_of
from specproof.cli.sections import section

#: Exit status per verdict (2 is every typed error's and 3 an internal error's, as for the other commands).
EXIT = {"PROVED": 0, "REFUTED": 1, "UNDECIDED": 4}
#: ``--max-cells``'s default: runs of the symbolic program plus cells decided, about five minutes on one core of a
#: 2-core machine. Every case of the proof table fits (the largest, lv-rrs on a one-level tree at V = 3, is 14,774);
#: the table's cases decide 27 to 94 a second on this project's 2-core machine and 74 to 280 on the one that wrote
#: reports/proofs.md, so this is 3 to 9 minutes at the slow end (docs/proofs.md, "Size and progress").
DEFAULT_MAX_CELLS = 15_000
#: ``--probes``'s default: random exact points the exact engine certifies before the symbolic run (milliseconds
#: each on the shapes ``prove`` takes).
DEFAULT_PROBES = 32


class _Progress:
    """The proof's progress on standard error: its size estimate once made, then a bar per stage (runs of the
    symbolic program; cells decided, with the regions still open)."""

    def __init__(self) -> None:
        self.stage: str | None = None
        self.bar = None
        self.shown = 0

    def __call__(self, tally) -> None:
        if tally.stage != self.stage:
            self.close()
            self.stage = tally.stage
            if tally.stage == "paths" and tally.estimate is not None:
                limit = "no limit" if tally.max_cells is None else f"limit {tally.max_cells:,} (--max-cells)"
                click.echo(f"size: {tally.describe_estimate()}; {limit}", err=True)
            total = round(tally.estimate[0]) if tally.stage == "paths" and tally.estimate is not None else None
            self.bar = progress_bar(total, tally.stage, "run" if tally.stage == "paths" else "cell")
            self.shown = tally.cells
        if tally.cells > self.shown:
            self.bar.update(tally.cells - self.shown)
            self.shown = tally.cells
            if tally.stage != "paths":
                self.bar.set_postfix_str(f"open {tally.open:,}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@main.command()
# the options in the order they were declared before sections: command_line() records a run in this order
@section("Verifier",
         click.option("--verifier", required=True, help="built-in name (specproof list) or module:function"))
@section("Shape, vocabulary and drafting",
         click.option("--topology", type=click.Choice(list(TOPOLOGIES)), default="complete", show_default=True),
         click.option("--depth", type=TREE_DEPTH, default=1, show_default=True, help="draft depth H"),
         click.option("--branching", type=TREE_BRANCHING, default=2, show_default=True, help="branching b"),
         click.option("--parents", help="explicit parent list, e.g. '-1,0,0' (implies --topology explicit)"),
         click.option("--vocab", type=Whole(2), default=2, show_default=True,
                      help="vocabulary size V (every row is symbolic)"),
         click.option("--drafting", type=click.Choice(list(DRAFTING)), default=None,
                      help="the drafting scheme proved under: one the verifier claims  [default: iid where claimed, "
                           "else the first claimed]"))
@section("Verifier", SCHEMES_OPTION)
@section("Output",
         click.option("--json", "json_out", type=Output(),
                      help="write the proof certificate (every cell, its sign conditions and its identity) here"),
         click.option("--case-out", type=Output(), default="specproof-case.json", show_default=True,
                      help="REFUTED: where the witness goes (a reproducer: specproof certify --case FILE)"))
@section("Limits",
         timeout_option("proof", "; when it fires, what was decided so far is printed with the error"),
         click.option("--max-cells", type=COUNT_LIMIT, default=DEFAULT_MAX_CELLS, show_default=True,
                      help="most runs of the symbolic program plus cells decided (estimated up front, then counted; "
                           "0 or inf: no limit)"))
@section("Proof",
         click.option("--probes", type=Whole(0), default=DEFAULT_PROBES, show_default=True,
                      help="random exact points certified by the exact engine before the symbolic run (0: none)"),
         click.option("--method", type=click.Choice(["auto", "lifting", "cells"]), default="auto", show_default=True,
                      help="lifting: prove a token-verification lift's single step for every branching of the shape "
                           "and lift it to every tree of those branchings; cells: run the whole round symbolically; "
                           "auto: lifting where the verifier is a lift, cells elsewhere"))
@click.pass_context
def prove(ctx, verifier, topology, depth, branching, parents, vocab, drafting, schemes, json_out, case_out, timeout,
          max_cells, probes, method) -> None:
    """Prove a verifier lossless for EVERY model pair of this shape and vocabulary, or refute it with an exact
    witness. Exit 0 PROVED, 1 REFUTED, 4 UNDECIDED, 2 a typed error (a size or time limit included)."""
    check_output_file(json_out, "json")
    check_output_dir(Path(case_out).parent, "case_out")  # made if missing
    from exact.prove.proof import ESTIMATE_DESCENTS, Tally  # sympy: imported by this command only (0.7 s at start-up)
    from exact.prove.prover import prove as run_proof

    _, shape = tree_of(topology, depth, branching, parents)
    what = subject(verifier, "verifier", parse_schemes(schemes))  # the schemes it claims: --schemes, its attribute
    drafting = drafting or what.default_scheme()
    what.require_claimed(drafting)
    progress = _Progress()
    tally = Tally(max_cells or None, ESTIMATE_DESCENTS, progress)
    try:
        with time_limit(timeout, tally.describe):
            proof = run_proof(what, shape, drafting, vocab, probes, tally, method)
    finally:
        progress.close()
    drafts = proof.space.draft_models  # k-models: a symbolic row per draft model (exact/prove/prover.py)
    several = f", {drafts} symbolic draft models" if drafts > 1 else ""
    where = (f"{shape.name} tree (parents {list(shape.parents)}), V = {vocab}{several}, {drafting} drafting")
    lifted = proof.lifting
    if lifted is not None and proof.verdict == "PROVED":
        click.echo(f"PROVED by lifting: {lifted.covers} ({proof.verifier}; asked: the {where})")
    else:
        click.echo(f"{proof.verdict}{' by lifting' if lifted is not None else ''}: {proof.verifier} on the {where}")
    click.echo(f"  {proof.reason}")
    click.echo(f"  {proof.paths} paths, {len(proof.cells)} cells, {proof.identities} identities checked, "
               f"{len(proof.space.names)} symbols, {proof.seconds:.1f} s")
    if lifted is not None:
        for claim in lifted.claims:
            click.echo(f"  claim {claim.describe()}: {claim.verdict} ({claim.paths} paths, {len(claim.cells)} cells, "
                       f"{claim.seconds:.1f} s)")
        click.echo("  hypotheses of the token-tree argument (docs/proofs.md, \"Proofs by lifting\"):")
        for h in lifted.hypotheses:
            click.echo(f"    - {h.name}: {h.statement} [checked: {h.checked}]")
    if proof.verdict == "PROVED":
        click.echo("  covers: every pair of draft and target rows at every context " +
                   (f"of {lifted.covers} (this shape's depth and any other)" if lifted is not None
                    else "of this shape (not one model)"))
    for e in proof.expectations:
        terms = len({key for key, _, _ in e.cells})
        click.echo(f"  E[τ] ({e.rows}): {'equals' if e.holds else 'DIFFERS FROM'} the closed form {e.form}, "
                   f"term by term ({terms} terms, {len(e.cells)} cells)")
    if proof.stops:
        zero = sum(1 for _, c in proof.stopped if c.holds)
        click.echo(f"  {proof.stops} path(s) stop at a random choice the rule cannot make; their regions: "
                   f"{len(proof.stopped)} cell(s), {zero} where the probability of reaching it is zero (a branch "
                   f"never taken), {len(proof.stopped) - zero} where it may not be")
    if proof.witness is not None:
        path = kept(lambda: proof.witness.write(case_out)) or "(not written)"
        found = (f"TVD {human_number(proof.witness_tvd)}" if proof.failure is None
                 else f"the rule fails there ({proof.failure})")
        click.echo(f"  witness: {found} by the exact engine; reproducer {path} (specproof certify --case {path})")
    data = proof.to_json()
    if drafts > 1:
        data["config"] = {**data["config"], "draft_models": drafts}
    data["command"] = command_line(ctx)
    write_output(json_out, data)
    sys.exit(EXIT[proof.verdict])


@main.command("prove-table")
@click.option("--out", "out_path", type=Output(), default="reports/proofs.md", show_default=True)
@click.option("--case-timeout", type=SECONDS_LIMIT, default=600.0, show_default=True,
              help="seconds each case may take (0 or inf: no limit)")
@click.option("--only", help="comma-separated verifiers: run only their cases")
@click.pass_context
def prove_table(ctx, out_path, case_timeout, only) -> None:
    """The proof table: every built-in rule the symbolic run can follow, PROVED or REFUTED on one-level trees and
    chains at V = 2 and 3, each control REFUTED with its witness, the others with the reason (reports/proofs.md)."""
    from exact.prove.proof_table import cases, run_case, table_markdown

    check_output_dir(Path(out_path).parent, "out")  # made if missing
    chosen = [c for c in cases() if only is None or c.verifier in only.split(",")]
    rows = []
    for case in chosen:
        rows.append(run_case(case, case_timeout))
        r = rows[-1]
        click.echo(f"{r['verifier']:<24} {r['shape']:<22} V={r['vocab']} {r['drafting']:<20} {r['verdict']:<12} "
                   f"{r['seconds']:.1f} s",
                   err=True)
    text = table_markdown(rows, command_line(ctx), case_timeout)
    click.echo(text)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    kept(lambda: write_text(out_path, text, "out"))
