"""The Monte Carlo engine (SPEC §7.2): layer_verification.txt's toy methodology, with real statistics beside it.

For model seed ``s`` (the model pair built with seed ``s``) and trial ``t``, one round is drafted, verified and
completed to ``H+1`` tokens (with the outcome's completion rule) on trial ``t``'s counter stream under seed
``s`` (:class:`simulator.randomness.CounterRandomness`): a trial's result depends only on ``(s, t)`` and the
configuration, never on batch size or order. The reference path runs the shared implementation
(:func:`simulator.speculation.speculate`) trial by trial; where :mod:`simulator.batched` has a path for the
verifier it is used instead — it returns the same numbers for every trial, which the tests check.

Per seed the engine reports the mean accepted length, the paper's TVD of the ``N`` completed samples to
``q^(H+1)`` over all ``V^(H+1)`` cells, the same TVD for ``N`` direct target samples (the paper's baseline), and
Pearson's chi-square of the completed samples' first ``m`` tokens against the exact target marginal, where
``m`` is the largest with ``V^m ≤ N/20`` (so cells are well filled; see :mod:`simulator.statistics` for the
power bound). Across seeds: means, the standard error of the mean accepted length across model seeds (the
paper's SE), and a Bonferroni combination of the per-seed tests.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Iterable

import numpy as np

from .errors import InvalidParameterError
from .models import ModelPair, ModelView
from .batched import ContextRows, batched_rounds, has_batched_path
from .randomness import CounterRandomness
from .speculation import complete, speculate
from .statistics import ChiSquare, chi_square, detectable_tvd
from .drafting import Drafter, FixedShape
from .verifiers.registry import Verifier

BASELINE_KEY = 2**32 - 2  # the baseline sampler's stream: default_rng([seed, BASELINE_KEY])
BATCH = 20_000  # trials per batched call (memory: about 2n + 2H uniforms per trial)
ALPHA = 1e-3  # false-alarm rate of the combined test (Bonferroni over seeds)
POWER = 0.9  # the power at which the detectable TVD is stated
MAX_CELLS = 10**8  # the largest Σ^(H+1) a TVD table is built for (8 bytes a cell)




def encode(sequences: np.ndarray, vocab: int) -> np.ndarray:
    """Row ``z`` of ``sequences`` → ``Σ_i z_i V^(H−i)``: the cell of ``Σ^(H+1)`` it falls in."""
    weights = vocab ** np.arange(sequences.shape[1] - 1, -1, -1, dtype=np.int64)
    return sequences.astype(np.int64) @ weights


def run_trials(model: ModelPair, drafter: Drafter, verifier: Verifier, seed: int, trials: Iterable[int],
               progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Accepted lengths and completed sequences (rows of ``H+1`` tokens) of the given trials."""
    view = ModelView(model, "float")
    accepted, sequences = [], []
    for i, t in enumerate(trials):
        rng = CounterRandomness(seed, t)
        outcome = speculate(view, drafter, verifier, rng)
        accepted.append(outcome.accepted)
        sequences.append(complete(outcome, view, drafter.height, rng))
        if progress is not None and (i + 1) % 1000 == 0:
            progress(1000)
    if progress is not None:
        progress(len(accepted) % 1000)
    return np.array(accepted, dtype=np.int64), np.array(sequences, dtype=np.int64).reshape(len(accepted), -1)


def target_table(model: ModelPair, height: int, rows: ContextRows | None = None) -> np.ndarray:
    """``q^(H+1)`` over every cell of ``Σ^(H+1)`` (index as :func:`encode`), built level by level from the
    target rows of every context (``rows``, built here if not given)."""
    vocab = model.vocab
    if vocab ** (height + 1) > 5 * 10**7:
        raise InvalidParameterError("depth", f"V^(H+1) = {vocab}^{height + 1} cells is too many for a table")
    rows = rows or ContextRows(model, height)
    table = np.ones(1)
    for level in range(height + 1):
        block = rows.q[rows.offsets[level]: rows.offsets[level + 1]]
        table = (table[:, None] * block).reshape(-1)
    return table


def empirical_tvd(codes: np.ndarray, table: np.ndarray) -> float:
    """``½ Σ_z |N_z/N − q(z)|`` over every cell (unobserved cells contribute ``q(z)``)."""
    cells, counts = np.unique(codes, return_counts=True)
    freq = counts / len(codes)
    return float(0.5 * (np.abs(freq - table[cells]).sum() + 1.0 - table[cells].sum()))


def direct_target_codes(table: np.ndarray, seed: int, n: int) -> np.ndarray:
    """``n`` sequences drawn directly from ``q^(H+1)`` (the paper's baseline sampler)."""
    uniforms = np.random.default_rng([seed, BASELINE_KEY]).random(n)
    cumulative = np.cumsum(table)
    return np.minimum(np.searchsorted(cumulative, uniforms * cumulative[-1], side="right"), len(table) - 1)


