"""The NumPy tiled backward (impls.numpy.numpy_tiled.tiled_attention_backward, seed 000 § Flash Attention,
FlashAttention-2's loop order) against the oracle's backward (specs.gradients.attention_backward).

This is the implementation's own unit test; the bound below is derived here, not the suite's shared
tolerance model. Both computations evaluate the same first-order formulas in float64 (u = 2^-53), in
different orders. Each rounds:
* P_ij = exp(S_ij - LSE_i): S is a length-d dot product and a scaling (absolute error <= (d + 2) u A,
  A = max_ij |s| |q_i| . |k_j|) and LSE is a log of a sum of n_k exponentials (<= (n_k + 4) u L,
  L = max |S| + log n_k + 1); exp turns those absolute errors into a relative error of P:
  e_P <= ((d + 2) A + (n_k + 4) L + 2) u.
* dP = dO V^T (d_v terms), D = rowsum(dO * O) (d_v terms, and O's own error: n_k terms and e_P),
  dS = P * (dP - D): relative to M_ij = P_ij ((|dO| |V|^T)_ij + (|dO| . (P |V|))_i) the error is
  <= (e_P + (d_v + n_k + 4) u) M_ij, since every term of dP, D and O is bounded by M.
* dQ = s dS K, dK = s dS^T Q, dV = P^T dO sum n_k, resp. group * n_q, terms more.
So with r = e_P + (n_k + group * n_q + d + d_v + 8) u, per element
  |dQ - dQ*| <= r s (M |K|),  |dK - dK*| <= r s (M^T |Q|) (summed over the group),  |dV - dV*| <= r (P^T |dO|),
for either computation; the test allows SAFETY = 2 (neglected second-order terms) times the sum of the
two computations' bounds. The magnitudes are absolute values, so elements where dQ cancels to nearly 0
(sum_j dS_ij = 0 makes that common) still get the allowance their terms earned: a plain rtol on |dQ*|
would fail them by chance. The wrong backwards below miss by orders of magnitude.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

import impls.numpy.numpy_tiled as numpy_tiled
from harness.api.assertions import PropertyViolation, assert_within
from impls.numpy.numpy_tiled import tiled_attention, tiled_attention_backward
from protocol.registry import load_impl
from specs.gradients import attention_backward
from specs.reference import attention, repeat_kv
from specs.tolerance import SAFETY, Allowance, unit_roundoff
from specs.validation import AttentionInputError

BLOCKS = [(1, 1), (1, 4), (3, 5), (7, 2), (4, 16), (16, 16), (64, 64)]  # 64 > every n below


def _problem(rng, *, batch=2, heads=2, heads_kv=2, n_q=13, n_k=11, d=6, d_v=6, dtype=np.float64):
    q = rng.standard_normal((batch, heads, n_q, d))
    k = rng.standard_normal((batch, heads_kv, n_k, d))
    v = rng.standard_normal((batch, heads_kv, n_k, d_v))
    d_out = rng.standard_normal((batch, heads, n_q, d_v))
    return tuple(x.astype(dtype) for x in (q, k, v, d_out))


def _sum_groups(x: np.ndarray, heads_kv: int) -> np.ndarray:
    b, h, n, d = x.shape
    return x.reshape(b, heads_kv, h // heads_kv, n, d).sum(axis=2)


def _allowances(q, k, v, d_out, u: float, **kwargs) -> tuple[Allowance, Allowance, Allowance]:
    """The componentwise bounds of the module docstring, from the float64 oracle's exact-enough P."""
    q, k, v, d_out = (x.astype(np.float64) for x in (q, k, v, d_out))
    result = attention(q, k, v, **kwargs)
    _, heads, n_q, d = q.shape
    heads_kv, n_k, d_v = k.shape[1], k.shape[2], v.shape[3]
    group = heads // heads_kv
    k_all, v_all = repeat_kv(k, group), repeat_kv(v, group)
    s = abs(result.scale)
    p = result.weights
    a = s * float(np.max(np.abs(q) @ np.abs(k_all).swapaxes(-1, -2)))
    visible = result.scores[np.isfinite(result.scores)]
    big_l = (float(np.max(np.abs(visible))) if visible.size else 0.0) + math.log(n_k) + 1
    e_p = ((d + 2) * a + (n_k + 4) * big_l + 2) * u
    r = 2 * SAFETY * (e_p + (n_k + group * n_q + d + d_v + 8) * u)  # 2: either computation may err so far
    magnitude = p * (np.abs(d_out) @ np.abs(v_all).swapaxes(-1, -2)
                     + np.sum(np.abs(d_out) * (p @ np.abs(v_all)), axis=-1, keepdims=True))
    rule = f"r M-magnitudes, r = 2 SAFETY (e_P + (n_k + group n_q + d + d_v + 8) u) = {r:.3g}"
    return (Allowance(r * s * (magnitude @ np.abs(k_all)), f"dQ: {rule}"),
            Allowance(r * s * _sum_groups(magnitude.swapaxes(-1, -2) @ np.abs(q), heads_kv), f"dK: {rule}"),
            Allowance(r * _sum_groups(p.swapaxes(-1, -2) @ np.abs(d_out), heads_kv), f"dV: {rule}"))


