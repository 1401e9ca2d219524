"""``specproof mc``, ``generate``, ``report``, ``dynamic`` and ``theorems``: Monte Carlo, the main report and the
papers' claims (docs/cli/sample.md)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import click
from tqdm import tqdm

from exact.generation_law import generation_law
from exact.recursions.token_dp import DP_RULES
from exact.size import SizeEstimate, estimate_generation
from simulator.errors import InvalidParameterError, SpecproofError
from simulator.jsonfile import check_output_dir, check_output_file, write_json, write_text
from simulator.limits import DEFAULT_MAX_EXECUTIONS, time_limit
from simulator.models import SyntheticModel
from simulator.montecarlo.engine import MAX_TRIALS, monte_carlo
from simulator.montecarlo.generations import run_generations
from simulator.numeric import ARITHMETICS, human_number, to_json_number
from simulator.verifiers.registry import check_arithmetic_for, check_pairing
from specproof.cli.certificate_text import echo_control_note, model_name, settings, several_drafts, verdict
from specproof.cli.checks import check_device, check_scheduler
from specproof.cli.group import main
from specproof.cli.option_groups import (json_option, limit_options, model_options, shape_options, timeout_option,
                                         verifier_options)
from specproof.cli.output import command_line, kept, write_output
from specproof.cli.params import COUNT_LIMIT, JOBS, SEED, TREE_BRANCHING, TREE_DEPTH, Output, Real, Whole
from specproof.cli.progress import StageBars, mass_bar, progress_bar
from specproof.cli.requests import GenerateRequest, McRequest
from specproof.cli.sections import section
from specproof.cli.specs import first_seed_kept, limited
from specproof.reports.certification import (Planned, certification_table, estimate_table, plan_table, table_json,
                                             table_markdown)
from specproof.reports.dynamic import write_dynamic_report
from specproof.reports.optimality import write_optimality_report
from specproof.reports.theorems import CHECKS, run_checks, theorems_markdown
from specproof.reports.toy_study import write_study_report
from specproof.study import PAPER_SEEDS, PAPER_TRIALS, Store, paper_cells, run_cells

#: The quick toy study (``specproof report`` without ``--full``): Table 1's 22 cells × 3 model seeds × 1,000
#: trials, and of the exact-law recursions only token verification's (seconds each at V = 15, H = 4; the others'
#: pass their execution limit there after a minute or two each, so only ``--full`` attempts them).
QUICK_TABLES = (1,)
QUICK_SEEDS, QUICK_TRIALS = 3, 1000
QUICK_LAW_RULES = DP_RULES
#: ``theorems --scale``'s largest: a thousand times every check's default instance count, hours of work
MAX_SCALE = 1000.0


@main.command()
# the options in the order they were declared before sections: command_line() records a run in this order
@section("Output",
         click.option("--out", "out_dir", type=Output(folder=True), default="specproof-report", show_default=True,
                      help="folder for the reports (the committed ones are made with --full --out reports)"))
@section("Study",
         click.option("--full", is_flag=True,
                      help="the paper's scale: 20 seeds, Table 1 at 1e6 and ablations at 1e5 trials"),
         click.option("--tables", default=None,
                      help="comma-separated paper tables (1,4-15); quick default: 1; --full: all"),
         click.option("--seeds", "study_seeds", type=Whole(1), default=None, help="study: model seeds per cell"),
         click.option("--trials", "study_trials", type=Whole(2, MAX_TRIALS), default=None,
                      help="study: trials per seed"),
         click.option("--verifiers", default=None,
                      help="comma-separated: run only these methods' cells (others: not run)"),
         click.option("--jobs", type=JOBS, default=2, show_default=True, help="worker processes for the study"),
         click.option("--scheduler", default=None,
                      help="run the study's cells on Dask: 'local' (a LocalCluster of --jobs workers) or a "
                           "scheduler address"),
         click.option("--device", default=None, help="the study's batched rounds with torch on this device (cpu, "
                                                     "cuda); default: numpy. The same records either way"),
         click.option("--no-run", is_flag=True,
                      help="write the reports from what the store holds, computing nothing new"),
         click.option("--store", "store_dir", type=Output(folder=True), default=None,
                      help="resumable cell store (default OUT/store)"))
@section("Certification table",
         click.option("--cert-vocab", type=Whole(2), default=3, show_default=True,
                      help="certification table: vocabulary"),
         click.option("--cert-depth", type=TREE_DEPTH, default=2, show_default=True,
                      help="certification table: depth"),
         click.option("--cert-branching", type=TREE_BRANCHING, default=2, show_default=True,
                      help="certification table: branching"),
         click.option("--cert-seed", type=SEED, default=0, show_default=True, help="certification table: model seed"),
         click.option("--cert-arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True,
                      help="certification table: arithmetic"),
         click.option("--max-executions", type=COUNT_LIMIT, default=DEFAULT_MAX_EXECUTIONS, show_default=True,
                      help="most executions one certificate of the table may enumerate (0 or inf: no limit)"))
@click.pass_context
def report(ctx, out_dir, full, tables, study_seeds, study_trials, verifiers, jobs, scheduler, device, no_run, store_dir,
           cert_vocab, cert_depth, cert_branching, cert_seed, cert_arithmetic, max_executions) -> None:
    """The main job: the certification table and Layer Verification's toy study, written to OUT."""
    chosen = _parse_tables(tables) if tables else (tuple(PAPER_TRIALS) if full else QUICK_TABLES)
    check_scheduler(scheduler)
    check_device(device)
    seeds = study_seeds if study_seeds is not None else (PAPER_SEEDS if full else QUICK_SEEDS)
    trials = {t: study_trials if study_trials is not None else (PAPER_TRIALS[t] if full else QUICK_TRIALS)
              for t in chosen}
    cells = [cell for t in chosen for _, _, cell in paper_cells(t, seeds, trials[t])]
    if verifiers is not None:
        wanted = {v.strip() for v in verifiers.split(",")} - {""}
        if not wanted:
            raise SpecproofError("verifiers", "names no method: give comma-separated verifier names")
        unknown = wanted - {c.verifier for c in cells}
        if unknown:
            raise SpecproofError("verifiers", f"no cells for {sorted(unknown)} in tables {list(chosen)}")
        cells = [c for c in cells if c.verifier in wanted]
    out = Path(out_dir)
    check_output_dir(out, "out")
    if store_dir is not None:
        check_output_dir(store_dir, "store")
    store = Store(store_dir or out / "store")
    with limited(max_executions, 0) as cap:
        try:
            model = SyntheticModel(vocab=cert_vocab, seed=cert_seed)
            plans = plan_table(model, cert_depth, cert_branching, cert_arithmetic)
        except InvalidParameterError as err:  # the table's options are --cert-…
            message = err.message
            for option in ("vocab", "depth", "branching", "seed"):
                message = message.replace(f"--{option}", f"--cert-{option}")
            raise InvalidParameterError(f"cert_{err.field}", message) from None
        for estimate in estimate_table(plans):  # refused before anything is written
            _cert_options(estimate).check(cap)
    from contextlib import nullcontext

    # A sweep holds the store's lock to its end: a second sweep on the store refuses at once, naming the lock and
    # its holder. --no-run only reads the store (its cache entries are written whole, by a rename) and takes none,
    # so a sweep running meanwhile does not hold it up.
    with nullcontext() if no_run else store.lock():
        with limited(max_executions, 0) as cap:
            out.mkdir(parents=True, exist_ok=True)
            ok = _certification_report(out, store, model, plans, cert_depth, cert_branching, cert_arithmetic, cap)
        unique = list(dict.fromkeys(cells))
        total = sum(c.seeds * c.trials for c in unique)
        with progress_bar(len(unique) * seeds, "cells x seeds", "seed") as bar, \
                progress_bar(total, "trials", "trial") as trial_bar:
            done = [c for c in unique for s in range(c.seeds) if store.load(c, s) is not None]
            bar.update(len(done))
            trial_bar.update(sum(c.trials for c in done))
            if not no_run:
                run_cells(unique, store, jobs, lambda cell, s, n: (bar.update(1), trial_bar.update(n)), scheduler,
                          device)
        ticks = StageBars()
        try:
            write_study_report(out, chosen, store, seeds, trials, command_line(ctx),
                               None if full else QUICK_LAW_RULES, ticks)
            if full:
                ok = write_optimality_report(out, store.root, jobs, command_line(ctx), ticks) and ok
        finally:
            ticks.close()
    click.echo(f"written to {out}/")
    sys.exit(0 if ok else 1)


