"""Five Monte Carlo test designs of the field and the probability that each *passes* a verifier, computed from its
exact completed law, never by re-running it (docs/gate.md, "The mutation zoo")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import scipy  # its submodules load on first use: scipy.stats and scipy.optimize cost seconds at every CLI start

from simulator.montecarlo.engine import ALPHA, tested_prefix

SERVING_SAMPLES, SERVING_TOLERANCE = 100_000, 0.01
LV_SAMPLES, LV_TOLERANCE = 1_000_000, 1e-3
CHI_SAMPLES = 10_000
# vLLM 0.11.0's test_rejection_sampling_approximates_target_distribution (tests/v1/sample/test_rejection_sampler.py)
VLLM_SIZES, VLLM_REFERENCES, VLLM_MULTIPLIER = (10, 100, 1_000, 10_000, 100_000), 100, 20
# vLLM 0.33.0's Model Runner V2 test_stochastic_rejection_sample (tests/v1/spec_decode/test_rejection_sampler_utils.py):
# 10 × its VOCAB_SIZE 4096 trials, bins expected below 5 merged, chi² below df + 10·sqrt(2·df) at every position
MRV2_TRIALS, MRV2_MIN_EXPECTED, MRV2_SIGMAS = 40_960, 5.0, 10
#: the seed of the generator each mutant's MRV2 column is drawn with (its own, so the column leaves the others' draws
#: as they were)
MRV2_SEED = 20260633


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def __str__(self) -> str:
        if self.high - self.low < 5e-4:
            return f"{self.low:.3f}"
        return f"[{self.low:.3f}, {self.high:.3f}]"


def cells(law: Mapping[Sequence[int], object], vocab: int, length: int) -> np.ndarray:
    """A law over sequences of ``length`` tokens as a float vector over the ``vocab**length`` sequences.

    The designs take ``law`` and ``target`` (the completed law and ``q^(H+1)``) as such vectors, sequences in
    lexicographic order: :func:`serving_pass` (exact bounds), :func:`tvd_baseline_pass` (Layer Verification's
    methodology) and :func:`chi_square_pass` (``specproof mc``), the last two approximate, with :func:`simulated_pass`
    measuring their error; and :func:`vllm_l2_pass`, vLLM's own test, whose ratio of distances has no closed form:
    its pass probability is a frequency over replications drawn from the exact law.
    """
    out = np.zeros(vocab**length)
    for seq, prob in law.items():
        index = 0
        for token in seq:
            index = index * vocab + token
        out[index] += float(prob)
    return out


def _marginals(vector: np.ndarray, vocab: int, length: int) -> np.ndarray:
    """``[length, vocab]``: the law of each position."""
    shaped = vector.reshape((vocab,) * length)
    return np.array([shaped.sum(axis=tuple(a for a in range(length) if a != j)) for j in range(length)])


def serving_pass(law: np.ndarray, target: np.ndarray, vocab: int, length: int, n: int = SERVING_SAMPLES,
                 tolerance: float = SERVING_TOLERANCE) -> Interval:
    """Exact bounds on the serving-style test's pass probability: ``n`` completed sequences; at each position ``j``
    every token's empirical frequency must be within ``tolerance`` of the target's marginal ``q_j(x)`` (an absolute
    tolerance, as in ``torch.testing``-style checks). Each cell's count is Binomial(n, law_j(x)), so each cell's pass
    probability is exact (``scipy.stats.binom``); the joint one lies between the Bonferroni bound
    ``1 − Σ P(cell fails)`` and the least cell's, both exact and returned as an interval."""
    ours, theirs = _marginals(law, vocab, length).ravel(), _marginals(target, vocab, length).ravel()
    high_count = np.floor(n * (theirs + tolerance) + 1e-9)
    low_count = np.ceil(n * (theirs - tolerance) - 1e-9)
    cell_pass = scipy.stats.binom.cdf(high_count, n, ours) - scipy.stats.binom.cdf(low_count - 1, n, ours)
    cell_pass = np.clip(cell_pass, 0.0, 1.0)  # a difference of two CDFs may round a hair below 0 or above 1
    return Interval(max(0.0, 1.0 - float((1.0 - cell_pass).sum())), float(cell_pass.min()))


