"""The information-theoretic reading (seed 002 § 3.1.3): its code as written, the seed's sentence that the weights
maximise mutual information (false as stated), and the statement that holds, on every implementation: each
weight row is the unique maximiser of <p, s> + H(p) over the simplex, with maximum logsumexp(s)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.exhibits import record_headroom
from harness.api.markers import checks
from harness.api.observe import observe_weights
from harness.api.reproducible import reproducible
from harness.api.trial import Trial
from interpretations.information_checks import (
    distributions,
    expect_largest_mutual_information,
    expect_one_row_per_query,
)
from specs.problems import build
from specs.strategies import head_dims
from specs.tolerance import (
    SIMPLEX_OPTIMIZER_VALUE_TOLERANCE,
    Allowance,
    entropy_regularised_gap_allowance,
)

torch = pytest.importorskip("torch", reason="the seed's interpretation code is written in torch")

from impls.seeds.seed_code.seed002_readings import information_theoretic_attention  # noqa: E402

SUBJECT = "seed002-information"
sizes = dict(n=st.integers(2, 16), d=head_dims(16).filter(lambda d: d >= 2), seed=st.integers(0, 2**32 - 1))


def _run(q, k, v):
    return information_theoretic_attention(*(torch.from_numpy(x) for x in (q, k, v))).numpy()


@checks("information-code-finite", subject=SUBJECT)
@given(**sizes)
def test_runs_finite_on_ordinary_keys(n, d, seed):
    p = build(n_q=n, n_k=n, d=d, seed=seed)
    out = _run(p.q[0, 0], p.k[0, 0], p.v[0, 0])
    assert np.all(np.isfinite(out)), (
        f"NaN output on Gaussian keys (first key {np.round(p.k[0, 0, 0], 3).tolist()}): p.log() of a negative entry")


@checks("information-weights-from-query", subject=SUBJECT)
@given(**sizes)
def test_different_queries_get_different_outputs(n, d, seed):
    p = build(n_q=n, n_k=n, d=d, seed=seed)
    keys = distributions(p.k[0, 0])
    out = _run(p.q[0, 0], keys, p.v[0, 0])
    out_other = _run(-3.0 * p.q[0, 0] + 1.0, keys, p.v[0, 0])
    assert not np.array_equal(out, out_other), "replacing every query leaves the output bit-for-bit unchanged"


@checks("negative-kl-is-mutual-information", subject=SUBJECT)
@given(**sizes)
def test_scores_are_non_negative_like_mutual_information(n, d, seed):
    """The code's score -KL(k_i || k_j), computed as it computes it, on probability-vector keys."""
    keys = torch.from_numpy(distributions(build(n_k=n, d=d, seed=seed).k[0, 0]))
    p, q = keys.unsqueeze(1), keys.unsqueeze(0)
    scores = -(p * (p.log() - q.log())).sum(dim=-1).numpy()
    assert np.all(scores >= 0), (
        f"score -KL = {scores.min():.3g} < 0, but a mutual information is never negative")


@checks("information-output-has-key-rows", subject=SUBJECT)
@given(n_q=st.integers(1, 8), n_k=st.integers(2, 8), d=st.integers(2, 8), seed=st.integers(0, 2**32 - 1))
def test_output_has_one_row_per_query(n_q, n_k, d, seed):
    """On probability-vector keys (where the code runs) with n_q != n_k, the output must have n_q rows."""
    expect_one_row_per_query(information_theoretic_attention, n_q + (n_q == n_k), n_k, d, seed)


def _entropy_regularised_score(p: np.ndarray, s: np.ndarray) -> np.ndarray:
    """F(p) = <p, s> + H(p) per row (..., 1), with 0 log 0 = 0."""
    logs = np.log(np.where(p > 0, p, 1.0))
    return np.sum(p * s - np.where(p > 0, p * logs, 0.0), axis=-1, keepdims=True)


def _logsumexp(s: np.ndarray) -> np.ndarray:
    top = s.max(axis=-1, keepdims=True)
    return top + np.log(np.sum(np.exp(s - top), axis=-1, keepdims=True))


@checks("softmax-maximises-entropy-regularised-score")
def test_rows_attain_the_maximum_of_entropy_regularised_score(variant):
    """logsumexp(s) - F(p) = KL(p || softmax(s)) >= 0: the implementation's rows (one-hot values, renormalised onto
    the simplex) attain the maximum logsumexp(s) within the chi-square bound their weight allowance allows."""
    check_rows_attain_the_maximum_of_entropy_regularised_score(variant)