def _cert_options(estimate: SizeEstimate) -> SizeEstimate:
    """The options of the report's certification table (``--cert-…``; its dynamic drafters' settings are fixed). The
    table certifies by enumeration: a refusal suggests no ``--method``, which ``report`` does not take."""
    return replace(estimate, options=tuple(f"cert-{o}" for o in estimate.options
                                           if o in ("vocab", "depth", "branching")), recursion=False)


def _parse_tables(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        try:
            out.extend(range(int(a), int(b or a) + 1))
        except ValueError:
            raise SpecproofError("tables", f"expected numbers like 1,4-6, got {text!r}") from None
    bad = [t for t in out if t not in PAPER_TRIALS]
    if bad:
        raise SpecproofError("tables", f"no toy table {bad[0]}; choose from {sorted(PAPER_TRIALS)}")
    return tuple(dict.fromkeys(out))


def _certification_report(out: Path, store: Store, model: SyntheticModel, plans: list[Planned], depth: int,
                          branching: int, arithmetic: str, cap: int | None) -> bool:
    """``certification.md/.json``, computed once per configuration and code version (the store's cache)."""
    title = (f"Certification table: synthetic model (V={model.vocab}, rho=0.5, tau_p=tau_q=1, seed={model.seed}), "
             f"depth {depth}, branching {branching}, {arithmetic} arithmetic")

    def compute() -> dict:
        ticks = StageBars()
        try:
            rows = certification_table(model, depth, branching, arithmetic, tick=ticks)
        finally:
            ticks.close()
        return {"markdown": table_markdown(rows, title), "ok": all(r.as_expected for r in rows),
                "rows": table_json(rows)}

    params = {"model": model.describe(), "depth": depth, "branching": branching, "arithmetic": arithmetic,
              "max_executions": cap}
    table = store.cached("certification", params, compute)
    (out / "certification.md").write_text(table["markdown"])
    write_json(out / "certification.json", table["rows"])
    click.echo(table["markdown"])
    return table["ok"]


@main.command()
@model_options()
@shape_options
@verifier_options
@section("Monte Carlo",
         click.option("--seeds", type=Whole(1), default=5, show_default=True,
                      help="model seeds --seed … --seed+K−1"),
         click.option("--trials", type=Whole(2, MAX_TRIALS), default=10_000, show_default=True,
                      help="rounds per model seed"),
         click.option("--device", default=None, help="run the batched rounds with torch on this device (cpu, cuda, "
                                                     "cuda:1); default: numpy. The same numbers either way"))
@section("Limits", timeout_option("run"))
@json_option("the summary")
@click.pass_context
def mc(ctx: click.Context, **options) -> None:
    """Monte Carlo: mean accepted length (SE across model seeds), TVD vs the paper's baseline, a powered test.
    Exit 1 when the test rejects the target."""
    request = McRequest.from_click(ctx, **options)
    check_device(request.device)
    what = request.subject.resolve()
    shape = request.shape.resolved(what)
    check_pairing(what.name, shape.drafting)
    seed, seeds, trials = request.model.seed, request.seeds, request.trials
    model_for, drafter, drafting = first_seed_kept(request.model, shape)  # validates the options once, up front
    from simulator.montecarlo.engine import ANNOUNCE_SECONDS

    def estimated(run) -> None:
        """After the first seed's pilot: refuse a run estimated past --timeout, show the estimate of a long one."""
        run.check(request.timeout)
        if run.seconds >= ANNOUNCE_SECONDS:
            tqdm.write(f"mc {what.name}: {run.describe()}", file=sys.stderr)

    with progress_bar(seeds * trials, f"mc {what.name}", "trial") as bar, time_limit(request.timeout):
        summary = monte_carlo(model_for, drafter, what.name, what.fn, seeds, trials, bar.update, first_seed=seed,
                              device=request.device, estimate=estimated)
    which = f"model seeds {seed}–{seed + seeds - 1}" if seeds > 1 else f"model seed {seed}"
    described = model_for(seed).describe()
    several = several_drafts(described)
    click.echo(f"{what.name}, {settings(drafting)}: {which} x {trials} trials"
               + (f"; model {model_name(described)}" if several else ""))
    echo_control_note(what, shape.drafting)
    se_kind = "across model seeds" if seeds > 1 else "within the one seed"
    click.echo(f"  accepted length {summary.accept_len_mean:.4f} (SE {summary.accept_len_se:.4f}, {se_kind})")
    click.echo(f"  TVD of completed samples to q^(H+1) {summary.tvd:.4f}; direct target samples "
               f"{summary.baseline_tvd:.4f}")
    test = "REJECTS" if summary.test_rejects else "does not reject"
    click.echo(f"  chi-square on the first {summary.test_prefix} token(s) ({summary.test_cells} cells), "
               f"alpha {summary.test_alpha:g} over all seeds: {test} the target "
               f"(min p {summary.test_min_p_value:.3g}); "
               f"detects any TVD >= {summary.detectable_tvd:.4f} on that law with power 0.9")
    write_output(request.json_out, {**summary.to_json(), **several, **what.claim_json(shape.drafting)})
    sys.exit(1 if summary.test_rejects else 0)


@main.command()
@model_options()
@shape_options
@verifier_options
@section("Generation",
         click.option("--tokens", type=Whole(1), default=8, show_default=True, help="tokens to generate (N)"),
         click.option("--exact", "exact_law", is_flag=True,
                      help="the exact law of the first N tokens (small models only)"),
         click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="fraction", show_default=True,
                      help="--exact: arithmetic"),
         click.option("--seeds", type=Whole(1), default=5, show_default=True,
                      help="Monte Carlo: model seeds --seed … --seed+K−1"),
         click.option("--trials", type=Whole(1, MAX_TRIALS), default=1000, show_default=True,
                      help="Monte Carlo: generations per seed"))