def _check(got, q, k, v, d_out, *, u: float = unit_roundoff(np.float64), **kwargs) -> float:
    """Compare (dq, dk, dv) with the oracle's backward; return the largest error / allowed."""
    expected = attention_backward(*(x.astype(np.float64) for x in (q, k, v, d_out)), **kwargs)
    allowances = _allowances(q, k, v, d_out, u, **kwargs)
    ratios = [assert_within(g.astype(np.float64), e, a, what=name, versus="the oracle's backward")
              for name, g, e, a in zip(("dQ", "dK", "dV"), got, expected, allowances, strict=True)]
    return max(ratios)


@pytest.mark.parametrize("block_rows,block_cols", BLOCKS)
@pytest.mark.parametrize("visibility", ["all", "causal", "mask", "causal+mask"])
def test_matches_the_oracle_for_every_block_size(block_rows, block_cols, visibility):
    rng = np.random.default_rng(block_rows * 100 + block_cols)
    q, k, v, d_out = _problem(rng)
    causal = "causal" in visibility
    mask = rng.random((2, 1, 13, 11)) < 0.6 if "mask" in visibility else None  # broadcasts over heads
    got = tiled_attention_backward(q, k, v, d_out, scale=0.7, causal=causal, mask=mask,
                                   block_rows=block_rows, block_cols=block_cols)
    _check(got, q, k, v, d_out, scale=0.7, causal=causal, mask=mask)


@pytest.mark.parametrize("n_q,n_k", [(5, 17), (17, 5), (16, 16), (17, 17)])
@pytest.mark.parametrize("causal", [False, True])
def test_cross_lengths_and_lengths_past_a_block(n_q, n_k, causal):
    rng = np.random.default_rng(n_q * 31 + n_k)
    q, k, v, d_out = _problem(rng, n_q=n_q, n_k=n_k)
    got = tiled_attention_backward(q, k, v, d_out, causal=causal, block_rows=4, block_cols=4)
    _check(got, q, k, v, d_out, causal=causal)
    if causal and n_k > n_q:  # top-left: keys past the last query are seen by no one
        assert not got[1][:, :, n_q:].any() and not got[2][:, :, n_q:].any()


@pytest.mark.parametrize("heads,heads_kv", [(6, 2), (4, 1), (3, 3)])
def test_gqa_and_mqa_sum_dk_dv_over_the_group(heads, heads_kv):
    rng = np.random.default_rng(heads * 10 + heads_kv)
    q, k, v, d_out = _problem(rng, heads=heads, heads_kv=heads_kv)
    got = tiled_attention_backward(q, k, v, d_out, causal=True, block_rows=5, block_cols=3)
    assert got[1].shape == k.shape and got[2].shape == v.shape
    _check(got, q, k, v, d_out, causal=True)


@pytest.mark.parametrize("d,d_v", [(6, 9), (9, 2), (1, 1)])
def test_value_dim_may_differ_from_the_key_dim(d, d_v):
    rng = np.random.default_rng(d * 10 + d_v)
    q, k, v, d_out = _problem(rng, d=d, d_v=d_v)
    got = tiled_attention_backward(q, k, v, d_out, block_rows=3, block_cols=4)
    assert [g.shape for g in got] == [q.shape, k.shape, v.shape]
    _check(got, q, k, v, d_out)


def test_fully_masked_rows_get_exactly_zero_dq_and_no_nan():
    rng = np.random.default_rng(7)
    q, k, v, d_out = _problem(rng)
    mask = rng.random((2, 2, 13, 11)) < 0.6
    mask[0, 1, 4] = False
    mask[1, :, 12] = False  # the last row, alone in its block of 4 rows
    got = tiled_attention_backward(q, k, v, d_out, mask=mask, block_rows=4, block_cols=3)
    for g in got:
        assert np.all(np.isfinite(g))
    assert np.array_equal(got[0][0, 1, 4], np.zeros(6)) and np.array_equal(got[0][1, :, 12], np.zeros((2, 6)))
    _check(got, q, k, v, d_out, mask=mask)


