"""The mutation zoo (``specproof zoo``, docs/gate.md): real bug classes of speculative-decoding verifiers, and what
each kind of test does with them (:func:`run_zoo`); and the bug twins of whole generation loops
(:func:`loop_section`)."""

from __future__ import annotations

import json
import platform
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from multiprocessing import get_context
from pathlib import Path
from typing import Callable

import numpy as np

from specproof.gate.battery import build, instance_key, instances
from exact.certificate import certify, view_law
from exact.law import law_distance
from specproof.gate.hunt import hunt
from exact.reproducer import Reproducer, capture
from exact.subject import Subject, subject

from simulator.drafting.drafter_registry import make_drafter
from specproof.gate.runner import GATE_DEFAULTS, Check, CheckOutcome, Config, run_gate
from simulator.montecarlo.designs import (MRV2_SEED, cells, chi_square_pass, mrv2_chi_square_pass, serving_pass,
                                          simulated_pass, tvd_baseline_pass, vllm_l2_pass)
from simulator.models import ModelView, SyntheticModel, TableModel
from simulator.numeric import human_number
from simulator.trees import make_topology
from simulator.workers import pool_options

Tick = Callable[[str, int], None]

#: the gate's battery for every mutant (a mutant may override keys)
BATTERY = {"seeds": [0, 1, 2], "vocab": [2, 3], "topologies": ["chain", "complete", "multi-chain"]}
DEFAULT_PAIRS = 16  # certify's default model (synthetic, vocab 3, seeds 0..15) on the mutant's default shape
HUNT_SECONDS = 120.0
SHRINK_SECONDS = 20.0
REPLICATIONS = 2000  # draws from the exact law per design, to measure the analytic pass probabilities' error
SEED = 20261125  # the generator of the simulated columns, drawn row after row


@dataclass(frozen=True)
class Mutant:
    name: str
    subject: dict
    bug: str  # the bug class, one line
    seen: str  # where such a bug reached
    battery: dict = field(default_factory=dict)


def _kernel(function: str, adapter: str = "chain", module: str = "specproof.gate.mutants", **extra) -> dict:
    return {"kernel": f"{module}:{function}", "adapter": adapter, **extra}