def _abs_deviation_moments(n: int, prob: float, center: float) -> tuple[float, float]:
    """Mean and variance of ``|K/n − center|`` for ``K ~ Binomial(n, prob)``, summed over the pmf where it is not
    negligible (12 standard deviations, or all of it)."""
    if prob <= 0.0:
        return center, 0.0
    sd = np.sqrt(n * prob * (1 - prob))
    lo, hi = max(0, int(n * prob - 12 * sd) - 1), min(n, int(n * prob + 12 * sd) + 2)
    k = np.arange(lo, hi + 1)
    pmf = scipy.stats.binom.pmf(k, n, prob)
    dev = np.abs(k / n - center)
    mean = float((pmf * dev).sum())
    return mean, max(float((pmf * dev**2).sum()) - mean**2, 0.0)


def _tvd_moments(law: np.ndarray, target: np.ndarray, n: int) -> tuple[float, float]:
    means, variances = zip(*(_abs_deviation_moments(n, float(p), float(q)) for p, q in zip(law, target)))
    return 0.5 * sum(means), 0.25 * sum(variances)


def tvd_baseline_pass(law: np.ndarray, target: np.ndarray, n: int = LV_SAMPLES,
                      tolerance: float = LV_TOLERANCE) -> float:
    """The TVD-to-baseline test's pass probability (Layer Verification's toy methodology): ``n`` completed
    sequences and ``n`` direct target samples each give an empirical TVD to ``q^(H+1)``; the test passes when they
    differ by less than ``tolerance`` (the paper reports TVDs to three decimals). Each TVD is
    ``½ Σ_z |K_z/n − q_z|``, ``K_z ~ Binomial(n, π_z)``: its mean exact per cell, its variance the sum of the
    cells' (Poissonization: the multinomial's covariance is dropped), and the difference of the two taken as
    normal — the error of this design, measured by :func:`simulated_pass`."""
    mean_v, var_v = _tvd_moments(law, target, n)
    mean_b, var_b = _tvd_moments(target, target, n)
    sd = np.sqrt(var_v + var_b)
    shift = mean_v - mean_b
    if sd == 0:
        return float(abs(shift) < tolerance)
    return float(scipy.stats.norm.cdf((tolerance - shift) / sd) - scipy.stats.norm.cdf((-tolerance - shift) / sd))


def chi_square_pass(law: np.ndarray, target: np.ndarray, vocab: int, length: int, n: int = CHI_SAMPLES,
                    alpha: float = ALPHA) -> float:
    """specproof's chi-square test's pass probability (``specproof mc`` on one seed): ``n`` completed sequences,
    Pearson's test of the first ``m`` tokens' law (:func:`~simulator.montecarlo.engine.tested_prefix`), cells
    expected below 5 pooled, at ``alpha``; any sample on a sequence the target excludes rejects. The probability:
    ``(1 − off-support mass)^n`` (exact) times ``P(χ²_df(λ) ≤ crit)``, the noncentral chi-square with
    ``λ = n Σ_c (π_c − q_c)²/q_c`` over the pooled cells — Pearson's statistic under an alternative, to first
    order."""
    m = tested_prefix(vocab, length - 1, n)
    tail = vocab ** (length - m)
    ours, theirs = law.reshape(-1, tail).sum(axis=1), target.reshape(-1, tail).sum(axis=1)
    supported = theirs > 0
    no_impossible = (1.0 - float(ours[~supported].sum())) ** n
    expected = theirs * n
    small = expected < 5
    pooled_q = np.append(theirs[~small], theirs[small].sum())
    pooled_p = np.append(ours[~small], ours[small & supported].sum())
    keep = pooled_q > 0
    pooled_q, pooled_p = pooled_q[keep], pooled_p[keep]
    if no_impossible == 0 or pooled_p.sum() == 0:  # every draw lands where the target excludes it: always rejected
        return 0.0
    pooled_p = pooled_p / pooled_p.sum()  # given no impossible sample
    df = max(len(pooled_q) - 1, 1)
    crit = scipy.stats.chi2.isf(alpha, df)
    noncentrality = n * float(((pooled_p - pooled_q) ** 2 / pooled_q).sum())
    return no_impossible * float(scipy.stats.ncx2.cdf(crit, df, noncentrality) if noncentrality > 0
                                 else scipy.stats.chi2.cdf(crit, df))


