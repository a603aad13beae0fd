"""Statistical tests for the suite's statistical claims: fixed seeds, tiny false-alarm rates, shown power.

ALPHA is the false-alarm probability of one test. A run performs at most a few
hundred statistical tests (four statistical properties, each a handful of
tests, on each implementation variant), so by the union bound the run's
false-alarm rate stays below 1000 * ALPHA = 1e-6. Each property also applies
the same test to data from a wrong hypothesis and requires it to reject: the
demonstration of power.
"""

from __future__ import annotations

import math

import numpy as np

ALPHA = 1e-9


def _stats():
    """scipy.stats, imported where a test is made: importing it takes 1.7 s, which every pytest process paid at
    collection (three property modules import this one)."""
    from scipy import stats

    return stats


def unit_normal_variance_pvalue(z: np.ndarray) -> float:
    """Two-sided p-value of H0: z are iid N(0, 1), by sum(z^2) ~ chi-square(len(z))."""
    z = np.asarray(z, dtype=np.float64).ravel()
    statistic = float(np.sum(z * z))
    stats = _stats()
    lower, upper = stats.chi2.cdf(statistic, z.size), stats.chi2.sf(statistic, z.size)
    return min(1.0, 2 * min(lower, upper))


def hoeffding_radius(samples: int, value_range: float = 1.0, alpha: float = ALPHA) -> float:
    """t with P(|mean - E| >= t) <= alpha for `samples` iid values in an interval of width value_range."""
    return value_range * math.sqrt(math.log(2 / alpha) / (2 * samples))


def binomial_pvalue(successes: int, trials: int, p: float) -> float:
    """Two-sided exact binomial p-value of H0: successes ~ Binomial(trials, p)."""
    return float(_stats().binomtest(successes, trials, p).pvalue)


def bernstein_radius(samples: int, variance: np.ndarray, spread: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """t with P(|mean - E| >= t) <= alpha for `samples` iid values of known variance and |x - E| <= spread.

    Bernstein's inequality, P(|mean - E| >= t) <= 2 exp(-N t^2 / (2 sigma^2 + 2 b t / 3)), solved for t:
    t = (b L / 3 + sqrt((b L / 3)^2 + 2 N sigma^2 L)) / N with L = log(2 / alpha). Its leading term
    sqrt(2 L sigma^2 / N) is the CLT's Gaussian tail z_alpha sigma / sqrt(N) (z_alpha^2 ~ 2 L), and unlike the
    CLT it holds at every N, without a Berry-Esseen error that would swamp alpha = 1e-9; b L / (3 N) is the
    small price for that. Elementwise in `variance` and `spread`."""
    log_term = math.log(2 / alpha)
    third = np.asarray(spread, dtype=np.float64) * log_term / 3
    return (third + np.sqrt(third**2 + 2 * samples * np.asarray(variance, dtype=np.float64) * log_term)) / samples


def binomial_power(trials: int, p: float, wrong_p: float, level: float) -> float:
    """The probability that binomial_pvalue(X, trials, p) < level when X ~ Binomial(trials, wrong_p): the exact
    power of the two-sided test at this level. The p-value falls monotonically away from the mode, so the
    rejected counts are two tails, X <= low and X >= high, each found by bisection."""
    mode = math.floor((trials + 1) * p)

    def rejected(count: int) -> bool:
        return count < 0 or count > trials or binomial_pvalue(count, trials, p) < level

    low, above = -1, mode  # the largest rejected count below the mode (-1: none)
    while low < above:
        middle = (low + above + 1) // 2
        low, above = (middle, above) if rejected(middle) else (low, middle - 1)
    below, high = mode, trials + 1  # the smallest rejected count above the mode (trials + 1: none)
    while below < high:
        middle = (below + high) // 2
        below, high = (below, middle) if rejected(middle) else (middle + 1, high)
    binom = _stats().binom
    return float(binom.cdf(low, trials, wrong_p) + binom.sf(high - 1, trials, wrong_p))
