"""The commands that search and gate: ``hunt`` (instance search to the first loss), ``gate`` (a battery against
committed baselines, for CI) and ``zoo`` (the mutation zoo report). Registered on :func:`specproof.cli.group.main`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from exact.subject import Subject
from simulator.drafting.aded import AdedConfig
from simulator.drafting.drafter_registry import DrafterOptions
from simulator.errors import InvalidParameterError, TimeLimitError
from simulator.jsonfile import check_output_dir, check_output_file
from simulator.numeric import ARITHMETICS, human_number
from simulator.usercode import require
from simulator.verifiers.registry import check_arithmetic_for
from specproof.cli.certificate_text import certificate_lines, echo_control_note
from specproof.cli.group import main
from specproof.cli.option_groups import (json_option, kernel_options, model_options, shape_options, shrink_time_option,
                                         verifier_options)
from specproof.cli.output import command_line, kept, shrunk, write_output
from specproof.cli.params import JOBS, MAX_SECONDS, SECONDS_LIMIT, SEED, Output, Real
from specproof.cli.progress import StageBars, progress_bar
from specproof.cli.requests import HuntRequest
from specproof.cli.sections import section
from specproof.gate.hunt import Fixed
from specproof.gate.hunt import hunt as run_hunt


@main.command()
@model_options()
@shape_options
@verifier_options
@kernel_options
@section("Search",
         click.option("--time-limit", type=Real(0, MAX_SECONDS, min_open=True, inf_ok=True), default=60.0,
                      show_default=True, help="seconds to search (inf: until a loss is found)"),
         click.option("--hunt-seed", type=SEED, default=0, show_default=True, help="seed of the search itself"),
         click.option("--maximize", type=click.Choice(["tvd"]),
                      help="search the whole --time-limit for the pair of largest exact TVD (a lossy-by-design "
                           "rule's worst case at its knobs) instead of stopping at the first loss"),
         click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True))
@section("Reproducer",
         shrink_time_option(),
         click.option("--case-out", type=Output(), default="specproof-case.json", show_default=True,
                      help="where the shrunk reproducer goes"))
@json_option("the result")
@click.pass_context
def hunt(ctx: click.Context, **options) -> None:
    """Search model pairs, vocabularies, shapes and drafting schemes (then local moves on rows) for a pair on which
    the verifier or kernel is lossy. Options given are held fixed, the others searched. Exit 1 on a loss (shrunk
    reproducer written), 0 when the time limit ends without one."""
    request = HuntRequest.from_click(ctx, **options)
    what = request.subject.resolve()
    scheme = request.shape.resolved(what).drafting
    control = "drafting" in request.fixed and what.control_run(scheme)
    check_arithmetic_for(what.name, request.arithmetic)
    with progress_bar(None, f"hunt {what.name}", "pair") as bar:
        result = run_hunt(what, request.time_limit, _fixed(request, what), request.hunt_seed, request.arithmetic,
                          request.shrink_time, lambda n: bar.update(1), request.maximize)
    out = {"verifier": what.name, "subject": what.description, **result.to_json(),
           "claimed_schemes": list(what.schemes), "control_run": control}
    if result.found is None and result.pairs == 0:
        raise TimeLimitError("time_limit", f"no model pair was certified within {request.time_limit:g} s, so there "
                                           "is no verdict: raise --time-limit")
    if request.maximize is not None:
        _largest(request, what, result, out)
    if result.found is None:
        click.echo(f"{what.name}: no loss found")
        if control:
            echo_control_note(what, scheme)
        click.echo(f"  covers: {result.coverage()} — these pairs only, not every pair")
        write_output(request.json_out, out)
        sys.exit(0)
    click.echo(f"{what.name}: LOSSY on pair {result.pairs} of the hunt ({result.seconds:.1f} s)")
    if control:
        echo_control_note(what, scheme)
    for line in certificate_lines(result.found_certificate):
        click.echo(line)
    click.echo(f"  covers: {result.coverage()}")
    out["reproducer"] = shrunk(result.found, what, request.shrink_time, request.case_out)
    write_output(request.json_out, out)
    sys.exit(1)


def _largest(request: HuntRequest, what: Subject, result, out: dict) -> None:
    """``hunt --maximize tvd``'s report: the pair of largest exact TVD, its certificate and its case (unshrunk:
    shrinking would lower the TVD); exit 1 when that TVD is positive (a loss), else 0."""
    cert = result.found_certificate
    click.echo(f"{what.name}: the largest TVD of {result.pairs} pair(s) ({result.seconds:.1f} s) is "
               f"{human_number(cert.tvd)}")
    for line in certificate_lines(cert):
        click.echo(line)
    click.echo(f"  covers: {result.coverage()} — the largest TVD on these pairs, a lower bound on the worst case")
    path = kept(lambda: result.found.write(request.case_out))
    if path:
        click.echo(f"  that pair's case: {path} (specproof certify --case {path})")
        out["reproducer"] = str(path)
    write_output(request.json_out, out)
    sys.exit(1 if cert.tvd else 0)


def _fixed(request: HuntRequest, what: Subject) -> Fixed:
    """The hunt's fixed options: those given on the command line."""
    fixed, model = request.fixed, request.model
    shape = request.shape.resolved(what)
    table = model.build() if model.model_kind == "table" else None
    topology = shape.tree()[1] if fixed & {"topology", "depth", "branching", "parents"} else None
    options = None
    if fixed & {"budget", "threshold", "max_depth"}:
        options = DrafterOptions(shape.budget, shape.threshold, shape.max_depth, AdedConfig())
    pick = lambda name, value: value if name in fixed else None  # noqa: E731
    several = (table.draft_models if table is not None else len(model.rho) if isinstance(model.rho, tuple)
               else pick("draft_models", model.draft_models))  # the draft models held fixed
    return Fixed(pick("model_kind", model.model_kind), table, pick("seed", model.seed), pick("vocab", model.vocab),
                 topology, pick("drafting", shape.drafting), options, pick("rho", model.rho),
                 pick("tau_p", model.tau_p), pick("tau_q", model.tau_q), several)