def simulated_pass(law: np.ndarray, target: np.ndarray, vocab: int, length: int, replications: int,
                   rng: np.random.Generator) -> list[float]:
    """The three designs run ``replications`` times on samples drawn from the exact ``law`` (multinomial counts
    over its cells): the pass frequencies ``[serving, TVD-to-baseline, chi-square]``, the second method that
    measures the error of the analytic columns (``specproof zoo`` runs it; reports/mutation_zoo.md states the
    largest gap)."""
    from simulator.montecarlo.statistics import chi_square

    law = law / law.sum()
    counts = rng.multinomial(SERVING_SAMPLES, law, size=replications)
    freq = np.stack([_marginals(c, vocab, length).ravel() for c in counts]) / SERVING_SAMPLES
    serving = float((np.abs(freq - _marginals(target, vocab, length).ravel()) <= SERVING_TOLERANCE).all(1).mean())
    ours = rng.multinomial(LV_SAMPLES, law, size=replications) / LV_SAMPLES
    theirs = rng.multinomial(LV_SAMPLES, target, size=replications) / LV_SAMPLES
    gap = 0.5 * np.abs(ours - target).sum(1) - 0.5 * np.abs(theirs - target).sum(1)
    lv = float((np.abs(gap) < LV_TOLERANCE).mean())
    m = tested_prefix(vocab, length - 1, CHI_SAMPLES)
    tail = vocab ** (length - m)
    prefix = target.reshape(-1, tail).sum(axis=1)
    samples = rng.multinomial(CHI_SAMPLES, law.reshape(-1, tail).sum(axis=1), size=replications)
    chi = float(np.mean([not chi_square(s, prefix, ALPHA).rejects for s in samples]))
    return [serving, lv, chi]


def _pooled(counts: np.ndarray, vocab: int, length: int) -> np.ndarray:
    """Token counts of the first ``length − 1`` positions pooled (vLLM's ``output_token_ids[:, :-1]``; the one
    position when ``length`` is 1), from counts over the ``V^length`` sequences: ``[..., V]``."""
    shaped = counts.reshape(counts.shape[:-1] + (vocab,) * length)
    first = range(max(length - 1, 1))
    lead = counts.ndim - 1
    return sum(shaped.sum(axis=tuple(lead + a for a in range(length) if a != j)) for j in first)


