"""Does Layer Verification's toy study transfer to a real pair? (``specproof real-transfer``, docs/cli/real.md): the
synthetic model fitted to a real pair's overlaps, and its predictions set against the real verifiers' numbers
(:func:`run_transfer`)."""

from __future__ import annotations


import datetime
import math
import platform
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from simulator.errors import InvalidParameterError
from simulator.jsonfile import read_json, write_json, write_text
from simulator.models import SyntheticModel
from simulator.real.overlaps import CONTINUATION_TOKENS, OverlapSample, row_statistics
from specproof.reports.real_pair import SHAPES, RealRow

VOCAB = 15  # the toy study's vocabulary (docs/models.md)
#: the fit's reference sample: the rows of every context of length ≤ 2 of these many model seeds (4,820 rows)
FIT_SEEDS = 20
FIT_DEPTH = 2
#: the fit's coarse grid: ρ on [0, 1], each temperature log-spaced on [0.05, 5]
RHO_GRID = np.linspace(0.0, 1.0, 21)
TAU_GRID = np.geomspace(0.05, 5.0, 21)
#: what is fitted: ``shared`` ties the temperatures (τ_p = τ_q = τ), ``tau-q-1`` fixes τ_q = 1, ``free`` fits all
#: three (the law of Σ min(p, q) is symmetric in τ_p ↔ τ_q, so ``free`` is at best identified up to that swap)
FIT_MODES = ("shared", "tau-q-1", "free")
PREDICT_SEEDS = 40
#: Monte Carlo trials per model seed: the spread across seeds dominates the standard error (a seed's first rows
#: are one context each), so a few hundred trials a seed cost little precision
TRIALS = 400
NOISE_REPEATS = 50


# ---- (b) the fit --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Normals:
    """The standard normals ``u, ε^p, ε^q`` (each ``[rows, V]``) that :class:`SyntheticModel` draws for a set of
    contexts: with them, the model's rows for any ``(ρ, τ_p, τ_q)`` are arithmetic (common random numbers across
    the fit's candidates)."""

    u: np.ndarray
    eps_p: np.ndarray
    eps_q: np.ndarray


def synthetic_normals(seeds: Sequence[int] = range(FIT_SEEDS), depth: int = FIT_DEPTH,
                      vocab: int = VOCAB) -> Normals:
    """The normals of every context of length ≤ ``depth`` of the given model seeds, read through the model itself:
    at ``ρ = 1`` its logits are ``(u, u)``, at ``ρ = 0`` they are ``(ε^p, ε^q)``."""
    level, contexts = [()], [()]
    for _ in range(depth):
        level = [c + (x,) for c in level for x in range(vocab)]
        contexts += level
    u, eps_p, eps_q = [], [], []
    for seed in seeds:
        alike, apart = SyntheticModel(vocab, 1.0, seed=seed), SyntheticModel(vocab, 0.0, seed=seed)
        for context in contexts:
            u.append(alike.logits(context)[0])
            p, q = apart.logits(context)
            eps_p.append(p)
            eps_q.append(q)
    return Normals(np.array(u), np.array(eps_p), np.array(eps_q))


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def synthetic_rows(normals: Normals, rho: float, tau_p: float, tau_q: float) -> OverlapSample:
    """:class:`OverlapSample` of the synthetic model's rows on ``normals`` (docs/models.md's formula)."""
    p = _softmax((rho * normals.u + (1 - rho) * normals.eps_p) / tau_p)
    q = _softmax((rho * normals.u + (1 - rho) * normals.eps_q) / tau_q)
    return row_statistics(p, q)


def wasserstein(a: np.ndarray, b: np.ndarray) -> float:
    """The 1-Wasserstein distance between two samples' empirical laws: ``∫ |F_a − F_b|``, their CDFs' gap summed
    over the merged sample's steps (what ``scipy.stats.wasserstein_distance`` computes, at a twentieth of its
    time here: the fit calls it a thousand times)."""
    a, b = np.sort(a), np.sort(b)
    steps = np.sort(np.concatenate([a, b]))
    gap = np.searchsorted(a, steps[:-1], side="right") / len(a) - np.searchsorted(b, steps[:-1], side="right") / len(b)
    return float(np.sum(np.abs(gap) * np.diff(steps)))


