"""``specproof prove``: losslessness proved (or refuted) for every model pair of a shape and vocabulary
(:mod:`exact.prove`, docs/proofs.md). Registered on :func:`simulator.cli.main.main`."""

from __future__ import annotations

import sys

import click

from simulator.cli.main import _command, _write_json, main
from simulator.drafting import DRAFTING
from simulator.errors import InvalidParameterError
from simulator.limits import DEFAULT_TIMEOUT, time_limit
from simulator.numeric import human_number
from simulator.trees import TOPOLOGIES, shape_from_options

#: Exit status per verdict (2 is every typed error's, as for the other commands).
EXIT = {"PROVED": 0, "REFUTED": 1, "UNDECIDED": 3}


@main.command()
@click.option("--verifier", required=True, help="built-in name (specproof list) or module:function")
@click.option("--topology", type=click.Choice(list(TOPOLOGIES)), default="complete", show_default=True)
@click.option("--depth", type=int, default=1, show_default=True, help="draft depth H")
@click.option("--branching", type=int, default=2, show_default=True, help="branching b")
@click.option("--parents", help="explicit parent list, e.g. '-1,0,0' (implies --topology explicit)")
@click.option("--vocab", type=int, default=2, show_default=True, help="vocabulary size V (every row is symbolic)")
@click.option("--drafting", type=click.Choice(list(DRAFTING)), default="iid", show_default=True)
@click.option("--json", "json_out", type=click.Path(dir_okay=False),
              help="write the proof certificate (every cell, its sign conditions and its identity) here")
@click.option("--case-out", type=click.Path(dir_okay=False), default="specproof-case.json", show_default=True,
              help="REFUTED: where the witness goes (a reproducer: specproof certify --case FILE)")
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True,
              help="wall-clock limit of the proof in seconds (0: none)")
@click.pass_context
def prove(ctx, verifier, topology, depth, branching, parents, vocab, drafting, json_out, case_out, timeout) -> None:
    """Prove a verifier lossless for EVERY model pair of this shape and vocabulary, or refute it with an exact
    witness. Exit 0 PROVED, 1 REFUTED, 3 UNDECIDED."""
    if vocab < 2:
        raise InvalidParameterError("vocab", f"must be ≥ 2, got {vocab}")
    from exact.prove import prove as run_proof  # sympy: imported by this command only (0.7 s at start-up)

    _, shape = shape_from_options(topology, depth, branching, parents)
    with time_limit(timeout):
        proof = run_proof(verifier, shape, drafting, vocab)
    where = (f"{shape.name} tree (parents {list(shape.parents)}), V = {vocab}, {drafting} drafting")
    click.echo(f"{proof.verdict}: {proof.verifier} on the {where}")
    click.echo(f"  {proof.reason}")
    click.echo(f"  {proof.paths} paths, {len(proof.cells)} cells, {proof.identities} identities checked, "
               f"{len(proof.space.names)} symbols, {proof.seconds:.1f} s")
    if proof.verdict == "PROVED":
        click.echo("  covers: every pair of draft and target rows at every context of this shape (not one model)")
    for e in proof.expectations:
        terms = len({key for key, _, _ in e.cells})
        click.echo(f"  E[τ] ({e.rows}): {'equals' if e.holds else 'DIFFERS FROM'} the closed form {e.form}, "
                   f"term by term ({terms} terms, {len(e.cells)} cells)")
    if proof.witness is not None:
        path = proof.witness.write(case_out)
        click.echo(f"  witness: TVD {human_number(proof.witness_tvd)} by the exact engine; reproducer {path} "
                   f"(specproof certify --case {path})")
    data = proof.to_json()
    data["command"] = _command(ctx)
    _write_json(json_out, data)
    sys.exit(EXIT[proof.verdict])


@main.command("prove-table")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default="reports/proofs.md", show_default=True)
@click.option("--case-timeout", type=float, default=600.0, show_default=True, help="seconds each case may take")
@click.option("--only", help="comma-separated verifiers: run only their cases")
@click.pass_context
def prove_table(ctx, out_path, case_timeout, only) -> None:
    """The proof table: every built-in rule the symbolic run can follow, PROVED or REFUTED on one-level trees and
    chains at V = 2 and 3, each control REFUTED with its witness, the others with the reason (reports/proofs.md)."""
    from pathlib import Path

    from exact.proof_table import cases, run_case, table_markdown

    chosen = [c for c in cases() if only is None or c.verifier in only.split(",")]
    rows = []
    for case in chosen:
        rows.append(run_case(case, case_timeout))
        r = rows[-1]
        click.echo(f"{r['verifier']:<24} {r['shape']:<22} V={r['vocab']} {r['drafting']:<20} {r['verdict']:<12} "
                   f"{r['seconds']:.1f} s",
                   err=True)
    text = table_markdown(rows, _command(ctx), case_timeout)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(text)
    click.echo(text)
