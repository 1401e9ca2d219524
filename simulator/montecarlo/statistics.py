"""Goodness-of-fit against an exact law with its power stated: Pearson's chi-square (:func:`chi_square`) and a lower
bound on its power against every alternative at a given TVD (:func:`power_lower_bound`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy  # its submodules load on first use (scipy.special here; scipy.stats, a second, is not needed)

from simulator.errors import InvalidParameterError


def _stats_ufunc(name: str):
    """The ``scipy.special`` ufunc behind a ``scipy.stats`` method (``_ncx2_sf``, ``_binom_pmf``), reached without
    importing ``scipy.stats``; ``None`` where this scipy has none of that name."""
    from scipy.special import _ufuncs

    return getattr(_ufuncs, name, None)


def power_lower_bound(samples: int, cells: int, tvd: float, alpha: float) -> float:
    """The chi-square test's power against any alternative at ``tvd`` from the null, ``N`` samples:
    ``ncx2.sf(chi2.isf(α, df), df, 4Nδ²)`` computed by the functions ``scipy.stats`` calls (the same numbers,
    bit for bit, without loading ``scipy.stats``).

    Why it holds for *every* alternative: if ``a`` has ``TVD(a, e) = δ`` on the ``k`` cells, Cauchy–Schwarz gives
    ``Σ (a−e)²/e ≥ (Σ|a−e|)² = 4δ²``, so the noncentrality is at least ``4Nδ²``. :func:`detectable_tvd` inverts the
    bound.
    """
    df = cells - 1
    critical = scipy.special.chdtri(df, alpha)  # chi2.isf(α, df)
    noncentrality = 4 * samples * tvd**2
    sf = _stats_ufunc("_ncx2_sf")
    if noncentrality == 0:
        return float(scipy.special.chdtrc(df, critical))  # chi2.sf
    if sf is None:
        return float(1 - scipy.special.chndtr(critical, df, noncentrality))  # to ~1e-16 absolute
    with np.errstate(over="ignore"):
        return float(sf(critical, df, noncentrality))


def detectable_tvd(samples: int, cells: int, alpha: float, power: float) -> float:
    """The smallest TVD at which :func:`power_lower_bound` reaches ``power`` (``inf`` when not even a TVD of 1
    reaches it)."""
    if cells < 2 or power_lower_bound(samples, cells, 1.0, alpha) < power:
        return math.inf
    return float(scipy.optimize.brentq(lambda d: power_lower_bound(samples, cells, d, alpha) - power, 1e-9, 1.0))


def sample_size(cells: int, tvd: float, alpha: float, power: float) -> int:
    """The smallest ``N`` (to 2 %) whose power bound at ``tvd`` reaches ``power``."""
    n = 1000
    while power_lower_bound(n, cells, tvd, alpha) < power:
        n = int(n * 1.02) + 1
    return n


@dataclass(frozen=True)
class ChiSquare:
    statistic: float
    cells: int
    p_value: float
    alpha: float
    impossible: int  # samples in cells of probability zero under the null (reject outright)

    @property
    def rejects(self) -> bool:
        return self.impossible > 0 or self.p_value < self.alpha


def chi_square(observed: np.ndarray, expected_prob: np.ndarray, alpha: float, min_expected: float = 5.0) -> ChiSquare:
    """Pearson's test of counts against probabilities; cells expected below ``min_expected`` are pooled."""
    observed = np.asarray(observed, dtype=float)
    prob = np.asarray(expected_prob, dtype=float)
    if observed.shape != prob.shape:
        raise InvalidParameterError("observed", f"shape {observed.shape} differs from the law's {prob.shape}")
    n = observed.sum()
    impossible = int(observed[prob == 0].sum())
    expected = prob * n
    small = expected < min_expected
    obs = np.append(observed[~small], observed[small & (prob > 0)].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    statistic = float(((obs - exp) ** 2 / exp).sum())
    df = max(len(exp) - 1, 1)
    return ChiSquare(statistic, len(exp), float(scipy.special.gammaincc(df / 2, statistic / 2)), alpha,
                     impossible)  # the p-value chi2.sf(statistic, df)


def expected_sample_tvd(table: np.ndarray, n: int) -> float:
    """``E[TVD]`` of the empirical law of ``n`` draws from ``table`` to ``table`` itself:
    ``½ Σ_z E|X_z − n q_z| / n`` with ``X_z ~ Bin(n, q_z)`` and de Moivre's
    ``E|X − nq| = 2 (m+1)(1−q) P(X = m+1)``, ``m = ⌊nq⌋``."""
    q = table[table > 0]
    m = np.floor(n * q)
    k = m + 1  # P(X = k) of Bin(n, q): binom.pmf's own function where scipy has it, else from log-gamma
    pmf = _stats_ufunc("_binom_pmf")
    if pmf is not None:
        mad = 2 * k * (1 - q) * pmf(k, n, q)
    else:
        log_pmf = (scipy.special.gammaln(n + 1) - scipy.special.gammaln(k + 1) - scipy.special.gammaln(n - k + 1)
                   + scipy.special.xlogy(k, q) + scipy.special.xlog1py(n - k, -q))
        mad = 2 * k * (1 - q) * np.exp(log_pmf)
    return float(0.5 * mad.sum() / n)


def tvd_upper_bound(cells: int, n: int) -> float:
    """``½ sqrt(K/N)``: Jensen then Cauchy–Schwarz bound every ``E[TVD]`` of ``N`` samples over ``K`` cells."""
    return 0.5 * math.sqrt(cells / n)