@dataclass(frozen=True)
class Fit:
    """A fitted synthetic pair: its parameters; the 1-Wasserstein distance of its ``Σ min(p, q)`` law (on the
    reference normals) to the real sample; the noise floor (:func:`noise_floor`) at the sample's size; and, for
    the grid modes, the range of ``ρ`` and of the fitted temperature over the fit and the grid points within one
    noise floor of its distance (how well the sample pins them down)."""

    mode: str
    rho: float
    tau_p: float
    tau_q: float
    distance: float
    noise: float
    rho_range: tuple[float, float] | None = None
    tau_range: tuple[float, float] | None = None

    def model(self, seed: int) -> SyntheticModel:
        return SyntheticModel(VOCAB, self.rho, self.tau_p, self.tau_q, seed)


def _parameters(mode: str, x: Sequence[float]) -> tuple[float, float, float]:
    """``(ρ, τ_p, τ_q)`` of a fit's free coordinates ``x``: ρ, then log-temperatures."""
    rho = min(max(float(x[0]), 0.0), 1.0)
    if mode == "shared":
        return rho, math.exp(x[1]), math.exp(x[1])
    if mode == "tau-q-1":
        return rho, math.exp(x[1]), 1.0
    return rho, math.exp(x[1]), math.exp(x[2])


def fit_synthetic(sample: np.ndarray, mode: str = "shared", normals: Normals | None = None,
                  shared: Fit | None = None) -> Fit:
    """The synthetic pair nearest ``sample`` (real ``Σ min(p, q)`` values) in 1-Wasserstein distance: the best
    point of a grid (:data:`RHO_GRID` × :data:`TAU_GRID`), refined by bounded Nelder–Mead. ``free`` starts from
    the ``shared`` fit (given, or fitted here) and frees ``τ_q``. ``normals``: the reference sample (default
    :func:`synthetic_normals`)."""
    from scipy.optimize import minimize

    if mode not in FIT_MODES:
        raise InvalidParameterError("fit", f"choose from {FIT_MODES}, not {mode!r}")
    normals = normals or synthetic_normals()

    def distance(x: Sequence[float]) -> float:
        return wasserstein(sample, synthetic_rows(normals, *_parameters(mode, x)).overlap)

    grid: dict[tuple[float, float], float] = {}
    if mode == "free":
        shared = shared or fit_synthetic(sample, "shared", normals)
        start = [shared.rho, math.log(shared.tau_p), math.log(shared.tau_q)]
    else:
        grid = {(r, t): distance([r, math.log(t)]) for r in RHO_GRID for t in TAU_GRID}
        r, t = min(grid, key=grid.get)
        start = [r, math.log(t)]
    log_bounds = (math.log(TAU_GRID[0]) - 1, math.log(TAU_GRID[-1]) + 1)
    best = minimize(distance, start, method="Nelder-Mead", bounds=[(0.0, 1.0)] + [log_bounds] * (len(start) - 1),
                    options={"xatol": 1e-3, "fatol": 1e-5})
    x = best.x if best.fun <= distance(start) else start
    rho, tau_p, tau_q = _parameters(mode, x)
    noise = noise_floor(synthetic_rows(normals, rho, tau_p, tau_q).overlap, len(sample))
    ranges: list[tuple[float, float] | None] = [None, None]
    if grid:
        near = [point for point, d in grid.items() if d <= distance(x) + noise] + [(rho, tau_p)]
        ranges = [(float(min(v)), float(max(v))) for v in zip(*near)]
    return Fit(mode, rho, tau_p, tau_q, distance(x), noise, *ranges)


def noise_floor(reference: np.ndarray, size: int, repeats: int = NOISE_REPEATS, seed: int = 0) -> float:
    """The mean 1-Wasserstein distance of ``size`` values drawn at random from ``reference`` (a fitted model's
    ``Σ min(p, q)`` sample) to the whole of it: the distance a perfect fit shows on ``size`` independent
    positions."""
    rng = np.random.default_rng(seed)
    return float(np.mean([wasserstein(rng.choice(reference, size), reference) for _ in range(repeats)]))


def summary(values: np.ndarray) -> dict:
    """Mean, quartiles and size of a sample."""
    q1, median, q3 = np.quantile(values, [0.25, 0.5, 0.75])
    return {"n": int(len(values)), "mean": float(values.mean()), "q1": float(q1), "median": float(median),
            "q3": float(q3)}


# ---- (c) predictions on the fitted model --------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """One real row's configuration: the rule, its drafting and the tree."""

    verifier: str
    drafting: str
    shape: str
    depth: int
    branching: int


