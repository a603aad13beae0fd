"""The Bayesian reading (seed 002 § 3.1.5): its code as written, and the reading in its correct form on every
implementation. Key position J is the latent variable; with prior pi_j and likelihood proportional to
exp(s q.k_j) the posterior is pi_j e^{s q.k_j} / sum_l pi_l e^{s q.k_l}: softmax attention for a uniform
prior, attention with an additive log pi_j bias otherwise, and the output is the posterior mean of V."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.assertions import assert_within
from harness.api.exhibits import record_headroom
from harness.api.markers import checks
from harness.api.observe import observe_weights
from harness.api.trial import Trial
from interpretations.test_geometric import EXACT_D, exact_problem
from specs.problems import Problem, build
from specs.reference import repeat_kv
from specs.tolerance import forward_allowance, product_allowance


def _torch():
    """torch, or a skip: only the seed's code needs it (the every-implementation properties do not)."""
    return pytest.importorskip("torch", reason="the seed's interpretation code is written in torch")

SUBJECT = "seed002-bayesian"


def _run(q, k, v):
    torch = _torch()
    from impls.seeds.seed_code.seed002_readings import bayesian_attention

    return bayesian_attention(*(torch.from_numpy(x) for x in (q, k, v))).numpy()


@checks("bayesian-posterior", subject=SUBJECT)
@given(n=st.integers(2, 16), d=st.integers(1, 16), seed=st.integers(0, 2**32 - 1))
def test_weights_are_normalised_prior_times_likelihood(n, d, seed):
    """With value = I (one-hot rows) the output is the weight matrix, and the likelihood is known:
    exp(-|e_i - e_j|^2) = e^-2 off the diagonal, 1 on it."""
    p = build(n_q=n, n_k=n, d=d, seed=seed)
    q, k = 0.3 * p.q[0, 0], 0.3 * p.k[0, 0]
    weights = _run(q, k, np.eye(n))
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
    out = _run(p.q[0, 0], p.k[0, 0], p.v[0, 0])
    largest = float(np.max(p.q[0, 0] @ p.k[0, 0].T))
    assert np.all(np.isfinite(out)), f"non-finite output: exp of a dot product of {largest:.4g} overflows"


def expect_takes_cross_attention(n_q: int, n_k: int, d: int, seed: int) -> None:
    p = build(n_q=n_q, n_k=n_k, d=d, d_v=3, seed=seed)
    try:
        out = _run(p.q[0, 0], p.k[0, 0], p.v[0, 0])
    except RuntimeError as exc:
        raise AssertionError(
            f"bayesian_attention on n_q={n_q} queries and n_k={n_k} keys raises RuntimeError: the likelihood "
            "is (n_k, n_k), one row per value, multiplied with the (n_q, n_k) prior row by row, so query i is "
            f"paired with value i ({str(exc).splitlines()[0]})") from None
    assert out.shape == (n_q, 3), (
        f"bayesian_attention on n_q={n_q} queries and n_k={n_k} keys returns {out.shape[0]} rows: the (1, n_k) "
        "prior broadcasts against the (n_k, n_k) likelihood, one posterior per value instead of per query")