def test_nan_in_keys_and_values_no_query_sees_does_not_leak():
    rng = np.random.default_rng(8)
    q, k, v, d_out = _problem(rng)
    mask = np.ones((13, 11), dtype=bool)
    mask[:, 10] = False  # key 10 is padding
    expected = tiled_attention_backward(q, k, v, d_out, mask=mask, block_rows=4, block_cols=4)
    k[:, :, 10], v[:, :, 10] = np.nan, np.inf
    got = tiled_attention_backward(q, k, v, d_out, mask=mask, block_rows=4, block_cols=4)
    assert np.array_equal(got[0], expected[0])
    assert np.array_equal(got[1][:, :, :10], expected[1][:, :, :10]) and not got[1][:, :, 10].any()
    assert np.array_equal(got[2], expected[2])


def test_float32_stays_float32_within_the_same_bound_at_float32_roundoff():
    rng = np.random.default_rng(9)
    q, k, v, d_out = _problem(rng, heads=4, heads_kv=2, dtype=np.float32)
    got = tiled_attention_backward(q, k, v, d_out, causal=True, block_rows=5, block_cols=3)
    assert [g.dtype for g in got] == [np.float32] * 3
    _check(got, q, k, v, d_out, u=unit_roundoff(np.float32), causal=True)


def _wrong_lse_as_row_max(q, k, v, **kwargs):
    """P = exp(S - rowmax): the forward's statistics without the normaliser l."""
    out, _ = tiled_attention(q, k, v, **kwargs)
    forward = {key: kwargs[key] for key in ("scale", "causal", "mask")}
    return out, attention(q, k, v, **forward).scores.max(axis=-1)


def _wrong_without_d(q, k, v, **kwargs):
    """D = rowsum(dO * O) forgotten: the same as an output of zeros."""
    out, lse = tiled_attention(q, k, v, **kwargs)
    return np.zeros_like(out), lse


@pytest.mark.parametrize("forward", [_wrong_lse_as_row_max, _wrong_without_d], ids=["unnormalised-P", "no-D-term"])
def test_a_wrong_backward_fails_the_same_comparison(monkeypatch, forward):
    rng = np.random.default_rng(10)
    q, k, v, d_out = _problem(rng)
    monkeypatch.setattr(numpy_tiled, "tiled_attention", forward)
    got = tiled_attention_backward(q, k, v, d_out, causal=True, block_rows=4, block_cols=3)
    with pytest.raises(PropertyViolation, match="differs from the oracle's backward"):
        _check(got, q, k, v, d_out, causal=True)


def test_no_n_by_n_matrix_is_built():
    n, d, block = 2048, 8, 64
    rng = np.random.default_rng(11)
    q, k, v, d_out = _problem(rng, batch=1, heads=1, heads_kv=1, n_q=n, n_k=n, d=d, d_v=d)
    tracemalloc.start()
    try:
        tiled_attention_backward(q, k, v, d_out, causal=True, block_rows=block, block_cols=block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    n_by_n = n * n * 8
    assert peak < n_by_n / 8, f"peak {peak} bytes; an n x n float64 matrix is {n_by_n}"


def test_the_record_declares_its_backward():
    impl = load_impl("impls.numpy.numpy_tiled:tiled_attention")
    assert impl.capabilities.backward and impl.capabilities.gradients
    assert impl.fn.attention_backward is tiled_attention_backward


@pytest.mark.parametrize("d_out,match", [
    (np.zeros((2, 2, 13, 5)), r"d_out has shape \(2, 2, 13, 5\); it must have the output's shape .* \(2, 2, 13, 6\)"),
    (np.zeros((2, 2, 13)), r"d_out has shape \(2, 2, 13\)"),
    (np.zeros((2, 2, 13, 6), dtype=np.int64), "d_out has dtype int64"),
    ([[0.0]], "d_out must be a numpy array, got list"),
])
def test_d_out_of_the_wrong_kind_is_rejected(d_out, match):
    q, k, v, _ = _problem(np.random.default_rng(12))
    with pytest.raises(AttentionInputError, match=match):
        tiled_attention_backward(q, k, v, d_out)


@pytest.mark.parametrize("kwargs,match", [
    ({"block_rows": 0}, "block_rows must be a positive int"),
    ({"block_cols": 2.5}, "block_cols must be a positive int"),
    ({"mask": np.ones((13, 11))}, "mask must be boolean"),
    ({"mask": np.ones((3, 11), dtype=bool)}, "does not broadcast"),
])
def test_other_arguments_are_checked_as_the_forward_checks_them(kwargs, match):
    q, k, v, d_out = _problem(np.random.default_rng(13))
    with pytest.raises(AttentionInputError, match=match):
        tiled_attention_backward(q, k, v, d_out, **kwargs)