@dataclass(frozen=True)
class Prediction:
    mean: float  # expected accepted tokens per step, averaged over model seeds
    se: float  # standard error across model seeds
    method: str  # "exact" (the dynamic programme) or "Monte Carlo"


def predict(fit: Fit, plans: Sequence[Plan], seeds: int = PREDICT_SEEDS, trials: int = TRIALS,
            tick: Callable[[str, int], None] | None = None) -> dict[Plan, Prediction]:
    """Each plan's expected accepted tokens per step on the fitted model, over model seeds ``0..seeds−1`` (the
    toy study's averaging): per seed the exact ``E[τ]`` (:func:`exact.recursions.token_dp.tv_expected_accepted`)
    where the rule has the dynamic programme and drafting is i.i.d., else the Monte Carlo mean of ``trials``
    rounds (:func:`simulator.montecarlo.engine.run_seed`, as ``specproof mc``). All plans share each seed's model,
    so their differences carry less noise than their standard errors suggest."""
    from exact.recursions.token_dp import DP_RULES, tv_expected_accepted
    from simulator.drafting import FixedShape
    from simulator.montecarlo.context_rows import ContextRows
    from simulator.montecarlo.engine import run_seed
    from simulator.trees import make_topology
    from simulator.verifiers import VERIFIERS

    if seeds < 2:
        raise InvalidParameterError("seeds", f"must be an integer ≥ 2 (a standard error across seeds), got {seeds!r}")
    topologies = {plan: make_topology(SHAPES[plan.shape][0], plan.depth, plan.branching) for plan in plans}
    exact = {plan: plan.verifier in DP_RULES and plan.drafting == "iid" for plan in plans}
    values: dict[Plan, list[float]] = {plan: [] for plan in plans}
    for seed in range(seeds):
        model = fit.model(seed)
        rows = ContextRows(model, max(t.height for t in topologies.values()))
        for plan in plans:
            if exact[plan]:
                value = tv_expected_accepted(model, topologies[plan], plan.verifier, rows)
            else:
                value = run_seed(model, FixedShape(topologies[plan], plan.drafting), plan.verifier,
                                 VERIFIERS[plan.verifier].fn, seed, trials, rows=rows).accept_len_mean
            values[plan].append(value)
        if tick is not None:
            tick("model seeds", seeds)
    return {plan: Prediction(float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v))),
                             "exact" if exact[plan] else "Monte Carlo") for plan, v in values.items()}


# ---- (d) the comparison -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Compared:
    """A real row beside its prediction (accepted tokens per step)."""

    verifier: str
    drafting: str
    shape: str
    draft: str
    real: float
    real_se: float
    predicted: float
    predicted_se: float
    method: str

    @property
    def error(self) -> float:
        """Predicted − real."""
        return self.predicted - self.real

    @property
    def relative_error(self) -> float | None:
        """(Predicted − real) / real; ``None`` where nothing was accepted."""
        return self.error / self.real if self.real else None

    @property
    def sigmas(self) -> float | None:
        """The error in combined standard errors; ``None`` where both are 0."""
        se = math.hypot(self.real_se, self.predicted_se)
        return self.error / se if se else None