EX = "specproof.gate.torch_kernels"
TRITON = "specproof.gate.triton_kernels"  # certified under Triton's interpreter (the triton extra)
TRITON_BATTERY = {"topologies": ["chain"]}  # chain kernels
MUTANTS: tuple[Mutant, ...] = (
    Mutant("accept-all", {"verifier": "bug-accept-all"}, "acceptance rule: every draft token accepted",
           "acceptance stubbed out while a pipeline is brought up"),
    Mutant("stub-uniform", _kernel("sps_chain_stub_uniform"), "acceptance rule: a stub uniform (zeros) compared "
           "where torch.rand belongs", "test stubs left in sampler code"),
    Mutant("residual-target", _kernel("sps_chain_target_residual", module=EX), "residual drawn from the target q, "
           "not norm((q − p)+)", "rejection samplers of serving engines and reimplementations"),
    Mutant("previous-row", _kernel("sps_chain_previous_row", module=EX), "position i verified against the target "
           "row of position i − 1", "logits-at-t-predict-t+1 layouts in speculative decoding loops"),
    Mutant("reused-uniform", _kernel("sps_chain_reused_uniform", module=EX), "the uniform that rejected also draws "
           "the replacement", "fused rejection-sampling kernels saving a random draw"),
    Mutant("bonus-rejected-sibling", _kernel("rrs_tree_first_residual", "tree", EX), "tree: token after all children "
           "rejected drawn from the first rejected sibling's residual", "tree verifiers (SpecInfer-style RRS)"),
    Mutant("late-residual-update", _kernel("rrs_tree_late_update", "tree"), "tree: a rejection handled one step "
           "late (the next sibling tested against the stale residual)", "recursive rejection sampling loops"),
    Mutant("traversal-leaf-order", {"verifier": "bug-trv-insertion-order", "shapes": ["explicit"]},
           "traversal verification visiting leaves in insertion order, not DFS post-order",
           "Traversal Verification reimplementations on sparse trees"),
    Mutant("match-per-row", {"verifier": "bug-match-per-row"}, "one target sample per candidate row instead of per "
           "node", "tree sample-and-match implementations batching rows"),
    Mutant("match-second-chance", _kernel("match_tree_second_chance", "tree"), "exact-match acceptance biased toward "
           "candidates (a second target draw on a miss)", "typical/lenient acceptance heuristics shipped as exact"),
    Mutant("gbv-clipped-ranking", {"verifier": "bug-gbv-clipped"}, "multi-path selection ranked by the clipped "
           "ratio min(1, q/p)", "multi-draft block verification implementations"),
    Mutant("clipped-acceptance", _kernel("sps_chain_clipped", module=EX), "acceptance probability clipped to [0.1, 1] "
           "(never reject outright)", "heuristic acceptance floors"),
    Mutant("temperature-unverified", _kernel("tempered_chain_unscaled_verify", f"{EX}:tempered_adapter", EX,
                                             shapes=["chain"]),
           "temperature applied to the sampled rows but not to the verified rows", "sampling-parameter plumbing "
           "in serving engines (temperature, top-k)"),
    Mutant("bf16-ratio", _kernel("sps_chain_bf16_ratio"), "draft sampled in one precision, its ratio read in "
           "bfloat16", "mixed-precision draft/verify paths"),
    Mutant("zero-uniform", _kernel("sps_chain_le", module=EX, uniforms="grid"), "u <= ratio accepts a zero-probability "
           "draft when torch.rand returns 0", "rejection samplers comparing with <= on the float grid"),
    Mutant("cdf-fallback", _kernel("sps_chain_cdf_fallback"), "inverse-CDF walk over an unnormalised residual "
           "falling back to the last index", "hand-written categorical samplers"),
    Mutant("placeholder-token", _kernel("match_tree_placeholder", "tree", EX), "a -1 padding slot read as a node and "
           "its token", "padded child tables in batched tree verification"),
    Mutant("off-by-one-commit", _kernel("flat_chain_off_by_one", "flat-chain"), "the rejected (unverified) draft "
           "committed before the recovered token", "output indexing of batched rejection samplers"),
    Mutant("greedy-target", _kernel("greedy_target_chain"), "greedy (argmax) target verification of drafts sampled "
           "at temperature > 0", "greedy verification paths used under sampling"),
    Mutant("block-cumprod", _kernel("bv_cumprod_chain"), "block verification with per-level products of ratios and "
           "an unmodified token-level residual", "block verification reimplementations"),
    Mutant("greedy-bv-unmodified", {"verifier": "bug-greedy-bv-nomod"}, "greedy block verification completing with "
           "the unmodified target", "greedy block verification without its distribution modification"),
    Mutant("triton-zero-coin", _kernel("sps_chain_le", module=TRITON, uniforms="grid"), "Triton: u · p <= q accepts "
           "a draft the target excludes when the coin is exactly 0", "sglang#35771", TRITON_BATTERY),
    Mutant("triton-coin-float32", _kernel("sps_chain_coin_float32", module=TRITON), "Triton: the residual's float64 "
           "coin narrowed to float32 rounds to 1.0 and emits the last token", "sglang#30822", TRITON_BATTERY),
    Mutant("triton-reused-philox-offset", _kernel("sps_chain_philox_reused_offset", module=TRITON), "Triton: the "
           "residual's tl.rand reuses the acceptance's Philox offset", "vLLM #54282", TRITON_BATTERY),
    Mutant("triton-reused-uniform", _kernel("sps_chain_reused_uniform", module=TRITON), "Triton: every position's "
           "acceptance reads the first uniform", "FlashInfer #425", TRITON_BATTERY),
    Mutant("triton-race-target", _kernel("sps_chain_triton_race_target", module=TRITON), "Triton: the recovered "
           "token's exponential race run on q, not (q − p)+", "race-based recovered-token kernels", TRITON_BATTERY),
    Mutant("dyspec-printed", {"verifier": "bug-dyspec-printed"}, "DySpec's Alg. 3 as printed: c ~ N(0, 1) in place "
           "of U(0, 1)", "a published algorithm listing", {"arithmetic": "float"}),
)


@dataclass
class Row:
    name: str
    kind: str  # "torch kernel" or "plugin"
    subject: dict
    bug: str
    seen: str
    flagged: bool
    flagged_by: str
    reference: str  # the instance whose law the other columns use
    tvd: float
    tvd_exact: str
    default_pairs: str
    hunt_seconds: float | None
    shrunk: str
    serving: str
    tvd_baseline: float | None
    chi_square: float | None
    simulated: list[float]  # the three designs' pass frequencies over REPLICATIONS draws from the exact law
    seconds: float
    reproducer: dict = field(default_factory=dict)  # the reference instance, certifiable with --case
    vllm_l2: float | None = None  # vLLM's own test: its pass frequency over REPLICATIONS draws from the exact law
    mrv2: dict | None = None  # vLLM Model Runner V2's chi-square test (:func:`mrv2_entry`)


def gate_outcomes(mutants: tuple[Mutant, ...], state: Path, jobs: int = 1,
                  tick: Callable[[int], None] = lambda n: None) -> list[CheckOutcome]:
    """Every mutant through the gate as a check expected lossless (default battery, bounded hunt)."""
    from specproof.gate.battery import battery

    checks = tuple(Check(m.name, m.subject, "lossless", battery({**BATTERY, **m.battery}, f"zoo.{m.name}"))
                   for m in mutants)
    config = Config(state / "zoo.toml", {**GATE_DEFAULTS, "state": "state", "baselines": "none.json"}, checks)
    return run_gate(config, jobs, tick=tick)


