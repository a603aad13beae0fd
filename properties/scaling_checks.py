"""The scale's statistics (seed 003 § 第一个概念: Var(q . k) = d_k, so 1/sqrt(d_k) keeps the scores at unit variance):
the sample sizes, the d_k grid and the spread of the scores an implementation computes."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from specs.examples import gaussian_queries
from specs.reference import AttentionResult, attention
from specs.statistics import ALPHA, unit_normal_variance_pvalue

VARIANCE_SAMPLES = 2000
SPREAD_SAMPLES = 2000


# The flat region, quantified (seed 000 § 具体过程, seed 003 § 第一个概念). On examples.coupled_scores the scaled
# scores are the same N(0, 1) numbers z at every d_k, and the unscaled ones are sqrt(d_k) z; per row, entropy
# falls strictly as the temperature does (dH/dbeta = -beta Var_p(z) < 0 for softmax(beta z)). Expectations over
# z for n_k = 4 keys (2e5 rows): H = 1.114 and J = 0.403 scaled; unscaled at d_k = 4, 16, 64, 256
# H = 0.771, 0.431, 0.218, 0.108 and J = 0.320, 0.207, 0.117, 0.062; with 1/d_k in place of 1/sqrt(d_k) the
# "scaled" H = 1.301, 1.363, 1.380, 1.385 (it rises: caught by the constancy check). Rows are iid, so by
# Hoeffding (range 4 log(4)/3 for H_s/3 - H_u, 3/4 for J_s/2 - J_u, 1 for J_u(4) - J_u(256)) a correct
# implementation misses the saturation criteria with probability <= exp(-2 R m^2 / range^2) for the expected
# margins m = 0.263, 0.140, 0.258: exp(-41), exp(-71), exp(-136) at R = 1024, far below ALPHA.
FLAT_GRID = (4, 16, 64, 256)


def score_spread(reference: Callable[..., AttentionResult] = attention) -> tuple[dict[str, np.ndarray], list[str]]:
    """The scores `reference` (the float64 oracle by default) computes for Gaussian q, k at every d_k of FLAT_GRID,
    with its default scale and with scale = 1, and what is wrong with them: Var(q.k) must be d_k and the default
    scale's scores must have variance 1 (chi-square tests at ALPHA on SPREAD_SAMPLES scores each)."""
    samples, failures = {}, []
    for d in FLAT_GRID:
        problem = gaussian_queries(samples=SPREAD_SAMPLES, n_k=1, d=d, seed=40_000 + d)
        scaled = reference(problem.q, problem.k, problem.v).scores.ravel()
        unscaled = reference(problem.q, problem.k, problem.v, scale=1.0).scores.ravel()
        samples[f"d_k={d}, scaled"], samples[f"d_k={d}, unscaled"] = scaled, unscaled
        for name, scores, variance in (("the default scale's", scaled, 1), ("scale=1's", unscaled, d)):
            p_value = unit_normal_variance_pvalue(scores / math.sqrt(variance))
            if not p_value >= ALPHA:
                failures.append(f"{name} scores at d_k={d} have sample variance {np.var(scores):.4g}, not {variance} "
                                f"(p = {p_value:.3g} < {ALPHA:g})")
    return samples, failures
