"""The time of Table 1 at full scale, measured record by record; trials per second per verifier and structure.

Usage: ``python3 benchmarks/throughput.py [--out reports/benchmarks.md] [--jobs 2] [--batch 20000]
[--reference 300] [--trials 1000000]``.

Table 1 is 22 cells of 20 model seeds × 10^6 trials. This times seed 0 of every cell as a sweep computes it
(:func:`specproof.study.compute_seed`), plus a worker's set-up per model seed, and projects
``20 × (set-up × jobs + Σ_cells seed time) / jobs`` on ``--jobs`` cores. Beside it: the batched and reference
paths' trials per second, and where ``lv-gr``'s time goes. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

# One BLAS thread, as a sweep's workers have (specproof.study.run_cells); read as numpy loads.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

from specproof import study
from simulator.montecarlo.batched import batched_rounds, has_batched_path
from simulator.montecarlo.context_rows import ContextRows
from simulator.drafting import FixedShape
from simulator.models import SyntheticModel
from simulator.montecarlo.engine import run_trials
from specproof.reports.portable import portable_command
from specproof.study import PAPER_SEEDS, compute_seed, model_key, paper_cells
from simulator.trees import make_topology
from simulator.verifiers import VERIFIERS


def rates(name: str, structure: str, rows: ContextRows, batch: int, reference: int, run: int) -> dict:
    """Trials per second of the batched path (after a 1,000-trial warm-up), as batches of a run of ``run`` trials
    per seed, and of the reference path."""
    model, topology = SyntheticModel(15, 0.5, 1.0, 1.0, seed=0), make_topology(structure, 4, 2)
    out = {}
    if has_batched_path(name, "iid", 15, topology):
        batched_rounds(model, topology, "iid", name, 0, np.arange(1000), rows, run)
        start = time.perf_counter()
        batched_rounds(model, topology, "iid", name, 0, np.arange(batch), rows, run)
        out["batched_trials_per_s"] = batch / (time.perf_counter() - start)
    start = time.perf_counter()
    run_trials(model, FixedShape(topology), VERIFIERS[name].fn, 0, range(reference))
    out["reference_trials_per_s"] = reference / (time.perf_counter() - start)
    return out


def lv_gr_breakdown(structure: str, trials: int, run: int) -> dict:
    """Where batched ``lv-gr`` spends its time on ``structure``, for ``trials`` trials of a run of ``run`` per seed:
    GR instances solved (after identical ones are merged; the mass grid's points among them), Newton's flow
    evaluations per instance (one per iteration and one to confirm convergence), and the time inside GR's
    solver. The grid (:class:`~simulator.verifiers.batched.gr_stacks.MassGrid`) is built as the run goes, so a
    short measurement pays more of it per trial than a whole run does."""
    from simulator.verifiers.batched import gr_stacks as batched_gr
    from simulator.verifiers import gr_solver

    model, topology = SyntheticModel(15, 0.5, 1.0, 1.0, seed=0), make_topology(structure, 4, 2)
    rows = ContextRows(model, 4)
    count = {"problems": 0, "evaluations": 0, "solver_s": 0.0}
    solve, evaluate = batched_gr.gr_dual_batch, gr_solver._Stack.flow

    def timed_solve(*args):
        start = time.perf_counter()
        out = solve(*args)
        count["solver_s"] += time.perf_counter() - start
        count["problems"] += len(out[0])
        return out

    def counted_evaluate(stack):
        count["evaluations"] += len(stack.q)
        return evaluate(stack)

    batched_gr.gr_dual_batch, gr_solver._Stack.flow = timed_solve, counted_evaluate
    try:
        start = time.perf_counter()
        batched_rounds(model, topology, "iid", "lv-gr", 0, np.arange(trials), rows, run)
        total = time.perf_counter() - start
    finally:
        batched_gr.gr_dual_batch, gr_solver._Stack.flow = solve, evaluate
    return {"structure": structure, "trials": trials, "run": run, "total_s": total,
            "problems_per_trial": count["problems"] / trials, "grid_points_per_trial": rows.mass_grid.solved / trials,
            "evaluations_per_problem": count["evaluations"] / count["problems"],
            "solver_share": count["solver_s"] / total, "us_per_problem": 1e6 * count["solver_s"] / count["problems"]}


def _side_by_side(before: dict, results: list[dict], total: float) -> list[str]:
    """The same cells measured at an earlier commit (``--before``): seed time and batched rate, with ratios
    (above 1: faster now)."""
    old = {(r["verifier"], r["structure"]): r for r in before["rows"]}
    lines = ["", f"## Side by side with `{before['command']}` at an earlier commit", "",
             f"Table 1 projected: {before['total_s'] / 60:.0f} min before, {total / 60:.0f} min now.", "",
             "| verifier | structure | seed time before → now (s) | speed-up | batched trials/s before → now | "
             "speed-up |", "|---|---|---|---|---|---|"]
    for r in results:
        b = old[r["verifier"], r["structure"]]
        rate = (f"{b['batched_trials_per_s']:,.0f} → {r['batched_trials_per_s']:,.0f} | "
                f"{r['batched_trials_per_s'] / b['batched_trials_per_s']:.2f}")
        lines.append(f"| {r['verifier']} | {r['structure']} | {b['seed_s']:.1f} → {r['seed_s']:.1f} | "
                     f"{b['seed_s'] / r['seed_s']:.2f} | {rate} |")
    return lines


TRIED = (
    "What was tried, in order, and what each gave on the complete tree. Before: the reference path (GR's flows "
    "as dictionaries over all V^k tuples, one problem at a time: 24 trials/s); one node's problems across a batch "
    "of trials solved as one stack by the shared solver, reading off only the drafted tuple's acceptance and the "
    "outgoing flow (864 trials/s); identical problems merged (the root's, most of depth 1's). This round: the "
    "solver's sums over a row's tokens and over the rows holding a token as BLAS products with the shared 0/1 "
    "row matrix (5× faster than the gathers they replace), the pair sums by `take`, the Hessian only for "
    "instances still iterating (1.6× in all); stacks of about a thousand instances, whose working set stays in "
    "cache (15%); Newton started, for an inner token, at the θ that would saturate it alone, `e^θ = q/(M − q)` "
    "(6.6 → 5.7 flow evaluations per problem: a token that must take nearly all its rows' mass needs θ ≈ 10, "
    "which Newton in θ climbs about one unit per iteration); the tokens no trial can draft (LV's dummy) left out "
    "of the tuple rows (5–10%). Tried and dropped: warm starts from the same context's solutions at nearby layer "
    "masses (anchors on a grid in log A_t, Hermite-interpolated): H* changes between neighbouring anchors for "
    "23–80% of the problems (grid steps 1/16 to 1/2), and where it does not Newton still needed 2.9–4 "
    "evaluations, which the anchors' own solves eat up; a scaling step from θ = 0 (`θ = log(q/flow)`), no fewer "
    "iterations. Found later (by a side-by-side run): finding the trials that share a problem by "
    "`np.unique(axis=0)` over whole rows took 70% of the multi-chain cell, since it sorts rows whose long draft "
    "prefix is shared; two sort keys and an exact comparison of neighbours find the same problems (multi-chain "
    "3.9×, tapered 1.6×, complete 1.16×; the records unchanged). "
    "What is left is the problem count, fixed by the algorithm (every node of every trial below "
    "depth 1 brings its own A_t), times Newton's iterations of a few dozen array operations each on "
    "15 × 15 systems and 120 tuple rows (575 at b = 3). Then warm starts again, from a grid "
    "linear in A_t (steps of 1/64) with each point's slope dθ/dA (cubic Hermite between two neighbours that "
    "have the problem's H*, the tangent of one): 5.7 → 2.6 flow evaluations per problem on the complete tree; "
    "the grid is used only where the run brings at least 256 problems to a context, since a context's grid "
    "costs up to 65 cold solves (on the tapered tree at 10^5 trials, a grid everywhere made the cell 1.5× "
    "slower).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="reports/benchmarks.md")
    parser.add_argument("--jobs", type=int, default=2, help="cores the projection assumes")
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--reference", type=int, default=300)
    parser.add_argument("--before", type=Path, default=None,
                        help="the JSON this script wrote at an earlier commit, on the same machine: adds its numbers "
                             "beside these, with the ratio")
    parser.add_argument("--trials", type=int, default=10**6,
                        help="trials of the timed seed, scaled to 10^6 (a quick look only: fixed costs scale too)")
    args = parser.parse_args()
    cells = [cell for _, _, cell in paper_cells(1)]
    key = model_key(cells[0], 0)
    study._rows.cache_clear()
    start = time.perf_counter()
    rows = study._rows(*key)
    setup = time.perf_counter() - start
    results = []
    for cell in cells:
        seed_s = compute_seed(replace(cell, seeds=1, trials=args.trials), 0)["seconds"]
        if args.trials != cell.trials:
            seed_s *= cell.trials / args.trials
        result = {"verifier": cell.verifier, "structure": cell.topology, "seed_s": seed_s,
                  "table1_cell_s": PAPER_SEEDS * seed_s,
                  **rates(cell.verifier, cell.topology, rows, args.batch, args.reference, cell.trials)}
        results.append(result)
        print(json.dumps(result), file=sys.stderr)
    breakdown = [lv_gr_breakdown(structure, 20_000, cells[0].trials) for structure in ("multi-chain", "tapered", "complete")]
    setup_total = PAPER_SEEDS * setup  # every worker builds each seed's rows once: jobs × this over jobs cores
    total = setup_total + sum(r["table1_cell_s"] for r in results) / args.jobs
    without = setup_total + sum(r["table1_cell_s"] for r in results if r["verifier"] != "lv-gr") / args.jobs
    command = portable_command(["python3", "benchmarks/throughput.py", *sys.argv[1:]])
    lines = ["# Benchmarks: Table 1 at full scale, and Monte Carlo throughput", "",
             f"Command: `{command}`. Machine: {platform.machine()}, {os.cpu_count()} cores, "
             f"{platform.platform()}, Python {platform.python_version()}, numpy {np.__version__}.", "",
             f"Table 1 is {len(cells)} cells of 20 model seeds × 10^6 trials at the base configuration (V=15, H=4, "
             "b=2, ρ=0.5, τ=1), i.i.d. drafting. Each cell's seed 0 is timed exactly as a sweep computes a store "
             "record (Monte Carlo, TVDs, chi-square, exact E[τ] for token verification); the model's rows of every "
             f"context (set-up, once per seed and worker) took {setup:.1f} s. Projected on {args.jobs} cores: "
             f"20 × (set-up + Σ cells' seed time / {args.jobs}).", "",
             f"**Table 1 at full scale: {total / 3600:.2f} h on {args.jobs} cores ({total / 60:.0f} min); "
             f"{without / 60:.0f} min without `lv-gr`.**", "",
             "| verifier | structure | seed time (s) | cell, 1 core | batched trials/s | reference trials/s |",
             "|---|---|---|---|---|---|"]
    for r in results:
        batched = f"{r['batched_trials_per_s']:,.0f}" if "batched_trials_per_s" in r else "–"
        lines.append(f"| {r['verifier']} | {r['structure']} | {r['seed_s']:.1f} | "
                     f"{r['table1_cell_s'] / 3600:.2f} h | {batched} | {r['reference_trials_per_s']:,.0f} |")
    if args.before is not None:
        lines += _side_by_side(json.loads(args.before.read_text()), results, total)
    lines += ["", "## Where `lv-gr`'s time goes", "",
              "Layer Verification hands every non-leaf node the GR problem of draft `(p_v, 0)` and target "
              "`(A_t q_v, 1 − A_t)`, where `A_t` is the score mass of the node's layer and depends on everything "
              "drafted above it: apart from the root and depth 1 (shared by many trials) every node of every "
              "trial is a GR problem of its own, a convex dual over the V = 15 drafted tokens' logits solved by "
              "projected Newton.", "",
              "Newton starts from a grid of masses per context where the run visits the context often "
              "(docs/engines.md); the grid is built as the run goes, so these first trials of a run of 10^6 pay "
              "more of it than the whole run does.", "",
              "| structure | trials | GR problems per trial | of which grid points | flow evaluations per problem | "
              "µs per problem | share of time in GR's solver |", "|---|---|---|---|---|---|---|"]
    for b in breakdown:
        lines.append(f"| {b['structure']} | {b['trials']:,} | {b['problems_per_trial']:.2f} | "
                     f"{b['grid_points_per_trial']:.2f} | {b['evaluations_per_problem']:.2f} | "
                     f"{b['us_per_problem']:.0f} | {b['solver_share']:.0%} |")
    lines += ["", TRIED, ""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    Path(args.out).with_suffix(".json").write_text(json.dumps(
        {"command": command, "setup_s": setup, "total_s": total, "without_lv_gr_s": without, "rows": results,
         "lv_gr_breakdown": breakdown}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