@limit_options
@json_option("the result")
@click.pass_context
def generate(ctx: click.Context, **options) -> None:
    """Several draft-verify rounds until N tokens exist, drafter state carried across rounds: the exact law of
    the first N tokens against the target's (--exact; exit 1 when lossy), or Monte Carlo accepted per round."""
    request = GenerateRequest.from_click(ctx, **options)
    what = request.subject.resolve()
    shape = request.shape.resolved(what)
    check_pairing(what.name, shape.drafting)
    seed, tokens = request.model.seed, request.tokens
    model_for, drafter, drafting = first_seed_kept(request.model, shape)
    label = settings(drafting)
    claim = what.claim_json(shape.drafting)
    if request.exact:
        check_arithmetic_for(what.name, request.arithmetic)
        model = model_for(seed)
        with mass_bar(1, f"generate {what.name}") as bar, request.limits.applied(bar.update) as cap:
            estimate_generation(model, drafter, what.fn, tokens, request.arithmetic).check(cap)
            result = generation_law(model, drafter, what.fn, tokens, request.arithmetic)
        click.echo(f"{what.name}: {verdict(result.lossless)} over the first {tokens} tokens ({label}; model "
                   f"{model_name(model.describe())}, seed {seed})")
        echo_control_note(what, shape.drafting)
        click.echo(f"  TVD to q^{tokens} = {human_number(result.tvd)}; E[rounds] = "
                   f"{human_number(result.expected_rounds)}; "
                   f"E[accepted draft tokens] = {human_number(result.expected_accepted)}")
        if result.counterexample is not None:
            ce = result.counterexample
            click.echo(f"  counterexample: {list(ce.sequence)} has {human_number(ce.verifier_prob)} vs target "
                       f"{human_number(ce.target_prob)}")
        click.echo(f"  covers: this model pair (seed {seed}), not every pair")
        out = {"verifier": what.name, "tokens": tokens, "lossless": result.lossless,
               "tvd": to_json_number(result.tvd, request.arithmetic),
               "expected_rounds": to_json_number(result.expected_rounds, request.arithmetic),
               "expected_accepted": to_json_number(result.expected_accepted, request.arithmetic),
               "model": model.describe(), **drafting, **claim}
    else:
        seeds, trials = request.seeds, request.trials
        with progress_bar(seeds * trials, f"generate {what.name}", "generation") as bar, \
                time_limit(request.limits.timeout):
            summary = run_generations(model_for, drafter, what.name, what.fn, seeds, trials, tokens, bar.update,
                                      first_seed=seed)
        click.echo(f"{what.name}, {label}: model seeds {seed}–{seed + seeds - 1} x {trials} generations of {tokens} "
                   "tokens")
        echo_control_note(what, shape.drafting)
        se = ("SE " + f"{summary.accepted_per_round_se:.4f}" if summary.accepted_per_round_se is not None
              else f"no SE: {summary.se_note}")
        click.echo(f"  accepted per round {summary.accepted_per_round:.4f} ({se}); rounds {summary.rounds_mean:.3f}")
        out = {**summary.to_json(), **drafting, **claim}
    write_output(request.json_out, out)
    sys.exit(0 if not request.exact or result.lossless else 1)