def spearman(predicted: Sequence[float], real: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties get average ranks); ``None`` for fewer than three rows or a constant
    column, where it is undefined or says nothing."""
    from scipy.stats import spearmanr

    if len(predicted) < 3 or len(set(predicted)) < 2 or len(set(real)) < 2:
        return None
    return float(spearmanr(predicted, real).statistic)


def compare(rows: Sequence[Compared]) -> dict:
    """Rank correlations of predicted against real per shape and over all ``rows``, and the rows with the largest
    absolute and relative errors."""
    shapes = {shape: [r for r in rows if r.shape == shape] for shape in dict.fromkeys(r.shape for r in rows)}
    worst = max(rows, key=lambda r: abs(r.error))
    worst_relative = max((r for r in rows if r.relative_error is not None), key=lambda r: abs(r.relative_error),
                         default=worst)
    return {
        "spearman": {shape: spearman([r.predicted for r in group], [r.real for r in group])
                     for shape, group in shapes.items()},
        "spearman_overall": spearman([r.predicted for r in rows], [r.real for r in rows]),
        "largest_error": {"row": _label(worst), "error": worst.error},
        "largest_relative_error": {"row": _label(worst_relative), "relative_error": worst_relative.relative_error},
        "mean_absolute_error": float(np.mean([abs(r.error) for r in rows])),
    }


def _label(row: Compared) -> str:
    return f"{row.verifier} {row.shape}"


# ---- the pair file ------------------------------------------------------------------------------------------------

def read_pair(path: str | Path) -> tuple[dict, list[RealRow]]:
    """``real_pair.json`` (``specproof real-report``): the whole object and its rows. A missing, unreadable or
    malformed file, a row without a field of :class:`RealRow`, an unknown verifier or shape, or a non-finite
    number is an :class:`InvalidParameterError` on ``pair``."""
    from simulator.verifiers import VERIFIERS

    data = read_json(path, "pair")
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list) or not data["rows"]:
        raise InvalidParameterError("pair", f"{path} holds no rows: expected real_pair.json's object with a "
                                            "non-empty list `rows` (write it with specproof real-report)")
    rows = []
    for i, row in enumerate(data["rows"]):
        where = f"{path}: rows[{i}]"
        if not isinstance(row, dict):
            raise InvalidParameterError("pair", f"{where} is not an object")
        missing = [f for f in RealRow.__dataclass_fields__ if f not in row]
        if missing:
            raise InvalidParameterError("pair", f"{where} has no {', '.join(missing)}")
        real = RealRow(**{f: row[f] for f in RealRow.__dataclass_fields__})
        if real.verifier not in VERIFIERS:
            raise InvalidParameterError("pair", f"{where}: unknown verifier {real.verifier!r}")
        if real.shape not in SHAPES:
            raise InvalidParameterError("pair", f"{where}: unknown shape {real.shape!r}; expected one of "
                                                f"{list(SHAPES)}")
        numbers = (real.block_efficiency, real.block_efficiency_se, real.depth, real.branching)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in numbers):
            raise InvalidParameterError("pair", f"{where}: block_efficiency, block_efficiency_se, depth and "
                                                "branching must be finite numbers")
        rows.append(real)
    return data, rows


def main_draft(rows: Sequence[RealRow]) -> str:
    """The draft of most rows: the one the comparison is about (others are contrasts, each with its own fit)."""
    return Counter(r.draft for r in rows).most_common(1)[0][0]


# ---- the whole report ---------------------------------------------------------------------------------------------

@dataclass
class Transfer:
    """Everything the report shows; :meth:`to_json` is ``real_transfer.json`` less its header."""

    main_draft: str
    question_ids: list
    fits: dict[str, Fit]  # per draft, the fit predictions use
    alternatives: dict[str, Fit]  # the main draft's fits in every mode (identifiability)
    ks: dict  # two-sample Kolmogorov–Smirnov of the main draft's real sample against its fit's
    real: dict[str, OverlapSample]
    fitted: dict[str, OverlapSample]
    compared: list[Compared]
    stats: dict
    seeds: int  # model seeds of the predictions
    trials: int  # Monte Carlo rounds a seed
    seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        def stats(sample: OverlapSample) -> dict:
            return {"overlap": summary(sample.overlap), "draft_top_mean": float(sample.draft_top.mean()),
                    "target_top_mean": float(sample.target_top.mean())}

        return {
            "main_draft": self.main_draft, "questions": self.question_ids, "vocab": VOCAB, "seeds": self.seeds,
            "trials": self.trials,
            "fits": {d: asdict(f) for d, f in self.fits.items()},
            "fits_by_mode": {m: asdict(f) for m, f in self.alternatives.items()},
            "ks": self.ks,
            "overlap": {d: {"real": stats(self.real[d]), "fitted": stats(self.fitted[d])} for d in self.real},
            "real_overlap_values": {d: [round(float(v), 6) for v in s.overlap] for d, s in self.real.items()},
            "rows": [{**asdict(r), "error": r.error, "relative_error": r.relative_error, "sigmas": r.sigmas}
                     for r in self.compared],
            "comparison": self.stats, "seconds": self.seconds,
        }


def run_transfer(pair_rows: Sequence[RealRow], real: dict[str, OverlapSample], question_ids: list,
                 mode: str = "shared", seeds: int = PREDICT_SEEDS, trials: int = TRIALS,
                 tick: Callable[[str, int], None] | None = None, normals: Normals | None = None) -> Transfer:
    """Stages (b)–(d) on measured samples ``real`` (a :class:`OverlapSample` per draft of ``pair_rows``): fit each
    draft, predict its rows, compare the main draft's rows (others are listed, not ranked). ``normals``: the fit's
    reference sample (default :func:`synthetic_normals`).

    The steps: :func:`measure_overlaps`, the real pair's per-position acceptance ``Σ_x min(p(x), q(x))`` (softmax at
    temperature 1) on target-generated continuations of MT-bench chat prompts; :func:`fit_synthetic`, the
    ``(ρ, τ_p, τ_q)`` of ``SyntheticModel(vocab=15)`` whose per-context ``Σ min(p, q)`` law is nearest
    (1-Wasserstein) to the real sample; :func:`predict`, each real row's expected accepted tokens per step on the
    fitted model with the project's engines, averaged over model seeds; :func:`compare`, predicted against real
    (``reports/real_pair.json``) and the rank correlations. Why one dimension: ``Σ min(p, q)`` is the one quantity
    every verifier's acceptance starts from, measurable on a real pair from plain forward passes; what it leaves out
    (how peaked each row is, how the positions of a step depend on each other) is exactly what the comparison tests.
    """
    from scipy.stats import ks_2samp

    seconds: dict[str, float] = {}
    start = time.perf_counter()
    normals = normals or synthetic_normals()
    draft = main_draft(pair_rows)
    alternatives: dict[str, Fit] = {}
    for m in FIT_MODES:
        alternatives[m] = fit_synthetic(real[draft].overlap, m, normals, alternatives.get("shared"))
    fits = {draft: alternatives[mode]}
    for other in dict.fromkeys(r.draft for r in pair_rows if r.draft != draft):
        fits[other] = fit_synthetic(real[other].overlap, mode, normals)
    fitted = {d: synthetic_rows(normals, f.rho, f.tau_p, f.tau_q) for d, f in fits.items()}
    test = ks_2samp(real[draft].overlap, fitted[draft].overlap)
    seconds["fit"] = time.perf_counter() - start
    start = time.perf_counter()
    predictions = {}
    for d, fit in fits.items():
        plans = list(dict.fromkeys(_plan(r) for r in pair_rows if r.draft == d))
        per_draft = None if tick is None else (lambda stage, total, d=d: tick(f"{stage}, {d}", total))
        predictions[d] = predict(fit, plans, seeds, trials, per_draft)
    seconds["predict"] = time.perf_counter() - start
    compared = [Compared(r.verifier, r.drafting, r.shape, r.draft, r.accepted, r.block_efficiency_se,
                         predictions[r.draft][_plan(r)].mean, predictions[r.draft][_plan(r)].se,
                         predictions[r.draft][_plan(r)].method) for r in pair_rows]
    stats = compare([c for c in compared if c.draft == draft])
    return Transfer(draft, question_ids, fits, alternatives,
                    {"statistic": float(test.statistic), "p_value": float(test.pvalue)}, real, fitted, compared,
                    stats, seeds, trials, seconds)


def _plan(row: RealRow) -> Plan:
    return Plan(row.verifier, row.drafting, row.shape, row.depth, row.branching)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1%}"


@dataclass(frozen=True)
class TransferRun:
    """The report's header: the command, the date, the machine in words, and the pair file it read (its path,
    and the command and questions it records)."""

    command: str
    date: str
    machine: str
    pair: str
    pair_command: str
    pair_questions: list | None


def write_transfer_report(out: Path, transfer: Transfer, pair: str, pair_data: dict, command: str) -> None:
    """``real_transfer.md``, ``real_transfer.json`` and ``real_transfer.png`` in ``out``; ``pair_data`` is the pair
    file's object (its command and questions are quoted)."""
    run = TransferRun(command, datetime.date.today().isoformat(), f"{platform.machine()}, {platform.python_version()}",
                      pair, pair_data.get("command", "?"), pair_data.get("questions"))
    write_text(out / "real_transfer.md", transfer_markdown(transfer, run), "out")
    write_json(out / "real_transfer.json", transfer_json(transfer, run), "out")
    plot_transfer(out / "real_transfer.png", transfer)


