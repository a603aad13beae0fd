"""The differential-geometric reading (seed 002 § 3.1.4), its code as written."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.assertions import assert_within
from harness.markers import checks
from specs.problems import build
from specs.reference import attention
from specs.tolerance import difference_allowance, score_perturbation_allowance, unit_roundoff

torch = pytest.importorskip("torch", reason="the seed's interpretation code is written in torch")

from impls.seed_code.seed002_readings import differential_geometric_attention  # noqa: E402


def _run(q, k, v):
    return differential_geometric_attention(*(torch.from_numpy(x) for x in (q, k, v))).numpy()


def _explained(q, k, v):
    """softmax(Q Q^T) V and the allowance for the seed's Q U^T U Q^T scores, U the key's left singular
    vectors: |Q U^T U Q^T - Q Q^T| <= |Q| (|U^T U - I| + (2n + d + 4) u |U^T| |U|) |Q|^T."""
    u_basis = torch.linalg.svd(torch.from_numpy(k), full_matrices=False)[0].numpy()
    n, d = k.shape
    defect = np.abs(u_basis.T @ u_basis - np.eye(u_basis.shape[1]))
    defect += (2 * n + d + 4) * unit_roundoff(np.float64) * (np.abs(u_basis.T) @ np.abs(u_basis))
    score_error = (np.abs(q) @ defect @ np.abs(q).T).max(axis=-1, keepdims=True)
    q4, v4 = q[None, None], v[None, None]
    allowance = score_perturbation_allowance(q4, q4, v4, score_error[None, None], scale=1.0)
    return attention(q4, q4, v4, scale=1.0).out[0, 0], allowance.take((0, 0))


@checks("differential-uses-key", subject="seed002-differential")
@given(n=st.integers(2, 16), d=st.integers(1, 16), seed=st.integers(0, 2**32 - 1))
def test_output_depends_on_the_key(n, d, seed):
    """Self-attention shapes with d <= n (the only ones the code accepts)."""
    p = build(n_q=n, n_k=n, d=min(d, n), d_v=3, seed=seed)
    q, k, v = p.q[0, 0], p.k[0, 0], p.v[0, 0]
    other_k = -3.0 * k + 1.0
    out, out_other = _run(q, k, v), _run(q, other_k, v)
    explained, allowance = _explained(q, k, v)
    _, allowance_other = _explained(q, other_k, v)
    assert_within(out, explained, allowance, what="the code's out", versus="softmax(Q Q^T) V")
    assert np.any(np.abs(out - out_other) > difference_allowance(allowance, allowance_other).bound), (
        "replacing the key by -3 k + 1 changes the output by no more than rounding: "
        "coordinates @ coordinates^T = Q U^T U Q^T = Q Q^T, the key's basis cancels")
