"""The Bayesian reading (seed 002 § 3.1.5): its code as written, and the reading in its correct form on every
implementation. Key position J is the latent variable; with prior pi_j and likelihood proportional to
exp(s q.k_j) the posterior is pi_j e^{s q.k_j} / sum_l pi_l e^{s q.k_l}: softmax attention for a uniform
prior, attention with an additive log pi_j bias otherwise, and the output is the posterior mean of V."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from harness.api.assertions import assert_within
from harness.api.exhibits import record_headroom
from harness.api.markers import checks
from interpretations.posterior_checks import check_log_prior_bias, check_uniform_prior
from interpretations.reading_code_checks import expect_takes_cross_attention, run_bayesian_code
from specs.problems import build
from specs.tolerance import forward_allowance

SUBJECT = "seed002-bayesian"


@checks("bayesian-posterior", subject=SUBJECT)
@given(n=st.integers(2, 16), d=st.integers(1, 16), seed=st.integers(0, 2**32 - 1))
def test_weights_are_normalised_prior_times_likelihood(n, d, seed):
    """With value = I (one-hot rows) the output is the weight matrix, and the likelihood is known:
    exp(-|e_i - e_j|^2) = e^-2 off the diagonal, 1 on it."""
    p = build(n_q=n, n_k=n, d=d, seed=seed)
    q, k = 0.3 * p.q[0, 0], 0.3 * p.k[0, 0]
    weights = run_bayesian_code(q, k, np.eye(n))
    # posterior / rowsum = softmax(Q K^T - 2 + 2 I) = softmax(Q K^T + 2 I): the oracle on augmented
    # q'_i = [q_i, sqrt(2) e_i], k'_j = [k_j, sqrt(2) e_j], whose dot products add 2 on the diagonal.
    q_aug, k_aug = (np.hstack([x, np.sqrt(2.0) * np.eye(n)])[None, None] for x in (q, k))
    expected, allowance = forward_allowance(q_aug, k_aug, np.eye(n)[None, None], dtype="float64", scale=1.0)
    assert_within(weights, expected.out[0, 0], allowance.take((0, 0)), what="the code's weight matrix",
                  versus="posterior / sum(posterior)")


@checks("bayesian-code-finite", subject=SUBJECT)
@given(n=st.integers(1, 16), d=st.integers(1, 16), seed=st.integers(0, 2**32 - 1))
def test_finite_on_scores_of_order_1e3(n, d, seed):
    p = build(n_q=n, n_k=n, d=d, seed=seed, score_style="large")
    out = run_bayesian_code(p.q[0, 0], p.k[0, 0], p.v[0, 0])
    largest = float(np.max(p.q[0, 0] @ p.k[0, 0].T))
    assert np.all(np.isfinite(out)), f"non-finite output: exp of a dot product of {largest:.4g} overflows"


@checks("bayesian-code-cross-attention", subject=SUBJECT)
@given(n_q=st.integers(1, 8), n_k=st.integers(2, 8), d=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_code_takes_queries_and_keys_of_different_lengths(n_q, n_k, d, seed):
    """n_k >= 2: with one key every weight is 1 and the (1, 1) likelihood broadcasts harmlessly."""
    if n_q == n_k:
        n_q += 1
    expect_takes_cross_attention(n_q, n_k, d, seed)


# -- every implementation: the weights are a posterior, the output its mean (posterior_checks) -------------


BAYES_TABLE = ("bayesian-posterior-fit", "Per implementation, the largest distance of its weights from the posterior "
               "over key positions and of its output from the posterior mean, relative to their allowances: below 1 "
               "passes.")


def _record(prior: str, ratios: tuple[float, float]) -> None:
    for what, ratio in zip(("weights = posterior", "out = posterior mean"), ratios, strict=True):
        record_headroom(BAYES_TABLE[0], f"{prior}: {what}", ratio, BAYES_TABLE[1])


@checks("bayesian-uniform-prior-posterior-mean")
def test_output_is_the_posterior_mean_under_a_uniform_prior(variant):
    _record("uniform prior", check_uniform_prior(variant))


@checks("bayesian-prior-as-log-bias")
def test_log_prior_bias_gives_the_posterior_mean(variant):
    _record("prior e^m as bias m", check_log_prior_bias(variant))