def transfer_json(t: Transfer, run: TransferRun) -> dict:
    """``real_transfer.json``: the header's fields and :meth:`Transfer.to_json`."""
    return {"command": run.command, "date": run.date, "pair": run.pair, "pair_command": run.pair_command,
            "pair_questions": run.pair_questions, **t.to_json()}


def transfer_markdown(t: Transfer, run: TransferRun) -> str:
    """``real_transfer.md``: the method, the fit, and predicted against real."""
    lines = [
        "# Does the toy study transfer to a real pair?",
        "",
        f"Generated by `{run.command}` on {run.date} ({run.machine}), from `{run.pair}` (made by "
        f"`{run.pair_command}`).",
        "",
        f"The real pair: SmolLM2-135M-Instruct and its draft `{t.main_draft}`. Its per-position acceptance "
        f"Σ_x min(p(x), q(x)) (both rows at temperature 1) is measured at every position of a target-generated "
        f"continuation of up to {CONTINUATION_TOKENS} tokens after the chat prompt of MT-bench questions "
        f"{', '.join(str(q) for q in t.question_ids)} (first turn), both models' rows from one forward pass each. "
        f"The synthetic pair of the toy study (V = {VOCAB}) is fitted to that sample by 1-Wasserstein distance, on "
        f"the rows of every context of length ≤ {FIT_DEPTH} of {FIT_SEEDS} model seeds. Each real row's rule, "
        f"drafting and tree is then run on the fitted pair: exact E[τ] where the rule has the dynamic programme, "
        f"else Monte Carlo ({t.trials} rounds a seed), averaged over {t.seeds} model seeds (± SE across seeds).",
        "",
    ]
    return "\n".join(lines + _fit_lines(t) + _prediction_lines(t))