def vllm_l2_pass(law: np.ndarray, target: np.ndarray, vocab: int, length: int, replications: int,
                 rng: np.random.Generator) -> float:
    """vLLM's distribution test (0.11.0, ``test_rejection_sampling_approximates_target_distribution``), its pass
    frequency over ``replications`` runs on samples drawn from the exact ``law``. Each run draws, for each sample
    size ``n`` in 10, 100, …, 100,000, ``n`` completed sequences; the normalised histogram ``h_n`` of their first
    ``length − 1`` tokens is compared by L2 distance with the target's pooled marginal ``t`` (``d_n = ‖h_n − t‖``)
    and with 100 random distributions ``R`` (``softmax`` of uniforms, as vLLM draws them; ``r_n = ‖R − h_n‖_F /
    100``, its ``torch.dist`` divided by 100). It passes when ``d_10 / d_100000 > 20 · r_10 / r_100000``: the
    distance to the target must shrink twenty times faster than to the references. There is no p-value and no
    closed form; the frequency's standard error is at most ``0.5 / √replications``."""
    law = law / law.sum()
    positions = max(length - 1, 1)
    pooled_target = _pooled(target, vocab, length) / positions
    passed = 0
    for _ in range(replications):
        references = np.exp(rng.random((VLLM_REFERENCES, vocab)))
        references /= references.sum(axis=1, keepdims=True)
        counts = np.stack([rng.multinomial(n, law) for n in VLLM_SIZES])
        hist = _pooled(counts, vocab, length) / (np.array(VLLM_SIZES)[:, None] * positions)
        d = np.linalg.norm(hist - pooled_target, axis=1)
        r = np.linalg.norm(references[None] - hist[:, None], axis=(1, 2)) / VLLM_REFERENCES
        ratio = d[0] / d[-1] if d[-1] > 0 else np.inf
        passed += bool(ratio > VLLM_MULTIPLIER * r[0] / r[-1])
    return passed / replications


def mrv2_position_passes(observed: np.ndarray, row: np.ndarray, n: int) -> np.ndarray:
    """vLLM Model Runner V2's per-position check (``_assert_distribution_match``) on the token counts ``observed``
    ``[..., V]`` of ``n`` tokens each, against the row ``row`` ``[V]``: expected counts ``n · row``; tokens expected
    below 5 merged into one bin, kept only if its expected count reaches 5 (else its samples are dropped, those of
    a token the row excludes among them); Pearson's χ² over the bins, passing below ``df + 10·sqrt(2·df)``, and
    passing outright with fewer than two bins. True where a run passes."""
    expected = row * n
    small = expected < MRV2_MIN_EXPECTED
    obs, exp = observed[..., ~small], expected[~small]
    if expected[small].sum() >= MRV2_MIN_EXPECTED:
        obs = np.concatenate([obs, observed[..., small].sum(axis=-1, keepdims=True)], axis=-1)
        exp = np.append(exp, expected[small].sum())
    df = exp.shape[-1] - 1
    if df < 1:
        return np.ones(observed.shape[:-1], dtype=bool)
    chi2 = ((obs - exp) ** 2 / exp).sum(axis=-1)
    return chi2 < df + MRV2_SIGMAS * np.sqrt(2 * df)


def mrv2_chi_square_pass(law: np.ndarray, target: np.ndarray, vocab: int, length: int, replications: int,
                         rng: np.random.Generator) -> float:
    """vLLM Model Runner V2's distribution test (0.33.0, ``test_stochastic_rejection_sample``), its pass frequency
    over ``replications`` runs on samples drawn from the exact ``law``. Each run draws 40,960 sequences and, at
    every position ``j``, applies :func:`mrv2_position_passes` to the tokens at ``j`` against the target's
    *position-0* row: vLLM's test builds one target row and reuses it at every position, so position ``j``'s law
    is compared with ``q(· | prompt)``, not with the target's own law at ``j``. Where the target's rows depend on
    the prefix, the test as it runs fails the target's own law too. The run passes when every position passes.
    Every position holds all 40,960 tokens (a completed round; a loop's ``N`` tokens), where vLLM's test counts at
    ``j`` only the trials whose round emitted ``j + 1`` tokens. The frequency's standard error is at most
    ``0.5 / √replications``."""
    law = law / law.sum()
    row = _marginals(target, vocab, length)[0]
    counts = rng.multinomial(MRV2_TRIALS, law, size=replications).reshape((replications,) + (vocab,) * length)
    passed = np.ones(replications, dtype=bool)
    for j in range(length):
        observed = counts.sum(axis=tuple(1 + a for a in range(length) if a != j))
        passed &= mrv2_position_passes(observed, row, MRV2_TRIALS)
    return float(passed.mean())
