"""Scaling by 1/sqrt(d_k): variance control, the flat region of the softmax, explicit scales.

Seed 003 § 第一个概念 (维度大，方差也就变大了 ... d^1/2当分母), seed 000 § 具体过程
(让Softmax函数在一个比较平缓的区域工作), seed 000 § Flash Attention (softmax_scale=1.0).
The statistical properties run on fixed seeds (specs.statistics) and read the
implementation's weights through one-hot values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.markers import checks
from harness.observe import observe_weights
from harness.trial import Trial, check_against_oracle, problems_for
from specs.examples import gaussian_queries
from specs.reference import attention
from specs.statistics import ALPHA, hoeffding_radius, unit_normal_variance_pvalue
from specs.strategies import SCALES

VARIANCE_SAMPLES = 2000
# Hoeffding radius t = 0.052 at ALPHA. E J (measured on 2e4 samples): scaled 0.362 at d = 8 and 0.366 at
# d = 128; unscaled 0.306 and 0.113. With every mean within t of its expectation, the scaled data give
# mean(128) - t >= 0.262 > 0.233 >= (mean(8) + t) / 2, and the unscaled ones
# mean(128) - t <= 0.113 < 0.153 <= (mean(8) + t) / 2: the test accepts one and rejects the other.
FLAT_SAMPLES = 4000


def _first_query_weights(variant, problem):
    """Weights of query row 0 of every batch entry (rows of one entry share keys, so only one is used)."""
    observed = observe_weights(Trial(variant, problem))
    return observed.weights[:, 0, 0, :], observed.problem


@checks("sqrt-dk-variance")
@pytest.mark.parametrize("d", [4, 16, 64])
def test_scaled_scores_have_unit_variance(variant, d):
    """Under H0 (scores q.k / sqrt(d)), log(w_1 / w_0) = q.(k_1 - k_0) / sqrt(d) is, given q,
    N(0, 2 |q|^2 / d) exactly; so z = log(w_1 / w_0) / (sqrt(2) |q| / sqrt(d)) is iid N(0, 1)."""
    problem = gaussian_queries(samples=VARIANCE_SAMPLES, n_k=2, d=d, seed=20_000 + d)
    weights, observed = _first_query_weights(variant, problem)
    trial = Trial(variant, observed)
    with np.errstate(divide="ignore"):
        gap = np.log(weights[:, 1]) - np.log(weights[:, 0])
    query_norm = np.linalg.norm(problem.q[:, 0, 0, :], axis=-1)
    z = gap / (math.sqrt(2) * query_norm / math.sqrt(d))
    p_value = unit_normal_variance_pvalue(z)
    if not p_value >= ALPHA:
        trial.fail(f"the scores' variance is not 1 at d_k = {d}",
                   details=(f"sample variance of the standardised log-weight gaps {np.var(z):.4g} "
                            f"(p = {p_value:.3g} < {ALPHA:g}); 1/sqrt(d) scaling gives 1, no scaling gives {d}",))
    unscaled_p = unit_normal_variance_pvalue(gap / (math.sqrt(2) * query_norm))
    assert unscaled_p < ALPHA, f"no power: the test cannot tell scaled from unscaled scores at d={d}"


def _mean_jacobian_norm(weights: np.ndarray) -> float:
    """Mean over rows of ||diag(p) - p p^T||_F, a number in [0, 1]."""
    squares = np.sum(weights**2, axis=-1)
    frob = squares - 2 * np.sum(weights**3, axis=-1) + squares**2
    return float(np.mean(np.sqrt(np.maximum(frob, 0.0))))


def _not_collapsed(small_d: np.ndarray, large_d: np.ndarray) -> bool:
    """Reject 'the softmax saturates' when E J(large d) >= E J(small d) / 2 with confidence 1 - ALPHA."""
    t = hoeffding_radius(FLAT_SAMPLES)
    return _mean_jacobian_norm(large_d) - t > (_mean_jacobian_norm(small_d) + t) / 2


@checks("scale-keeps-softmax-flat")
def test_softmax_jacobian_does_not_vanish_as_d_grows(variant):
    samples = {d: gaussian_queries(samples=FLAT_SAMPLES, n_k=8, d=d, seed=30_000 + d) for d in (8, 128)}
    weights = {d: _first_query_weights(variant, p)[0] for d, p in samples.items()}
    if not _not_collapsed(weights[8], weights[128]):
        trial = Trial(variant, samples[128])
        trial.fail("the softmax saturates as d_k grows",
                   details=(f"mean ||J||_F at d=8: {_mean_jacobian_norm(weights[8]):.3f}, "
                            f"at d=128: {_mean_jacobian_norm(weights[128]):.3f} "
                            f"(Hoeffding radius {hoeffding_radius(FLAT_SAMPLES):.3f})",))
    unscaled = {d: attention(p.q, p.k, p.k[..., :1], scale=1.0).weights[:, 0, 0, :] for d, p in samples.items()}
    assert not _not_collapsed(unscaled[8], unscaled[128]), "no power: the test misses unscaled saturation"


@checks("explicit-softmax-scale")
@pytest.mark.requires("scale")
@given(data=st.data())
def test_explicit_scale_replaces_default(variant, data):
    problem = data.draw(problems_for(variant, scale=False), label="problem")
    scale = data.draw(st.one_of(st.just(1.0), st.sampled_from(SCALES), st.floats(1e-3, 10.0)), label="scale")
    check_against_oracle(variant, problem.derive(f"p = p.replace(scale={scale!r})"))
