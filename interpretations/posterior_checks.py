"""The weights are a posterior and the output its mean (seed 002 § 3.1.5, the Bayesian reading in its correct form):
Bayes' rule in float64 against the weights read off one-hot values and the output, with a uniform prior and with
a prior given as a log bias through one added coordinate."""

from __future__ import annotations

import numpy as np

from harness.api.observe import observe_weights
from harness.api.reproducible import reproducible
from harness.api.trial import Trial
from interpretations.exact_problems import EXACT_D, exact_problem
from protocol.registry import Variant
from specs.constructions import prior_appended
from specs.problems import Problem
from specs.reference import repeat_kv
from specs.tolerance import forward_allowance, product_allowance


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


def log_prior(n_k: int, seed: int) -> list[float]:
    """log pi_j up to a constant: integers in [-3, 0] (prior ratios up to e^3), exact in every dtype."""
    return np.random.default_rng(seed).integers(-3, 1, n_k).astype(float).tolist()


def with_prior(problem: Problem, logs: list[float]) -> Problem:
    """q'_i = [q_i, 1/s], k'_j = [k_j, log pi_j] on a problem of head dim 15: s' = 1/sqrt(16) = 1/4 is the scale
    the implementation applies to the 16-dimensional problem (its default, and the suite passes none), so
    s' q'_i.k'_j = s' q_i.k_j + log pi_j, an additive log-prior bias on every score, exact in every dtype."""
    return problem.derive(prior_appended, logs, float(np.sqrt(EXACT_D)))


@reproducible
def check_uniform_prior(variant: Variant) -> tuple[float, float]:
    """bayesian-uniform-prior-posterior-mean on the variant's exact problem: the weights' and the output's largest
    error / allowed."""
    problem = exact_problem(variant, seed=105)
    uniform = np.full(problem.n_k, 1.0 / problem.n_k)
    return expect_posterior(Trial(variant, problem), problem, uniform, EXACT_D,
                            claim_what="uniform prior, likelihood e^{s q.k_j}")


@reproducible
def check_log_prior_bias(variant: Variant) -> tuple[float, float]:
    """bayesian-prior-as-log-bias on the variant's exact problem of head dim 15 plus the prior's coordinate: the
    weights' and the output's largest error / allowed."""
    base = exact_problem(variant, seed=106, d=EXACT_D - 1)
    logs = log_prior(base.n_k, 106)
    problem = with_prior(base, logs)
    trial = Trial(variant, problem)
    if trial.oracle()[0].scale * np.sqrt(EXACT_D) != 1.0:
        raise AssertionError("the augmented coordinate no longer cancels the scale: the prior would be mis-weighted")
    prior = np.exp(logs) / np.exp(logs).sum()
    return expect_posterior(trial, problem, prior, EXACT_D - 1, claim_what=(
        f"prior pi_j = e^{{m_j}} / sum e^m, m = {logs}, through the bias log pi_j"))