@reproducible
def check_rows_attain_the_maximum_of_entropy_regularised_score(variant) -> None:
    """The check of test_rows_attain_the_maximum_of_entropy_regularised_score."""
    d_v = 3 if variant.capabilities.value_dim else 8
    problem = build(batch=1, heads=2, heads_kv=2, n_q=8, n_k=8, d=8, d_v=d_v, seed=51_000).scale_queries(1.5)
    trial = Trial(variant, problem)
    observed = observe_weights(trial)
    scores = observed.oracle.scores
    weights = np.clip(observed.weights, 0.0, None)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    allowance = entropy_regularised_gap_allowance(observed.allowance, observed.weights, observed.oracle.weights,
                                                  scores)
    ratio = trial.expect_close(_entropy_regularised_score(weights, scores), _logsumexp(scores), allowance,
                               what="<W_i, s_i> + H(W_i)", versus="its maximum over the simplex, logsumexp(s_i)",
                               problem=observed.problem)
    record_headroom("entropy-regularised-gap", "logsumexp(s) - <W, s> - H(W)", ratio,
                    "Per implementation, how far its weight rows fall short of the maximum of expected score plus "
                    "entropy (logsumexp), relative to the chi-square bound its weight allowance gives.")


def _simplex_maximiser(s: np.ndarray) -> np.ndarray:
    """argmax of <p, s> + H(p) over the simplex, found by SLSQP from the uniform point."""
    from scipy.optimize import minimize

    def negative(p):
        p = np.clip(p, 1e-300, None)
        return -float(p @ s - p @ np.log(p))

    def gradient(p):
        return -(s - np.log(np.clip(p, 1e-300, None)) - 1.0)

    n = len(s)
    found = minimize(negative, np.full(n, 1.0 / n), jac=gradient, method="SLSQP", bounds=[(0.0, 1.0)] * n,
                     constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1.0, "jac": lambda p: np.ones(n)}],
                     options={"ftol": 1e-15, "maxiter": 500})
    return np.clip(found.x, 0.0, None) / np.clip(found.x, 0.0, None).sum()


@checks("softmax-maximises-entropy-regularised-score")
@given(scores=st.lists(st.floats(-5, 5), min_size=2, max_size=6))
def test_optimizer_finds_softmax_and_logsumexp(scores):
    """The oracle identity pinned by search: SLSQP maximising <p, s> + H(p) on the simplex reaches logsumexp(s)
    within SIMPLEX_OPTIMIZER_VALUE_TOLERANCE, never beyond it, and (Pinsker) lands within sqrt(2 tolerance) in l1
    of softmax(s). Power: the same search on <p, s> + H(p) / 2 lands on softmax(2 s), which it must tell apart."""
    s = np.array(scores)
    found = _simplex_maximiser(s)
    best = float(_logsumexp(s)[0])
    value = float(_entropy_regularised_score(found, s)[0])
    tolerance = Allowance(SIMPLEX_OPTIMIZER_VALUE_TOLERANCE, "SLSQP's value tolerance")
    assert abs(value - best) <= tolerance.bound, f"SLSQP's maximum {value!r} vs logsumexp {best!r}"
    softmax = np.exp(s - best)
    l1 = float(np.abs(found - softmax).sum())
    assert l1 <= np.sqrt(2 * tolerance.bound), f"SLSQP's maximiser {found} is {l1:.3g} from softmax {softmax}"
    sharper = np.exp(2 * s - float(_logsumexp(2 * s)[0]))
    if np.abs(sharper - softmax).sum() > 4 * np.sqrt(2 * tolerance.bound):  # power, where the two differ at all
        other = _simplex_maximiser(2 * s)  # <p, 2s> + H(p) = 2 (<p, s> + H(p) / 2)
        assert np.abs(other - softmax).sum() > np.sqrt(2 * tolerance.bound), "no power: the search cannot tell " \
            "softmax(s) from softmax(2 s)"


@checks("weights-maximise-mutual-information")
@given(n_q=st.integers(2, 6), n_k=st.integers(2, 6), d=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_softmax_weights_reach_the_largest_mutual_information(n_q, n_k, d, seed):
    """The sentence as stated: the softmax weights would reach the largest I(i; J) over row-stochastic matrices.
    I is convex in the rows for a fixed (uniform) law of i, so its largest value is at a vertex, one-hot rows, where
    I = H(J): the most balanced assignment (query i -> key i mod n_k) attains it. Strictly positive softmax rows
    keep H(J | i) > 0."""
    from specs.reference import attention

    p = build(n_q=n_q, n_k=n_k, d=d, seed=seed)
    expect_largest_mutual_information(attention(p.q, p.k, p.v).weights[0, 0], "the softmax weights")


