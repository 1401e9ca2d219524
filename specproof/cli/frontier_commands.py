"""``specproof frontier``: lossy rules swept over their knobs, each point's exact ``E[τ]``, TVD and KL beside the
best lossless rule and the ceiling on the same pairs and shape (:mod:`specproof.frontier`, docs/lossy.md).
Registered on :func:`specproof.cli.group.main`."""

from __future__ import annotations

from pathlib import Path

import click

from specproof.frontier_cells import Instance
from exact.prove.optimum import MAX_COLUMNS
from simulator.drafting import DRAFTING
from simulator.errors import InvalidParameterError, LimitError
from simulator.jsonfile import check_output_dir, read_json, write_json, write_text
from simulator.numeric import ARITHMETICS
from simulator.trees import TOPOLOGIES
from simulator.verifiers.knobs import parse_kwargs
from specproof.cli.checks import check_scheduler
from specproof.cli.group import main
from specproof.cli.option_groups import LIMIT_OPTIONS, VERIFIER_KWARGS_OPTION, model_options, timeout_option
from specproof.cli.output import command_line, kept
from specproof.cli.params import COUNT_LIMIT, JOBS, SECONDS_LIMIT, TREE_BRANCHING, TREE_DEPTH, Output, Whole
from specproof.cli.progress import progress_bar
from specproof.cli.requests import given_on_command_line
from specproof.cli.sections import section
from specproof.cli.specs import ModelSpec, picked
from specproof.frontier import MODEL_OPTIONS, Frontier, Point, Shape, Sweep, run_frontier, summarise
from specproof.reports.lossy_frontier import frontier_json, frontier_markdown, plot_frontier
from specproof.study import Store

#: the pairs a frontier runs on: the synthetic pair (floats) and random rational pairs (exact)
FRONTIER_MODELS = ("synthetic", "random-rational")
#: the ceiling's default time bound in seconds: an LP near the column limit settles in about a minute here
CEILING_TIMEOUT = 300.0
#: the draft tree without --shape: --topology, --depth and --branching, each left out of the command line unless
#: given, so that a run's recorded command (its report's header) with --shape runs again as typed
TREE_DEFAULTS = {"topology": "complete", "depth": 2, "branching": 2}


@main.command("frontier")
@model_options(FRONTIER_MODELS, several_drafts=False)
@section("Draft tree and drafting",
         click.option("--topology", type=click.Choice([t for t in TOPOLOGIES if t != "explicit"]),
                      help="tree shape  [default: complete]"),
         click.option("--depth", type=TREE_DEPTH, help="draft depth H  [default: 2]"),
         click.option("--branching", type=TREE_BRANCHING, help="branching b  [default: 2]"),
         click.option("--drafting", type=click.Choice(list(DRAFTING)), default="iid", show_default=True,
                      help="drafting scheme (the engines' rules draft top-k)"),
         click.option("--shape", "shapes", multiple=True,
                      help="TOPOLOGY:DEPTH[:BRANCHING] instead of --topology/--depth/--branching; repeat for "
                           "several shapes (a rule is skipped where it is not defined)"))
@section("Rules and sweep",
         click.option("--verifier", "verifiers", multiple=True,
                      help="a built-in rule (specproof list); repeat for one curve per rule"),
         VERIFIER_KWARGS_OPTION,
         click.option("--sweep", "sweeps", multiple=True,
                      help="NAME=START:STOP:N (N points, both ends included) or NAME=v1,v2,...: a rule's knob or "
                           "rho, tau_p, tau_q; several make a grid"),
         click.option("--point", "points", multiple=True,
                      help="RULE[:NAME=VALUE,...][@LABEL]: a rule at given knobs, one row of the headline table; "
                           "repeat; instead of --verifier, --sweep and --verifier-kwargs"))
@section("Computation",
         click.option("--seeds", type=Whole(1), default=1, show_default=True,
                      help="model pairs --seed … --seed+K−1: each cell is the mean over them"),
         click.option("--arithmetic", type=click.Choice(ARITHMETICS), default="float", show_default=True,
                      help="float: float64 from the exact enumeration (fast on the synthetic pair); fraction: exact "
                           "rationals"),
         click.option("--no-ceiling", is_flag=True, help="skip the ceiling E[τ]* (an LP; the slow part)"),
         click.option("--max-columns", type=COUNT_LIMIT, default=MAX_COLUMNS, show_default=True,
                      help="the ceiling: refuse an LP whose column estimate is larger (0 or inf: no limit)"),
         click.option("--ceiling-timeout", type=SECONDS_LIMIT, default=CEILING_TIMEOUT, show_default=True,
                      help="the ceiling: seconds per pair (0 or inf: none)"))
@section("Limits (per cell)", LIMIT_OPTIONS[0],
         timeout_option("cell", "; it acts in a process's main thread: here and in --jobs workers, not on Dask"))
@section("Sweep",
         click.option("--jobs", type=JOBS, default=1, show_default=True, help="worker processes"),
         click.option("--scheduler", default=None,
                      help="run the cells on Dask: 'local' (a LocalCluster of --jobs workers) or a scheduler address"),
         click.option("--store", "store_dir", type=Output(folder=True), default=None,
                      help="resumable cell store (default OUT/store with --out; none without)"))