def _fit_lines(t: Transfer) -> list[str]:
    fit = t.fits[t.main_draft]
    real, fitted = t.real[t.main_draft], t.fitted[t.main_draft]
    r_stats, f_stats = summary(real.overlap), summary(fitted.overlap)
    lines = [
        "## The fit",
        "",
        f"Fitted ({fit.mode}): **ρ = {fit.rho:.3f}, τ_p = {fit.tau_p:.3f}, τ_q = {fit.tau_q:.3f}**, 1-Wasserstein "
        f"distance {fit.distance:.4f}; a perfect fit shows {fit.noise:.4f} on {r_stats['n']} independent positions "
        f"(real positions of one answer are not independent, so the real floor is higher). Two-sample KS "
        f"{t.ks['statistic']:.3f} (p = {t.ks['p_value']:.2g}, as if positions were independent).",
        "",
        "| Σ min(p, q) | n | mean | Q1 | median | Q3 | mean max p | mean max q |",
        "|---|---|---|---|---|---|---|---|",
        f"| real | {r_stats['n']} | {r_stats['mean']:.3f} | {r_stats['q1']:.3f} | {r_stats['median']:.3f} | "
        f"{r_stats['q3']:.3f} | {real.draft_top.mean():.3f} | {real.target_top.mean():.3f} |",
        f"| fitted | {f_stats['n']} | {f_stats['mean']:.3f} | {f_stats['q1']:.3f} | {f_stats['median']:.3f} | "
        f"{f_stats['q3']:.3f} | {fitted.draft_top.mean():.3f} | {fitted.target_top.mean():.3f} |",
        "",
        "The largest probabilities are not fitted; they show how peaked the rows are on each side.",
        "",
        "Identifiability: the law of Σ min(p, q) is symmetric in τ_p ↔ τ_q (ε^p and ε^q are exchangeable), so "
        "the three parameters are at best identified up to that swap. The fit in each mode:",
        "",
        "| mode | ρ | τ_p | τ_q | distance | noise floor | grid ρ within the floor | grid τ within the floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, f in t.alternatives.items():
        spans = [f"{r[0]:.2f}–{r[1]:.2f}" if r else "–" for r in (f.rho_range, f.tau_range)]
        lines.append(f"| {mode} | {f.rho:.3f} | {f.tau_p:.3f} | {f.tau_q:.3f} | {f.distance:.4f} | {f.noise:.4f} | "
                     f"{spans[0]} | {spans[1]} |")
    return lines + [
        "",
        "A mode whose distance is within the noise floor of another's fits the sample as well. The last two "
        "columns: the grid points whose distance is within one noise floor of the fit's (τ: the fitted "
        "temperature, τ_p = τ_q in `shared`, τ_p in `tau-q-1`); the wider they are, the less the sample pins the "
        "parameters down. The predictions' standard errors do not include this uncertainty.",
        "",
    ]


def _prediction_lines(t: Transfer) -> list[str]:
    stats = t.stats
    lines = [
        "## Predicted against real accepted tokens per step",
        "",
        "Real: block efficiency − 1 ± its SE across questions. Error: predicted − real; σ: the error over the "
        "combined standard errors.",
        "",
        "| verifier | drafting | tree | draft | real | predicted | method | error | relative | σ |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in t.compared:
        sigmas = "–" if r.sigmas is None else f"{r.sigmas:+.1f}"
        lines.append(f"| `{r.verifier}` | {r.drafting} | {r.shape} | `{r.draft}` | {r.real:.3f} ± {r.real_se:.3f} | "
                     f"{r.predicted:.3f} ± {r.predicted_se:.3f} | {r.method} | {r.error:+.3f} | "
                     f"{_percent(r.relative_error)} | {sigmas} |")
    ranks = ", ".join(f"{shape} {_fmt(v, 2)}" for shape, v in stats["spearman"].items())
    lines += [
        "",
        f"Over the {sum(r.draft == t.main_draft for r in t.compared)} rows of `{t.main_draft}`: Spearman rank "
        f"correlation of predicted against real {_fmt(stats['spearman_overall'], 2)} overall; per tree: {ranks} "
        f"(– where undefined). Mean absolute error {stats['mean_absolute_error']:.3f}; largest error "
        f"{stats['largest_error']['error']:+.3f} ({stats['largest_error']['row']}); largest relative error "
        f"{_percent(stats['largest_relative_error']['relative_error'])} ({stats['largest_relative_error']['row']}).",
        "",
    ]
    for other, f in t.fits.items():
        if other != t.main_draft:
            o_stats = summary(t.real[other].overlap)
            lines += [f"Contrast `{other}`: its own fit ρ = {f.rho:.3f}, τ_p = {f.tau_p:.3f}, τ_q = {f.tau_q:.3f} "
                      f"(distance {f.distance:.4f}; real Σ min mean {o_stats['mean']:.3f}, median "
                      f"{o_stats['median']:.3f}); its rows are listed above and left out of the ranks and errors.",
                      ""]
    return lines + [
        "On a chain, SpS, RRS and K-SEQ token verification draw one candidate per node and accept alike: their "
        "predictions are equal (exact) and their real values differ by noise alone, so the chain's rank "
        "correlation mostly ranks noise.",
        "",
        f"Stage times: measure {t.seconds.get('measure', float('nan')):.0f} s, fit {t.seconds['fit']:.0f} s, "
        f"predict {t.seconds['predict']:.0f} s.",
        "",
        "![predicted against real](real_transfer.png)",
        "",
    ]


def plot_transfer(path: Path, t: Transfer) -> None:
    """``real_transfer.png``. Left: real against predicted accepted tokens per step, one point per row, with
    y = x. Right: the main draft's real and fitted Σ min(p, q) histograms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    colours = {"chain": "tab:blue", "complete": "tab:orange", "multi-chain": "tab:green"}
    for r in t.compared:
        main = r.draft == t.main_draft
        left.errorbar(r.real, r.predicted, xerr=r.real_se, yerr=r.predicted_se, fmt="o" if main else "s",
                      color=colours.get(r.shape, "black") if main else "tab:grey", ms=4, capsize=2)
        left.annotate(r.verifier, (r.real, r.predicted), fontsize=6, xytext=(3, 3), textcoords="offset points")
    values = [v for r in t.compared for v in (r.real, r.predicted)]
    low, high = min(values) * 0.9, max(values) * 1.1
    left.plot([low, high], [low, high], "k--", lw=1, label="y = x")
    for shape, colour in colours.items():
        left.plot([], [], "o", color=colour, label=shape)
    if any(r.draft != t.main_draft for r in t.compared):
        left.plot([], [], "s", color="tab:grey", label="contrast draft")
    left.set_xlabel("real accepted tokens per step (± SE)")
    left.set_ylabel("predicted by the fitted toy pair (± SE)")
    left.legend(fontsize=7)
    bins = np.linspace(0, 1, 26)
    right.hist(t.real[t.main_draft].overlap, bins=bins, density=True, alpha=0.5, label="real")
    right.hist(t.fitted[t.main_draft].overlap, bins=bins, density=True, alpha=0.5, label="fitted (V = 15)")
    right.set_xlabel("Σ min(p, q) per position")
    right.set_ylabel("density")
    right.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
