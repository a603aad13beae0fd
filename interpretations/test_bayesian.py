"""The Bayesian reading (seed 002 § 3.1.5), its code as written."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.assertions import assert_within
from harness.markers import checks
from specs.problems import build
from specs.tolerance import forward_allowance

torch = pytest.importorskip("torch", reason="the seed's interpretation code is written in torch")

from impls.seed_code.seed002_readings import bayesian_attention  # noqa: E402

SUBJECT = "seed002-bayesian"


def _run(q, k, v):
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