@section("Output",
         click.option("--out", "out_dir", type=Output(folder=True), default=None,
                      help="write NAME.md, NAME.json and NAME.png here"),
         click.option("--name", default="frontier", show_default=True,
                      help="the outputs' file name under --out, without its extension"),
         click.option("--real-pair", "real_pair", type=click.Path(dir_okay=False),
                      help="append the real pair's section: the JSON specproof lossy-real wrote"))
@click.pass_context
def frontier(ctx: click.Context, **options) -> None:
    """Lossy rules over a grid of knob values: each point's exact E[τ], TVD over Σ^(H+1) and KL, beside the best
    lossless rule (TVD 0) and the ceiling E[τ]* on the same pairs and shape. Resumable (--store), on Dask
    (--scheduler); --out writes Markdown, JSON and a plot. Exit 2 when a cell passed its limits (the tables say
    which)."""
    model = picked(ModelSpec, options)
    model.check()
    sections = () if options["real_pair"] is None else (_real_section(options["real_pair"]),)
    if model.model_kind != "synthetic":  # a default value passes: the recorded command (a header) gives it
        defaults = {param.name: param.default for param in ctx.command.params}
        for name in sorted(set(MODEL_OPTIONS) & given_on_command_line(ctx)):
            if options[name] != defaults[name]:
                raise InvalidParameterError(name, f"--{name.replace('_', '-')} shapes the synthetic pair only (the "
                                                  f"model is {model.model_kind})")
    out_dir, store_dir, scheduler = options["out_dir"], options["store_dir"], options["scheduler"]
    check_scheduler(scheduler)
    for folder, field in ((out_dir, "out"), (store_dir, "store")):
        if folder is not None:
            check_output_dir(folder, field)
    tree = [options[name] if options[name] is not None else default for name, default in TREE_DEFAULTS.items()]
    base = Instance(model, *tree, options["drafting"], options["arithmetic"])
    plan = _plan(options, base)
    plan.check()
    store_root = store_dir or (Path(out_dir) / "store" if out_dir is not None else None)
    store = Store(store_root) if store_root is not None else None
    cells = plan.cells()
    with progress_bar(len(cells), "frontier", "cell") as bar:
        records, seconds = run_frontier(plan, store, options["jobs"], scheduler, bar.update)
    summary = summarise(plan, records)
    command = command_line(ctx)
    text = frontier_markdown(plan, summary, command, sections)
    click.echo(text)
    click.echo(f"{len(cells)} cells; {seconds:.1f} s computing those not in the store")
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        name = options["name"]
        kept(lambda: write_text(out / f"{name}.md", text, "out"))
        kept(lambda: write_json(out / f"{name}.json", frontier_json(plan, summary, command), "out"))
        kept(lambda: plot_frontier(plan, summary, out / f"{name}.png"))
        click.echo(f"written to {out}/")
    refused = [p for p in summary["points"] if "refused" in p]
    if refused:
        raise LimitError("frontier", f"{len(refused)} point(s) have no numbers ({refused[0]['rule']}, "
                                     f"{refused[0]['refused']}): raise --max-executions or --timeout")


def _plan(options: dict, base: Instance) -> Frontier:
    """The command's plan: ``--verifier`` with its sweeps, or ``--point`` (not both), on ``--shape`` or the
    ``--topology`` options (not both); :class:`InvalidParameterError` naming the option otherwise."""
    points = tuple(Point.parse(p) for p in options["points"])
    if points and (options["verifiers"] or options["sweeps"] or options["verifier_kwargs"] is not None):
        raise InvalidParameterError("point", "give the rules either as --point (each with its knobs) or as "
                                             "--verifier with --sweep and --verifier-kwargs, not both")
    if not points and not options["verifiers"]:
        raise InvalidParameterError("verifier", "give a rule: --verifier RULE (with --sweep) or --point RULE:...")
    shapes = tuple(dict.fromkeys(Shape.parse(s) for s in options["shapes"]))
    if shapes and any(options[name] is not None for name in TREE_DEFAULTS):
        raise InvalidParameterError("shape", "--shape gives the shape: drop --topology, --depth and --branching")
    if not options["name"] or any(ch in options["name"] for ch in "/\\") or options["name"].startswith("."):
        raise InvalidParameterError("name", f"a file name without a folder or extension, got {options['name']!r}")
    rules = tuple(dict.fromkeys(p.rule for p in points)) if points else tuple(dict.fromkeys(options["verifiers"]))
    return Frontier(rules, tuple(Sweep.parse(s) for s in options["sweeps"]),
                    tuple(parse_kwargs(options["verifier_kwargs"], "verifier-kwargs").items()), base,
                    options["seeds"], not options["no_ceiling"], options["max_columns"] or float("inf"),
                    options["ceiling_timeout"], options["max_executions"] or None, options["timeout"], shapes, points)


def _real_section(path: str) -> str:
    """The real pair's section from ``specproof lossy-real``'s JSON (its rows, settings and command), read before
    the sweep runs: a missing or malformed file is an error naming ``real-pair``."""
    from specproof.reports.lossy_real import real_section

    data = read_json(path, "real-pair")
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list) or "command" not in data:
        raise InvalidParameterError("real-pair", f"{path}: expected the JSON specproof lossy-real writes (its rows "
                                                 "and command)")
    try:
        return real_section(data["rows"], data, data["command"])
    except (KeyError, TypeError) as err:
        raise InvalidParameterError("real-pair", f"{path}: not lossy-real's JSON ({err!r} missing or malformed)") \
            from None