def tested_prefix(vocab: int, height: int, trials: int) -> int:
    """``m``: the longest prefix whose ``V^m`` cells hold ``≥ 20`` samples each on average (at least 1)."""
    m = 1
    while m < height + 1 and vocab ** (m + 1) * 20 <= trials:
        m += 1
    return m


@dataclass(frozen=True)
class SeedResult:
    seed: int
    trials: int
    accept_len_mean: float
    accept_len_se: float  # within this seed: std / sqrt(N)
    tvd: float
    baseline_tvd: float
    test: ChiSquare


def run_seed(model: ModelPair, drafter: Drafter, name: str, verifier: Verifier, seed: int, trials: int,
             progress: Callable[[int], None] | None = None, rows: ContextRows | None = None) -> SeedResult:
    """One model seed: ``rows`` (the model's rows up to depth H) may be shared between verifiers."""
    height = drafter.height
    if model.vocab ** (height + 1) > MAX_CELLS:
        raise InvalidParameterError("depth", f"V^(H+1) = {model.vocab}^{height + 1} cells: over the {MAX_CELLS:.0e} "
                                             f"a TVD table can hold (the drafter's trees reach depth {height})")
    rows = rows or ContextRows(model, height)
    if isinstance(drafter, FixedShape) and has_batched_path(name, drafter.scheme, model.vocab, drafter.topology):
        parts = []
        for start in range(0, trials, BATCH):
            parts.append(batched_rounds(model, drafter.topology, drafter.scheme, name, seed,
                                        np.arange(start, min(start + BATCH, trials)), rows))
            if progress is not None:
                progress(len(parts[-1][0]))
        accepted = np.concatenate([a for a, _ in parts])
        codes = np.concatenate([c for _, c in parts])
    else:
        accepted, sequences = run_trials(model, drafter, verifier, seed, range(trials), progress)
        codes = encode(sequences, model.vocab)
    table = target_table(model, height, rows)
    m = tested_prefix(model.vocab, height, trials)
    tail = model.vocab ** (height + 1 - m)
    marginal = table.reshape(-1, tail).sum(axis=1)
    observed = np.bincount(codes // tail, minlength=len(marginal))
    return SeedResult(seed, trials, float(accepted.mean()), float(accepted.std(ddof=1) / math.sqrt(trials))
                      if trials > 1 else math.nan, empirical_tvd(codes, table),
                      empirical_tvd(direct_target_codes(table, seed, trials), table),
                      chi_square(observed, marginal, ALPHA))


@dataclass(frozen=True)
class MCSummary:
    """One configuration over ``seeds`` model seeds; the JSON of ``specproof mc``."""

    verifier: str
    seeds: int
    trials: int
    accept_len_mean: float  # mean accepted draft tokens per round (E[τ]), averaged over seeds
    accept_len_se: float  # standard error across model seeds (within-seed SE when there is one seed)
    tvd: float  # mean over seeds of the TVD of N completed samples to q^(H+1)
    baseline_tvd: float  # the same for N direct target samples
    test_prefix: int  # m: the test compares the first m tokens' law
    test_cells: int
    test_alpha: float
    test_min_p_value: float
    test_rejects: bool
    detectable_tvd: float  # on the first-m-token law, at power POWER, per seed
    per_seed: list[dict]

    def to_json(self) -> dict:
        return asdict(self)


def summarise(name: str, results: list[SeedResult], vocab: int, height: int) -> MCSummary:
    means = np.array([r.accept_len_mean for r in results])
    se = float(means.std(ddof=1) / math.sqrt(len(means))) if len(means) > 1 else results[0].accept_len_se
    trials = results[0].trials
    alpha = ALPHA / len(results)
    m = tested_prefix(vocab, height, trials)
    cells = max(r.test.cells for r in results)
    return MCSummary(
        name, len(results), trials, float(means.mean()), se,
        float(np.mean([r.tvd for r in results])), float(np.mean([r.baseline_tvd for r in results])),
        m, cells, ALPHA, float(min(r.test.p_value for r in results)),
        any(r.test.impossible > 0 or r.test.p_value < alpha for r in results),
        detectable_tvd(trials, cells, alpha, POWER),
        [{"seed": r.seed, "accept_len_mean": r.accept_len_mean, "accept_len_se": r.accept_len_se, "tvd": r.tvd,
          "baseline_tvd": r.baseline_tvd, "test_p_value": r.test.p_value} for r in results])


def monte_carlo(model_for_seed: Callable[[int], ModelPair], drafter: Drafter, name: str, verifier: Verifier,
                seeds: int, trials: int,
                progress: Callable[[int], None] | None = None) -> MCSummary:
    """Run ``trials`` rounds for each model seed ``0..seeds−1`` and summarise."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise InvalidParameterError("seeds", f"must be an integer ≥ 1, got {seeds!r}")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 2:
        raise InvalidParameterError("trials", f"must be an integer ≥ 2, got {trials!r}")
    results = [run_seed(model_for_seed(s), drafter, name, verifier, s, trials, progress) for s in range(seeds)]
    return summarise(name, results, model_for_seed(0).vocab, drafter.height)