def _default_shape(what: Subject) -> tuple[int, ...]:
    """The control's demo tree where it has one; else a multi-chain of two chains of depth 2 (a node with two
    children, where tree bugs show, at a size a torch kernel enumerates in seconds); else a chain of depth 2."""
    from simulator.verifiers import VERIFIERS

    spec = VERIFIERS.get(what.name)
    if spec is not None and spec.demo is not None:
        return tuple(spec.demo[0])
    name = "multi-chain" if "multi-chain" in what.shapes else "chain"
    return make_topology(name, 2, 2 if name == "multi-chain" else 1).parents


def _default_pair(task: tuple[dict, tuple[int, ...], int, str]) -> bool:
    """Whether one default pair shows the loss (a worker's job)."""
    description, parents, seed, arithmetic = task
    what = subject(description)
    model = SyntheticModel(3, seed=seed)
    drafter = make_drafter(what.schemes[0], make_topology("explicit", parents=parents), model)
    return not certify(model, drafter, what.fn, arithmetic).lossless


def default_pairs(what: Subject, arithmetic: str, jobs: int = 1) -> int:
    """How many of certify's default random pairs (synthetic, vocab 3, seeds 0..DEFAULT_PAIRS-1) show the loss on
    :func:`_default_shape`."""
    tasks = [(what.description, _default_shape(what), seed, arithmetic) for seed in range(DEFAULT_PAIRS)]
    if jobs <= 1:
        return sum(map(_default_pair, tasks))
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), **pool_options()) as pool:
        return sum(pool.map(_default_pair, tasks))


def _reference(outcome: CheckOutcome) -> tuple[Reproducer, str] | None:
    b = outcome.check.battery
    if outcome.lossy_cases:
        key = outcome.lossy_cases[0].key
        inst = next(i for i in instances(b, outcome.subject) if instance_key(i) == key)
        return capture(*build(inst, b), outcome.subject, b["arithmetic"]), f"{key} (depth {b['depth']})"
    if outcome.hunt is not None and outcome.hunt.get("shrunk"):
        from exact.reproducer import parse_reproducer

        return parse_reproducer(outcome.hunt["shrunk"]), "the gate's hunt (shrunk)"
    return None


def mutant_row(mutant: Mutant, outcome: CheckOutcome, rng: np.random.Generator, jobs: int = 1) -> Row:
    start = time.perf_counter()
    what = outcome.subject
    arithmetic = outcome.check.battery["arithmetic"]
    flagged = bool(outcome.failures)
    flagged_by = (f"battery: LOSSY on {len(outcome.lossy_cases)} of {len(outcome.cases)}" if outcome.lossy_cases
                  else "hunt" if flagged else "missed")
    shown = default_pairs(what, arithmetic, jobs)
    found = hunt(what, HUNT_SECONDS, seed=0, arithmetic=arithmetic, shrink_time=SHRINK_SECONDS)
    shrunk = "—"
    if found.shrunk is not None:
        c = found.shrunk.case
        shrunk = f"{c.nodes} node(s), V={c.vocab}, depth {c.depth}"
    row = Row(mutant.name, "torch kernel" if "kernel" in mutant.subject else "plugin", mutant.subject, mutant.bug,
              mutant.seen, flagged, flagged_by, "—", 0.0, "0", f"{shown}/{DEFAULT_PAIRS}",
              found.seconds if found.found is not None else None, shrunk, "—", None, None, [], 0.0)
    reference = _reference(outcome)
    if reference is not None:
        case, row.reference = reference
        reference_columns(row, case, what, arithmetic, rng)
    row.seconds = time.perf_counter() - start
    return row


def reference_columns(row: Row, case: Reproducer, what: Subject, arithmetic: str, rng: np.random.Generator) -> None:
    """Fill ``row``'s exact TVD, its Monte Carlo columns and its reproducer from the exact law of ``what`` on its
    reference instance ``case``; the simulated columns draw from ``rng`` (the run's, row after row), MRV2's from a
    generator of its own (:func:`mrv2_entry`), on this instance and on the instance its own test builds."""
    view = ModelView(case.model(), arithmetic)
    drafter = case.drafter()
    law = view_law(view, drafter, what.fn)
    length = drafter.height + 1
    ours, theirs = cells(law.completed(), case.vocab, length), cells(law.target(), case.vocab, length)
    distance = law.distance()
    row.tvd, row.tvd_exact = float(distance.tvd), human_number(distance.tvd)
    row.serving = str(serving_pass(ours, theirs, case.vocab, length))
    row.tvd_baseline = tvd_baseline_pass(ours, theirs)
    row.chi_square = chi_square_pass(ours, theirs, case.vocab, length)
    row.simulated = simulated_pass(ours, theirs, case.vocab, length, REPLICATIONS, rng)
    row.vllm_l2 = vllm_l2_pass(ours, theirs, case.vocab, length, REPLICATIONS, rng)
    own = view_law(ModelView(root_rows_everywhere(case.model()), arithmetic), case.drafter(), what.fn)
    row.mrv2 = mrv2_entry((ours, theirs, case.vocab),
                          (cells(own.completed(), case.vocab, length), cells(own.target(), case.vocab, length),
                           case.vocab, own.distance().tvd), length)
    row.reproducer = case.to_json()