@main.command()
# the options in the order they were declared before sections: command_line() records a run in this order
@section("Config",
         click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
                      help="specproof.toml: what is checked, the battery, the expected verdicts (docs/gate.md)"))
@section("Run",
         click.option("--jobs", type=JOBS, default=1, show_default=True,
                      help="checks certified at once, each in a process of its own"))
@section("Output",
         click.option("--junit", "junit_path", type=Output(), help="write JUnit XML here"),
         click.option("--summary", "summary_path", type=Output(),
                      help="write the Markdown summary here  [default: $GITHUB_STEP_SUMMARY when set]"))
@section("Config",
         click.option("--update-baselines", is_flag=True, help="rewrite the baselines file with the E[τ] of this run"),
         click.option("--fresh", is_flag=True,
                      help="certify everything again, ignoring results kept in the state folder"))
@section("Run",
         click.option("--check-timeout", type=SECONDS_LIMIT, default=None,
                      help="seconds each check may take, its instances and hunt together (0 or inf: no limit)  "
                           "[default: the config's check_seconds, 600]"))
@click.pass_context
def gate(ctx, config_path, jobs, junit_path, summary_path, update_baselines, fresh, check_timeout) -> None:
    """The regression gate: certify every check of the config on its battery, compare exact E[τ] with the
    baselines, hunt. Exit 0 when every check holds, 1 on a regression, 2 on a bad config or output path, or when
    a check erred and none regressed (every check runs and is reported either way)."""
    import time

    from simulator.jsonfile import write_text
    from specproof.gate.runner import BASELINES_FIELD, load_config, run_gate, verdict, write_baselines
    from specproof.reports.gate_summary import junit, markdown

    start = time.monotonic()
    summary_field = "summary" if summary_path else "summary ($GITHUB_STEP_SUMMARY)"
    summary_path = summary_path or os.environ.get("GITHUB_STEP_SUMMARY") or None
    check_output_file(junit_path, "junit")
    check_output_file(summary_path, summary_field)
    config = load_config(config_path)
    if update_baselines:
        check_output_file(config.resolve("baselines"), BASELINES_FIELD)
    with progress_bar(None, "gate", "instance") as bar:
        def total(n: int) -> None:
            bar.total = n
            bar.refresh()
        outcomes = run_gate(config, jobs, fresh, bar.update, total, record_errors=True,
                            warn=lambda message: click.echo(f"warning: {message}", err=True),
                            check_seconds=check_timeout)
    written = update_baselines and kept(lambda: write_baselines(config.resolve("baselines"), outcomes))
    if written:
        for outcome in outcomes:
            for case in outcome.cases:
                if case.error is None:
                    case.baseline, case.moved = case.figures(outcome.check.tvd_budget is not None), None
    text = markdown(outcomes, command_line(ctx))
    click.echo(text)
    for outcome in outcomes:
        for error in outcome.errors:
            click.echo(f"error: check {outcome.check.name!r}: {error}", err=True)
    if summary_path:
        kept(lambda: write_text(summary_path, text, summary_field))
    if junit_path:
        kept(lambda: write_text(junit_path, junit(outcomes, time.monotonic() - start), "junit"))
    if written:
        click.echo(f"baselines written to {written}")
    sys.exit(verdict(outcomes))


@main.command()
@click.option("--out", "out_dir", type=Output(folder=True), default="specproof-report", show_default=True,
              help="folder for mutation_zoo.md/json (the committed ones: --out reports)")
@click.option("--jobs", type=JOBS, default=1, show_default=True, help="worker processes for the gate's battery")
@click.option("--loops-only", is_flag=True, help="recompute only the loop section (a minute), keeping the mutants' "
                                                  "rows of the existing OUT/mutation_zoo.json")
@click.option("--designs-only", is_flag=True, help="recompute the mutants' Monte Carlo columns from the reference "
                                                    "instances stored in OUT/mutation_zoo.json, and the loop section "
                                                    "(minutes), keeping the gate, default-pair and hunt columns")
@click.pass_context
def zoo(ctx, out_dir: str, jobs: int, loops_only: bool, designs_only: bool) -> None:
    """The mutation zoo: every mutant through the gate, with exact TVD, default-pair share, hunt time, shrunk
    size and the pass probability of five Monte Carlo test designs; and the bug twins of whole generation loops
    with their exact TVD and the same designs. Exit 1 when the gate misses a mutant."""
    from specproof.gate.zoo import write_designs, write_loop_section, write_zoo_report

    check_output_dir(out_dir, "out")
    if loops_only and designs_only:
        raise InvalidParameterError("designs_only", "recomputes the loop section too: give --loops-only or "
                                                    "--designs-only, not both")
    ticks = StageBars()
    try:
        if loops_only or designs_only:
            option = "--loops-only" if loops_only else "--designs-only"
            for module in ("torch", "transformers"):
                require(module, f"zoo {option}", "loops_only" if loops_only else "designs_only")
            (write_loop_section if loops_only else write_designs)(Path(out_dir), command_line(ctx), ticks)
            ok = True
        else:
            ok = write_zoo_report(Path(out_dir), command_line(ctx), jobs, ticks)
    finally:
        ticks.close()
    click.echo(f"written to {out_dir}/mutation_zoo.md")
    sys.exit(0 if ok else 1)
