"""The probabilistic reading (seed 001 § 1.3 (1); seed 002 § 3.1.1), checked on every implementation.

注意力机制本质上可以认为是求一个离散概率分布的数学期望: out_i = E_{j ~ P_i}[v_j].
注意力机制可以被视为一种最优线性逼近的方法: out_i minimises sum_j P_ij |x - v_j|^2.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from harness.markers import checks
from harness.observe import observe_weights
from harness.trial import Trial, problems_for
from specs.problems import build
from specs.statistics import ALPHA, hoeffding_radius
from specs.tolerance import Allowance, elementwise_product_allowance, product_allowance, row_sum_allowance

DRAWS = 20_000
SEED = 50_000


@checks("attention-is-expectation")
def test_output_is_expectation_of_values_under_weights(variant):
    """Sample j ~ P_i (the oracle's weights) DRAWS times per row: the sample mean of v_j must be within
    Hoeffding's radius (value range, ALPHA split over every row and coordinate) of the implementation's
    out_i, plus its numerical allowance. The same test must reject the uniform mean of V (power)."""
    d_v = 3 if variant.capabilities.value_dim else 8
    problem = build(batch=1, heads=2, heads_kv=2, n_q=12, n_k=12, d=8, d_v=d_v, seed=SEED).scale_queries(2.0)
    trial = Trial(variant, problem)
    oracle, allowance = trial.oracle()
    out = trial.call()
    _, _, v = trial.exact_inputs()
    rng = np.random.default_rng(SEED)
    tests = oracle.weights.shape[1] * problem.n_q * d_v
    sample_means = np.empty_like(out)
    for h in range(oracle.weights.shape[1]):
        for i in range(problem.n_q):
            draws = rng.choice(problem.n_k, size=DRAWS, p=oracle.weights[0, h, i])
            sample_means[0, h, i] = v[0, h, draws].mean(axis=0)
    value_range = v.max(axis=-2, keepdims=True) - v.min(axis=-2, keepdims=True)
    radius = hoeffding_radius(DRAWS, 1.0, ALPHA / tests) * value_range
    trial.expect_close(out, sample_means, Allowance(radius + allowance.bound, "Hoeffding radius + allowance"),
                       what="out", versus=f"the mean of {DRAWS} values drawn from the weights")
    uniform = np.broadcast_to(v.mean(axis=-2, keepdims=True), out.shape)
    assert np.any(np.abs(uniform - sample_means) > radius), "no power: the test cannot reject uniform weights"


@checks("attention-optimal-linear-approximation")
@given(data=st.data())
def test_output_minimises_weighted_squared_distance(variant, data):
    """The minimiser of sum_j W_ij |x - v_j|^2 solves (sum_j W_ij) x = (W V)_i: compare both sides,
    with W the weights the implementation applied (read off one-hot values)."""
    problem = data.draw(problems_for(variant, weights_visible=True), label="problem")
    trial = Trial(variant, problem)
    observed = observe_weights(trial)
    _, out_allowance = trial.oracle()
    out = trial.call()
    values = trial.values_per_query_head()
    mass = observed.weights.sum(axis=-1, keepdims=True)
    mass_allowance = row_sum_allowance(observed.allowance, observed.weights)
    allowance = (product_allowance(observed.allowance, observed.weights, values)
                 + elementwise_product_allowance(mass, mass_allowance, out, out_allowance))
    trial.expect_close(mass * out, observed.weights @ values, allowance, what="(sum_j W_ij) out_i",
                       versus="(W V)_i, the weighted least-squares optimality condition")