def root_rows_everywhere(model) -> TableModel:
    """The pair whose draft and target rows are ``model``'s rows at the empty prefix in every context: the instance
    vLLM Model Runner V2's test builds, one target row reused at every position."""
    return TableModel(model.vocab, {None: model.p(())}, {None: model.q(())})


def mrv2_entry(as_is: tuple, own: tuple, length: int) -> dict:
    """vLLM Model Runner V2's chi-square test (:func:`~simulator.montecarlo.designs.mrv2_chi_square_pass`), each
    pass frequency over REPLICATIONS runs from a generator seeded :data:`MRV2_SEED` (so the column leaves the other
    columns' draws as they were):

    * ``pass``, ``target_pass``: on the instance the test itself builds (:func:`root_rows_everywhere`; ``own`` is
      ``(law, target's law, vocab, exact TVD)`` there), on the subject's law and on the target's own; ``tvd``, the
      subject's exact TVD there (0 where that instance cannot show the bug);
    * ``as_is``, ``as_is_target``: on the instance the other columns use (``as_is`` is ``(law, target's law,
      vocab)``), where every position is compared with the position-0 row although the rows depend on the prefix.
    """
    def run(law: np.ndarray, target: np.ndarray, vocab: int) -> float:
        return mrv2_chi_square_pass(law, target, vocab, length, REPLICATIONS, np.random.default_rng(MRV2_SEED))

    ours, theirs, vocab = as_is
    own_ours, own_theirs, own_vocab, own_tvd = own
    return {"pass": run(own_ours, own_theirs, own_vocab), "target_pass": run(own_theirs, own_theirs, own_vocab),
            "tvd": float(own_tvd), "tvd_exact": human_number(own_tvd),
            "as_is": run(ours, theirs, vocab), "as_is_target": run(theirs, theirs, vocab)}


def run_zoo(jobs: int = 1, tick: Tick = lambda stage, total: None) -> list[Row]:
    """Every mutant through the gate as a check expected lossless (:mod:`specproof.gate.runner`), and per mutant its
    exact TVD on a reference instance, the share of ``certify``'s default pairs that show it, ``hunt``'s time, the
    shrunk reproducer's size, and the probability that each Monte Carlo test design passes it
    (:mod:`simulator.montecarlo.designs`)."""
    rng = np.random.default_rng(SEED)
    with tempfile.TemporaryDirectory() as folder:
        outcomes = gate_outcomes(MUTANTS, Path(folder), jobs, lambda n: tick("gate", 0))
        rows = []
        for mutant, outcome in zip(MUTANTS, outcomes):
            rows.append(mutant_row(mutant, outcome, rng, jobs))
            tick("mutants", len(MUTANTS))
    return rows