@checks("bayesian-code-cross-attention", subject=SUBJECT)
@given(n_q=st.integers(1, 8), n_k=st.integers(2, 8), d=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_code_takes_queries_and_keys_of_different_lengths(n_q, n_k, d, seed):
    """n_k >= 2: with one key every weight is 1 and the (1, 1) likelihood broadcasts harmlessly."""
    if n_q == n_k:
        n_q += 1
    expect_takes_cross_attention(n_q, n_k, d, seed)


# -- every implementation: the weights are a posterior, the output its mean ------------------------------

def posterior(log_likelihood: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """Bayes' rule in float64: prior_j x likelihood_ij / evidence_i, the likelihood exp(log_likelihood) taken
    relative to its row maximum (a factor common to the row, which the evidence divides out)."""
    joint = prior * np.exp(log_likelihood - log_likelihood.max(axis=-1, keepdims=True))
    return joint / joint.sum(axis=-1, keepdims=True)


def expect_posterior(trial: Trial, problem: Problem, prior: np.ndarray, d: int, *,
                     claim_what: str) -> tuple[float, float]:
    """The weights the implementation applies on `problem` (read through one-hot values) are the posterior
    with this prior and likelihood exp(s q.k_j) over the first d coordinates, s the scale it applies; and its
    output is the posterior mean of V. My posterior is computed with the oracle's operations plus one product
    by the prior (u relative, inside the float64 bound's (3 n_k + 4) u P slack), so each of the two float64
    computations is within the float64 forward bound of the exact weights."""
    observed = observe_weights(trial, problem)
    q, k, v = trial.exact_inputs(problem)
    k = repeat_kv(k, q.shape[1] // k.shape[1])
    s = observed.oracle.scale
    expected = posterior(s * (q[..., :d] @ k[..., :d].swapaxes(-1, -2)), prior)
    _, float64_weights = forward_allowance(*trial.exact_inputs(observed.problem), dtype="float64",
                                           oracle=observed.oracle)
    weights_error = float64_weights.take((..., slice(0, problem.n_k)))
    weights_error = weights_error.carried(lambda bound: 2 * bound, f"2 x ({weights_error.rule}): the oracle's and "
                                          "Bayes' rule's", prefix="2 x ")
    weights_ratio = trial.expect_close(observed.weights, expected, observed.allowance + weights_error,
                                       what="the weights read off one-hot values", problem=observed.problem,
                                       versus=f"the posterior over key positions ({claim_what})")
    _, out_allowance = trial.oracle(problem)
    values = repeat_kv(v, q.shape[1] // v.shape[1])
    out_ratio = trial.expect_close(trial.call(problem), expected @ values,
                                   out_allowance + product_allowance(weights_error, expected, values),
                                   problem=problem, versus=f"the posterior mean of V ({claim_what})")
    return weights_ratio, out_ratio


BAYES_TABLE = ("bayesian-posterior-fit", "Per implementation, the largest distance of its weights from the posterior "
               "over key positions and of its output from the posterior mean, relative to their allowances: below 1 "
               "passes.")


def _record(prior: str, ratios: tuple[float, float]) -> None:
    for what, ratio in zip(("weights = posterior", "out = posterior mean"), ratios, strict=True):
        record_headroom(BAYES_TABLE[0], f"{prior}: {what}", ratio, BAYES_TABLE[1])


@checks("bayesian-uniform-prior-posterior-mean")
def test_output_is_the_posterior_mean_under_a_uniform_prior(variant):
    problem = exact_problem(variant, seed=105)
    uniform = np.full(problem.n_k, 1.0 / problem.n_k)
    _record("uniform prior", expect_posterior(Trial(variant, problem), problem, uniform, EXACT_D,
                                              claim_what="uniform prior, likelihood e^{s q.k_j}"))


def log_prior(n_k: int, seed: int) -> list[float]:
    """log pi_j up to a constant: integers in [-3, 0] (prior ratios up to e^3), exact in every dtype."""
    return np.random.default_rng(seed).integers(-3, 1, n_k).astype(float).tolist()


def with_prior(problem: Problem, logs: list[float]) -> Problem:
    """q'_i = [q_i, 1/s], k'_j = [k_j, log pi_j] on a problem of head dim 15: s' = 1/sqrt(16) = 1/4 is the scale
    the implementation applies to the 16-dimensional problem (its default, and the suite passes none), so
    s' q'_i.k'_j = s' q_i.k_j + log pi_j, an additive log-prior bias on every score, exact in every dtype."""
    return problem.derive(
        f"p = p.replace(q=np.concatenate([p.q, np.full(p.q.shape[:-1] + (1,), {np.sqrt(EXACT_D)!r})], axis=-1), "
        f"k=np.concatenate([p.k, np.broadcast_to(np.array({logs})[:, None], p.k.shape[:-1] + (1,))], axis=-1))")


@checks("bayesian-prior-as-log-bias")
def test_log_prior_bias_gives_the_posterior_mean(variant):
    base = exact_problem(variant, seed=106, d=EXACT_D - 1)
    logs = log_prior(base.n_k, 106)
    problem = with_prior(base, logs)
    trial = Trial(variant, problem)
    if trial.oracle()[0].scale * np.sqrt(EXACT_D) != 1.0:
        raise AssertionError("the augmented coordinate no longer cancels the scale: the prior would be mis-weighted")
    prior = np.exp(logs) / np.exp(logs).sum()
    _record("prior e^m as bias m", expect_posterior(trial, problem, prior, EXACT_D - 1, claim_what=(
        f"prior pi_j = e^{{m_j}} / sum e^m, m = {logs}, through the bias log pi_j")))
