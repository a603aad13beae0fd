"""The differential-geometric reading (seed 002 § 3.1.4): its code as written (what it computes, the shapes
it runs on), and the true content of its "local coordinate systems" on every implementation: attention
depends on q and k only through the dot products q_i.k_j, so a change of basis applied to both (an
orthogonal R on each, or A on the queries with A^{-T} on the keys) changes nothing."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from harness.api.assertions import assert_within
from harness.api.exhibits import record_headroom
from harness.api.markers import checks
from interpretations.basis_checks import check_dual_basis, check_rotation
from interpretations.reading_code_checks import expect_runs_on_attention_shapes, run_differential_code, seed_code_torch
from specs.problems import build
from specs.reference import attention
from specs.tolerance import difference_allowance, score_perturbation_allowance, unit_roundoff


def _explained(q, k, v):
    """softmax(Q Q^T) V and the allowance for the seed's Q U^T U Q^T scores, U the key's left singular
    vectors: |Q U^T U Q^T - Q Q^T| <= |Q| (|U^T U - I| + (2n + d + 4) u |U^T| |U|) |Q|^T."""
    torch = seed_code_torch()
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
    out, out_other = run_differential_code(q, k, v), run_differential_code(q, other_k, v)
    explained, allowance = _explained(q, k, v)
    _, allowance_other = _explained(q, other_k, v)
    assert_within(out, explained, allowance, what="the code's out", versus="softmax(Q Q^T) V")
    assert np.any(np.abs(out - out_other) > difference_allowance(allowance, allowance_other).bound), (
        "replacing the key by -3 k + 1 changes the output by no more than rounding: "
        "coordinates @ coordinates^T = Q U^T U Q^T = Q Q^T, the key's basis cancels")


@checks("differential-code-shapes", subject="seed002-differential")
@given(n_q=st.integers(1, 8), n_k=st.integers(1, 8), d=st.integers(1, 10), seed=st.integers(0, 2**32 - 1))
def test_code_runs_on_every_attention_shape(n_q, n_k, d, seed):
    expect_runs_on_attention_shapes(n_q, n_k, d, seed)


# -- every implementation: one change of basis for queries and keys changes nothing (basis_checks) -----------


BASIS_TABLE = ("basis-change-invariances", "Per implementation, the largest change of the output under a change of "
               "basis of q and k, relative to its allowance: below 1 passes.")


@checks("orthogonal-basis-change-invariance")
def test_rotating_queries_and_keys_together_changes_nothing(variant):
    ratio = check_rotation(variant)
    record_headroom(BASIS_TABLE[0], "q, k -> R q, R k (R orthogonal)", ratio, BASIS_TABLE[1])


@checks("dual-basis-change-invariance")
def test_dual_change_of_basis_changes_nothing(variant):
    ratio = check_dual_basis(variant)
    record_headroom(BASIS_TABLE[0], "q, k -> A q, A^-T k", ratio, BASIS_TABLE[1])
