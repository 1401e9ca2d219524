"""``specproof optimum``: the exact best ``E[τ]`` any lossless verifier could reach on one instance, and each rule's
distance from it (:mod:`exact.prove.optimum`, docs/optimum.md). Registered on :func:`specproof.cli.group.main`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from exact.prove.optimum import MAX_COLUMNS, optimum, rule_row, verifier_module
from simulator.errors import SpecproofError
from simulator.jsonfile import write_text
from simulator.numeric import to_json_number
from simulator.verifiers import VERIFIERS
from specproof.cli.certificate_text import model_name, settings
from specproof.cli.group import main
from specproof.cli.option_groups import (LIMIT_OPTIONS, SCHEMES_OPTION, VERIFIER_KWARGS_OPTION, model_options,
                                         shape_options)
from specproof.cli.output import kept, write_output
from specproof.cli.params import COUNT_LIMIT, Output
from specproof.cli.requests import OptimumRequest
from specproof.cli.sections import section
from specproof.cli.specs import limited

#: Exit status: 0 the optimum proved exactly (primal and dual checked, equal), 4 HiGHS's value not settled exactly.
UNSETTLED_EXIT = 4


def _rule_row(model, drafter, name: str, best, max_executions: int, timeout: float, fn=None) -> dict:
    """One rule's row (:func:`exact.prove.optimum.rule_row`) as a dict. A built-in rule of the table whose
    certificate cannot be computed here (not defined on the shape, over a limit) is a row saying why; the rule
    the user named (``fn`` given: ``--verifier``) is what they asked to judge, so its error is the command's,
    exit 2, as in ``certify``."""
    try:
        with limited(max_executions, timeout):
            row = rule_row(model, drafter, name if fn is None else fn, best, name)
    except SpecproofError as err:
        if fn is not None:
            raise
        return {"verifier": name, "skipped": f"{err.field}: {err.message}"}
    out = {"verifier": name, "lossless": row.lossless, "expected_accepted": row.expected_accepted}
    if row.outside:
        out["outside"] = row.outside
    elif row.efficiency is not None:
        out["efficiency"] = row.efficiency
    if row.above_optimum:
        out["above_optimum"] = True
    return out


def _short(value) -> str:
    """An exact rational as ``num/den (float)``, or the float and its size where the fraction is long (in --json)."""
    text = str(value)
    if len(text) > 40:
        return f"{float(value):.9f} (exact: a fraction of {len(text)} characters, in --json)"
    return f"{text} ({float(value):.6f})"


@main.command("optimum")
@model_options()
@shape_options
@section("Rules compared",
         click.option("--verifier", help="one more rule to compare: a built-in name (specproof list) or "
                                         "module:function"),
         VERIFIER_KWARGS_OPTION,
         SCHEMES_OPTION,
         click.option("--rules/--no-rules", default=True, show_default=True,
                      help="certify each built-in rule that claims the drafting scheme, with its efficiency"))
@section("Limits",
         click.option("--max-columns", type=COUNT_LIMIT, default=MAX_COLUMNS, show_default=True,
                      help="refuse an LP whose column estimate V^(nodes−1)·nodes·V is larger (0 or inf: no limit)"),
         *LIMIT_OPTIONS)
@section("Output",
         click.option("--json", "json_out", type=Output(), help="write the optimum and the rules' rows here"),
         click.option("--verifier-out", type=Output(),
                      help="write the optimal π as a verifier module (certify --verifier MODULE:verify: LOSSLESS, "
                           "E[τ]*)"))
@click.pass_context
def optimum_cmd(ctx: click.Context, **options) -> None:
    """The exact ceiling E[τ]*: the best E[τ] any lossless verifier could reach on this model pair, shape and
    drafting (an LP solved by HiGHS, settled in exact rationals with a checked primal point and dual certificate),
    and each built-in rule's exact E[τ] and efficiency E[τ]/E[τ]*. Exit 0 proved exactly, 4 not settled."""
    request = OptimumRequest.from_click(ctx, **options)
    model = request.model.build()
    extra = request.subject.resolve() if request.subject.given else None  # a typo fails before the LP
    shape = request.shape.resolved(None)  # --verifier is a rule to compare: the drafting is --drafting's, or iid
    scheme = shape.drafting
    drafter, drafting = shape.drafter(model)
    max_executions, timeout = request.limits.max_executions, request.limits.timeout
    with limited(0, timeout):
        result = optimum(model, drafter, max_columns=request.max_columns or float("inf"))
    best = result.optimum
    verdict = "PROVED" if result.proved else "NOT SETTLED"
    click.echo(f"optimum: E[τ]* = {_short(best)}" if best is not None else "optimum: no exact value")
    click.echo(f"  model {model_name(model.describe())}, {settings(drafting)}")
    click.echo(f"  {verdict}: primal point {'checked' if result.primal_checked else 'NOT checked'} exactly, dual "
               f"certificate {'checked' if result.dual_checked else 'NOT checked'} exactly, objectives "
               f"{'equal' if result.closed else 'NOT equal'}; HiGHS: {result.float_optimum:.12f}")
    click.echo(f"  LP: {result.columns:,} columns, {result.rows:,} rows, {result.trees:,} blocks of drafted trees "
               "(same root paths); "
               f"{result.seconds:.2f} s")
    click.echo("  an oracle's bound: π may read the model's rows off the drafted tree, which a real verifier does "
               "not see (equal to the best tree-local rule on chains and at depth 1, an upper bound elsewhere)")
    names = [spec.name for spec in VERIFIERS.values() if scheme in spec.lossless_under] if request.rules else []
    rows = [_rule_row(model, drafter, name, best, max_executions, timeout) for name in names]
    if extra is not None:
        rows.append({**_rule_row(model, drafter, extra.name, best, max_executions, timeout, extra.fn),
                     **extra.claim_json(scheme)})
    for row in rows:
        if "skipped" in row:
            click.echo(f"  {row['verifier']:12s} not certified here: {row['skipped']}")
            continue
        if "outside" in row:
            click.echo(f"  {row['verifier']:12s} E[τ] = {_short(row['expected_accepted'])}; outside the LP: "
                       f"{row['outside']}")
            continue
        eff = f", efficiency {float(row['efficiency']):.4f}" if "efficiency" in row else ""
        flag = "" if row["lossless"] else " LOSSY"
        above = "  ABOVE THE OPTIMUM" if row.get("above_optimum") else ""
        click.echo(f"  {row['verifier']:12s} E[τ] = {_short(row['expected_accepted'])}{eff}{flag}{above}")
        if row.get("control_run"):
            click.echo(extra.control_note(scheme))
    out = {**result.to_json(), "config": {**model.describe(), **drafting},
           "rules": [{k: (to_json_number(v, "fraction") if k in ("expected_accepted", "efficiency") else v)
                      for k, v in row.items()} for row in rows]}
    verifier_out = request.verifier_out
    if verifier_out and result.primal_checked:
        described = settings({**model.describe(), **drafting})
        text = verifier_module(result, scheme, described)
        if kept(lambda: write_text(verifier_out, text, "verifier_out") or True):
            click.echo(f"  optimal verifier written to {verifier_out}: from its folder, certify --verifier "
                       f"{Path(verifier_out).stem}:verify with these options gives LOSSLESS and E[τ]*")
            out["verifier_out"] = str(verifier_out)
    write_output(request.json_out, out)
    if any(row.get("above_optimum") for row in rows):
        sys.exit(1)
    sys.exit(0 if result.proved else UNSETTLED_EXIT)