def _p(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def _mrv2(entry: dict | None) -> str:
    """MRV2's column: on the instance its test builds, its pass probability on the mutant and on the target's own
    law, and the mutant's exact TVD there."""
    if entry is None:
        return "—"
    return f"{_p(entry['pass'])} / {_p(entry['target_pass'])} (TVD {entry['tvd']:.3g})"


def markdown(rows: list[Row], command: str, seconds: float, loops: LoopSection | None = None,
             designs_command: str | None = None) -> str:
    gaps = [abs(a - b) for r in rows if r.simulated
            for a, b in zip((r.tvd_baseline, r.chi_square), r.simulated[1:])]  # the serving column is exact
    flagged = sum(r.flagged for r in rows)
    lines = [
        "# The mutation zoo", "",
        f"Generated by `{command}` on {platform.machine()} / Python {platform.python_version()} in "
        f"{seconds / 60:.1f} min"
        + (f"; its Monte Carlo columns recomputed from the stored reference instances by `{designs_command}`"
           if designs_command else "")
        + f". {len(rows)} mutants, each a bug class that reached a serving system or a "
        "published implementation, written as an ordinary torch kernel (`specproof/gate/mutants.py`, "
        "`specproof/gate/torch_kernels.py`, certified unmodified) or a plugin (`simulator/verifiers/controls.py`).", "",
        f"**The gate flags {flagged} of {len(rows)}.**", "",
        "| mutant | bug class | kind | gate | exact TVD | default pairs showing it | hunt finds it in | shrunk "
        "reproducer | P(pass) serving test | P(pass) TVD-to-baseline | P(pass) chi-square | P(pass) vLLM's test "
        "| P(pass) vLLM MRV2's chi-square: mutant / target |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gate = ("FLAGGED" if r.flagged else "**missed**") + f" ({r.flagged_by})"
        hunt_time = "not in 120 s" if r.hunt_seconds is None else f"{r.hunt_seconds:.1f} s"
        lines.append(f"| {r.name} | {r.bug} | {r.kind} | {gate} | {r.tvd_exact} | {r.default_pairs} | {hunt_time} | "
                     f"{r.shrunk} | {r.serving} | {_p(r.tvd_baseline)} | {_p(r.chi_square)} | {_p(r.vllm_l2)} | "
                     f"{_mrv2(r.mrv2)} |")
    lines += [
        "", "## Columns", "",
        "- **gate**: `specproof gate` with the mutant as a check expected lossless, on the default battery "
        "(random-rational seeds 0–2, vocab 2 and 3, chain / complete / multi-chain at depth 2, branching 2, the "
        "shapes each is defined on) and a 5 s hunt; FLAGGED when the gate exits 1.",
        "- **exact TVD**: on the reference instance, the first instance that showed the loss (listed in the JSON "
        "with its reproducer); the Monte Carlo columns use the same instance's exact completed law.",
        f"- **default pairs**: of `certify`'s default model (synthetic, vocab 3, seeds 0–{DEFAULT_PAIRS - 1}), "
        "how many are LOSSY on a multi-chain of two chains of depth 2 (a chain of depth 2 where the mutant is "
        "chain-only; the control's demo tree where it has one). Synthetic rows have no zeros: a bug that needs "
        "a zero (a support violation) cannot show there.",
        f"- **hunt**: `specproof hunt` (seed 0) until the first loss, at most {HUNT_SECONDS:.0f} s; the shrunk "
        "reproducer's draft nodes, vocabulary and depth.",
        "- **P(pass)**: the probability that a test design *passes* the mutant at its own sample size, from the "
        "exact law (docs/gate.md, `simulator/montecarlo/designs.py`). *Serving test*: 10^5 draws, every per-position "
        "token frequency within 0.01 of the target's marginal; exact per cell, shown as the exact interval "
        "between the Bonferroni bound and the weakest cell. *TVD-to-baseline* (Layer Verification's method): "
        "10^6 draws, passes when the empirical TVD is within 0.001 of the same TVD of 10^6 direct target draws; "
        "normal approximation. *Chi-square* (specproof mc, one seed): 10^4 draws, Pearson at alpha 10^-3 on the "
        "tested prefix, any off-support sample rejects; noncentral chi-square approximation. *vLLM's test* "
        "(vLLM 0.11.0's `test_rejection_sampling_approximates_target_distribution`, run on the mutant's reference "
        "instance instead of its own V = 10, k = 2 pair): 10 to 10^5 draws, passes when the L2 distance of the "
        "pooled token histogram to the target shrinks 20 times faster than its distance to 100 random "
        f"distributions; no closed form, so the frequency over {REPLICATIONS} runs drawn from the exact law "
        f"(standard error at most {0.5 / np.sqrt(REPLICATIONS):.3f}). *vLLM MRV2's chi-square* (vLLM 0.33.0's "
        "`test_stochastic_rejection_sample`, Model Runner V2): 40,960 draws; at every position Pearson's chi-square "
        "of the token counts against the target's *position-0* row, bins expected below 5 merged (and dropped if "
        "the merged bin is still below 5), passing below df + 10·sqrt(2·df) at every position; the frequency over "
        "the same number of runs, from a generator of its own. Its test builds its instance with one target row "
        "reused at every position, so the column runs it on that instance: the reference instance's rows at the "
        "empty prefix in every context. It shows the pass frequency on the mutant, on the target's own law, and "
        "the mutant's exact TVD on that instance (0: that instance cannot show the bug). On the reference "
        "instance itself, whose rows depend on the prefix, the test fails the target's own law too "
        "(`mrv2.as_is_target` in the JSON).",
        f"- Error of the approximations, measured: {REPLICATIONS} replications of each test drawn from each "
        f"mutant's exact law; the largest gap between the analytic and the simulated pass probability over all "
        f"mutants is {max(gaps, default=0):.3f} (binomial noise of the simulation alone: about "
        f"{3 * 0.5 / np.sqrt(REPLICATIONS):.3f} at 3 sigma).", "",
        "A LOSSY verdict is a proof of a loss on that instance; a FLAGGED mutant was flagged on the instances "
        "listed, which is all a gate can say.", ""]
    if loops is not None:
        lines += loop_markdown(loops)
    return "\n".join(lines)


def headline(rows: list[dict]) -> str:
    """The README's table: per mutant, the gate's verdict, the exact TVD and each Monte Carlo design's chance to
    pass it (rows as in ``mutation_zoo.json``)."""
    lines = ["| mutant | bug class | specproof gate | exact TVD | P(pass): serving test (10^5) | "
             "TVD-to-baseline (10^6) | chi-square (10^4) | vLLM's test (10–10^5) | vLLM MRV2's χ² (40,960): "
             "mutant / target |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['bug']} | {'FLAGGED' if r['flagged'] else '**missed**'} | {r['tvd_exact']} | "
                     f"{r['serving']} | {_p(r['tvd_baseline'])} | {_p(r['chi_square'])} | {_p(r.get('vllm_l2'))} | "
                     f"{_mrv2(r.get('mrv2'))} |")
    return "\n".join(lines) + "\n"


def write_zoo_report(out: Path, command: str, jobs: int = 1, tick: Tick = lambda stage, total: None) -> bool:
    """Write ``mutation_zoo.md`` and ``.json``, the loop section included; True when the gate flags every mutant."""
    start = time.perf_counter()
    rows = run_zoo(jobs, tick)
    seconds = time.perf_counter() - start
    loops = loop_section(command, tick)
    write_files(out, rows, command, seconds, loops)
    return all(r.flagged for r in rows)


def write_files(out: Path, rows: list[Row], command: str, seconds: float, loops: LoopSection | None,
                designs_command: str | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "mutation_zoo.md").write_text(markdown(rows, command, seconds, loops, designs_command))
    (out / "mutation_zoo.json").write_text(json.dumps(zoo_json(rows, command, seconds, loops, designs_command),
                                                      indent=1, default=str))


def zoo_json(rows: list[Row], command: str, seconds: float, loops: LoopSection | None = None,
             designs_command: str | None = None) -> dict:
    """``mutation_zoo.json``: the command, the run's wall time and every mutant's row; the command that last
    recomputed the Monte Carlo columns (``designs_command``, where not the run itself); the loop section's under
    ``loops`` (its own command and time)."""
    out = {"command": command, "seconds": seconds, "rows": [asdict(r) for r in rows]}
    if designs_command is not None:
        out["designs_command"] = designs_command
    if loops is not None:
        out["loops"] = {"command": loops.command, "seconds": loops.seconds, "rows": [asdict(r) for r in loops.rows]}
    return out


# ---- the loop section: bug twins of whole generation loops (specproof/gate/loop_specimens.py) -------------------

@dataclass
class LoopRow:
    name: str
    loop: str  # the bug twin, module:function
    bug: str
    seen: str
    instance: str
    tvd: float
    tvd_exact: str
    off_support: float  # mass on continuations plain sampling never produces (a -1 among them)
    twin_tvd: float  # the correct twin's on the same instance: float64 rounding
    serving: str
    tvd_baseline: float | None
    chi_square: float | None
    vllm_l2: float | None
    simulated: list[float]  # the three designs' pass frequencies over REPLICATIONS draws from the exact law
    seconds: float
    gate: str = "—"  # the gate's verdict on the bug twin as a loop check expected lossless: flags or misses
    mrv2: dict | None = None  # vLLM Model Runner V2's chi-square test, as for the mutants (:func:`mrv2_entry`)


@dataclass
class LoopSection:
    command: str
    seconds: float
    rows: list[LoopRow]


def loop_row(twin, rng: np.random.Generator) -> LoopRow:
    """One bug class of :data:`specproof.gate.loop_specimens.TWINS` on its instance: the exact law of its bug twin's
    new tokens against plain sampling's (both enumerated under the torch capture), its TVD and off-support mass,
    the correct twin's TVD there, and each Monte Carlo design's probability to pass the bug twin
    (:mod:`simulator.montecarlo.designs`, as for the kernel mutants)."""
    from exact.generation_law import certify_loop
    from simulator.loops.builtin import plain_sampling
    from simulator.loops.convention import loop_name
    from simulator.loops.models import prefix_table_pair
    from specproof.gate.loop_specimens import NEW_TOKENS, PROMPT, speculative_loop

    start = time.perf_counter()
    target, draft = twin.pair()
    ours, theirs, vocab, distance = _loop_cells(twin, target, draft)
    correct = certify_loop(speculative_loop, plain_sampling, target, draft, PROMPT, NEW_TOKENS, twin.sampling)
    row = LoopRow(twin.name, loop_name(twin.loop), twin.bug, twin.seen, twin.describe(), float(distance.tvd),
                  human_number(distance.tvd), float(distance.off_support), float(correct.tvd),
                  str(serving_pass(ours, theirs, vocab, NEW_TOKENS)), tvd_baseline_pass(ours, theirs),
                  chi_square_pass(ours, theirs, vocab, NEW_TOKENS),
                  vllm_l2_pass(ours, theirs, vocab, NEW_TOKENS, REPLICATIONS, rng),
                  simulated_pass(ours, theirs, vocab, NEW_TOKENS, REPLICATIONS, rng), 0.0)
    own = _loop_cells(twin, *prefix_table_pair(root_rows_everywhere(twin.rows()), len(PROMPT)))
    row.mrv2 = mrv2_entry((ours, theirs, vocab), (*own[:3], own[3].tvd), NEW_TOKENS)
    row.seconds = time.perf_counter() - start
    return row


def _loop_cells(twin, target, draft) -> tuple[np.ndarray, np.ndarray, int, object]:
    """The bug twin's and plain sampling's exact laws of the N new tokens on ``(target, draft)``, as the designs'
    vectors over one vocabulary (a -1 placeholder one more token, ``V``), the vocabulary, and their distance."""
    from exact.generation_law import loop_law
    from simulator.loops.builtin import plain_sampling
    from specproof.gate.loop_specimens import NEW_TOKENS, PROMPT

    mine, ref = (loop_law(loop, target, draft, PROMPT, NEW_TOKENS, twin.sampling).law
                 for loop in (twin.loop, plain_sampling))
    vocab = target.vocab + any(t < 0 for seq in mine for t in seq)  # a placeholder is one more cell, token V
    ours, theirs = (cells(_placeholder_last(law, target.vocab), vocab, NEW_TOKENS) for law in (mine, ref))
    return ours, theirs, vocab, law_distance(mine, ref, Fraction(0))


def _placeholder_last(law: dict, vocab: int) -> dict:
    """The law with a negative token (a -1 placeholder emitted) renamed ``vocab``, a token the target never emits,
    so that the designs' cells hold it."""
    return {tuple(vocab if t < 0 else t for t in seq): prob for seq, prob in law.items()}


def loop_section(command: str, tick: Tick = lambda stage, total: None) -> LoopSection:
    """Every loop bug class on its instance (:func:`loop_row`), and through the gate (:func:`loop_gate_outcomes`)."""
    from specproof.gate.loop_specimens import TWINS

    rng = np.random.default_rng(SEED)
    start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        outcomes = loop_gate_outcomes(TWINS, Path(folder))
        for twin, outcome in zip(TWINS, outcomes):
            rows.append(loop_row(twin, rng))
            rows[-1].gate = "error" if outcome.errors else "flags" if outcome.lossy_cases else "misses"
            tick("loops", len(TWINS))
    return LoopSection(command, time.perf_counter() - start, rows)


def loop_gate_outcomes(twins, folder: Path) -> list[CheckOutcome]:
    """Every loop bug twin through the gate as a loop check expected lossless, on its own instance written as a
    prefix table (docs/gate.md, "Loop checks"): the rows of every context up to the new tokens' length."""
    from simulator.loops.convention import loop_name
    from specproof.gate.loop_battery import loop_battery
    from specproof.gate.loop_specimens import DEPTH, NEW_TOKENS, PROMPT

    checks = []
    for twin in twins:
        target, _ = twin.pair()
        table = folder / f"{twin.name}.json"
        table.write_text(json.dumps(_prefix_table(twin.rows(), target.vocab, NEW_TOKENS)))
        b = loop_battery({"models": ["prefix-table"], "tables": [str(table)], "depth": DEPTH,
                          "max_new_tokens": NEW_TOKENS, "prompt_ids": list(PROMPT)}, f"zoo.{twin.name}")
        checks.append(Check(twin.name, {"loop": loop_name(twin.loop), "sampling": dict(twin.sampling)}, "lossless",
                            b))
    config = Config(folder / "zoo.toml", {**GATE_DEFAULTS, "state": "state", "baselines": "none.json"}, tuple(checks))
    return run_gate(config, 1)


def _prefix_table(model, vocab: int, length: int) -> dict:
    """``--model table``'s JSON of ``model``'s rows at every context of up to ``length`` tokens."""
    contexts, level = [()], [()]
    for _ in range(length):
        level = [c + (x,) for c in level for x in range(vocab)]
        contexts += level
    return {"vocab": vocab, **{side: {",".join(map(str, c)): [str(Fraction(w)) for w in getattr(model, side)(c)]
                                      for c in contexts} for side in ("p", "q")}}


def write_loop_section(out: Path, command: str, tick: Tick = lambda stage, total: None) -> None:
    """Recompute the loop section only, and rewrite ``mutation_zoo.md`` and ``.json`` around the mutant rows
    already in ``out/mutation_zoo.json`` (``zoo --loops-only``: the mutants take most of an hour, the loops a
    minute).

    Raises
    ------
    InvalidParameterError
        ``out`` holds no ``mutation_zoo.json`` to keep the mutants of (field ``out``).
    """
    report = _existing_report(out, "--loops-only")
    rows = [Row(**r) for r in report["rows"]]
    write_files(out, rows, report["command"], report["seconds"], loop_section(command, tick),
                report.get("designs_command"))


def write_designs(out: Path, command: str, tick: Tick = lambda stage, total: None) -> None:
    """Recompute every Monte Carlo column of the mutants' rows from the reference instances already in
    ``out/mutation_zoo.json`` (their reproducers), with the generator a full run uses and in its order, so the
    columns come out as a full run's would; keep the gate, default-pair and hunt columns; then recompute the loop
    section, and rewrite ``mutation_zoo.md`` and ``.json`` (``zoo --designs-only``: a few minutes, where a full run
    takes most of an hour).

    Raises
    ------
    InvalidParameterError
        ``out`` holds no ``mutation_zoo.json`` (field ``out``).
    """
    from exact.reproducer import parse_reproducer
    from specproof.gate.battery import battery

    report = _existing_report(out, "--designs-only")
    mutants = {m.name: m for m in MUTANTS}
    rng = np.random.default_rng(SEED)
    rows = [Row(**r) for r in report["rows"]]
    for row in rows:
        if row.reproducer:
            mutant = mutants[row.name]
            arithmetic = battery({**BATTERY, **mutant.battery}, f"zoo.{mutant.name}")["arithmetic"]
            reference_columns(row, parse_reproducer(row.reproducer), subject(mutant.subject), arithmetic, rng)
        tick("mutants", len(rows))
    write_files(out, rows, report["command"], report["seconds"], loop_section(command, tick), command)


def _existing_report(out: Path, option: str) -> dict:
    """``out/mutation_zoo.json``, whose mutant rows ``option`` keeps."""
    from simulator.errors import InvalidParameterError

    path = out / "mutation_zoo.json"
    if not path.is_file():
        raise InvalidParameterError("out", f"{option} keeps the mutants of {path}, which does not exist: run "
                                           "specproof zoo without it first")
    return json.loads(path.read_text())


def loop_markdown(loops: LoopSection) -> list[str]:
    """The report's loop section: per bug class its instance, exact TVD, the correct twin's, and each design's
    chance to pass it."""
    gaps = [abs(a - b) for r in loops.rows for a, b in zip((r.tvd_baseline, r.chi_square), r.simulated[1:])]
    lines = [
        "## Whole generation loops", "",
        f"Generated by `{loops.command}` in {loops.seconds:.0f} s. {len(loops.rows)} bug classes reported in 2026 "
        "in how the rows and uniforms reach the verifier, each a generation loop in the user's convention "
        "(docs/loops.md) beside its correct twin, chain speculative sampling with transformers' processors "
        "(`specproof/gate/loop_specimens.py`, draft depth 2). Each is certified by `certify --loop` on the "
        "instance named: the exact law of its N new tokens, every torch draw enumerated, against plain "
        "sampling's with the same parameters. *gate*: the bug twin as a loop check expected lossless on that "
        "instance (written as a prefix table); the gate does not hunt loops, and default pairs and shrinking have "
        "no counterpart.", "",
        "| mutant | bug class | reported | instance | gate | hunt | exact TVD | off-support mass | correct twin's TVD "
        "| P(pass) serving test | P(pass) TVD-to-baseline | P(pass) chi-square | P(pass) vLLM's test "
        "| P(pass) vLLM MRV2's chi-square: mutant / plain sampling |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in loops.rows:
        lines.append(f"| {r.name} | {r.bug} | {r.seen} | {r.instance} | {r.gate} | not hunted | {r.tvd_exact} | "
                     f"{r.off_support:.3g} | {r.twin_tvd:.1e} | {r.serving} | {_p(r.tvd_baseline)} | "
                     f"{_p(r.chi_square)} | {_p(r.vllm_l2)} | {_mrv2(r.mrv2)} |")
    lines += [
        "", "- **exact TVD**: of the bug twin's law of the N tokens from plain sampling's, both the exact law of "
        "their float64 arithmetic (a prefix table's rows are float64 logits); the correct twin's TVD on the same "
        "instance is float64 rounding (LOSSLESS at 1e-10).",
        "- **P(pass)**: the five designs of the mutant table, at the same sample sizes, on the bug twin's exact law "
        "of the N tokens against plain sampling's (MRV2's also on plain sampling's own law); a -1 emitted is one "
        "more token, which plain sampling never "
        f"produces. Largest gap between the analytic and the simulated pass probability: {max(gaps, default=0):.3f}.",
        ""]
    return lines


def loop_headline(rows: list[dict]) -> str:
    """docs/gate.md's loop table (rows as in ``mutation_zoo.json``'s ``loops``)."""
    lines = ["| mutant | bug class | reported | exact TVD | P(pass): serving test (10^5) | TVD-to-baseline (10^6) | "
             "chi-square (10^4) | vLLM's test (10–10^5) | vLLM MRV2's χ² (40,960): mutant / plain sampling |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['bug']} | {r['seen']} | {r['tvd_exact']} | {r['serving']} | "
                     f"{_p(r['tvd_baseline'])} | {_p(r['chi_square'])} | {_p(r['vllm_l2'])} | "
                     f"{_mrv2(r.get('mrv2'))} |")
    return "\n".join(lines) + "\n"