@main.command()
@click.option("--out", "out_dir", type=Output(folder=True), default="specproof-report", show_default=True)
@click.option("--instances", type=Whole(1), default=40, show_default=True, help="random models per DySpec drafter")
@click.option("--seeds", type=Whole(2), default=10, show_default=True, help="model seeds of the Monte Carlo comparison")
@click.option("--trials", type=Whole(1, MAX_TRIALS), default=200, show_default=True,
              help="generations per model seed")
@click.option("--tokens", type=Whole(1), default=10, show_default=True, help="tokens per generation")
@click.option("--seed", type=SEED, default=0, show_default=True, help="seed of the random instances")
@click.pass_context
def dynamic(ctx, out_dir: str, instances: int, seeds: int, trials: int, tokens: int, seed: int) -> None:
    """DySpec's and ADED's drafters: exact certificates, D.1 greedy check, accepted tokens per round vs fixed trees.
    Exit 1 when a rule expected lossless is lossy on some instance."""
    check_output_dir(out_dir, "out")
    ticks = StageBars()
    try:
        ok = write_dynamic_report(Path(out_dir), instances, seeds, trials, tokens, seed, command_line(ctx), ticks)
    finally:
        ticks.close()
    click.echo(f"written to {out_dir}/dynamic.md")
    sys.exit(0 if ok else 1)


@main.command()
@click.option("--scale", type=Real(0, MAX_SCALE, min_open=True), default=1.0, show_default=True,
              help=f"multiplies every check's default instance count (at most {MAX_SCALE:g})")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--check", "only", multiple=True, type=click.Choice(list(CHECKS)), help="run only these (repeatable)")
@click.option("--out", "out_path", type=Output(), help="write the Markdown report here")
@click.pass_context
def theorems(ctx, scale: float, seed: int, only: tuple[str, ...], out_path: str | None) -> None:
    """Check the papers' claims on random exact instances: claim, instances, worst margin, verdict."""
    check_output_file(out_path, "out")
    ticks = StageBars()
    try:
        checks = run_checks(scale, seed, only or None, tick=ticks)
    finally:
        ticks.close()
    text = theorems_markdown(checks, command_line(ctx))
    click.echo(text)
    if out_path:
        kept(lambda: write_text(out_path, text, "out"))
    sys.exit(0 if all(c.as_expected for c in checks) else 1)
