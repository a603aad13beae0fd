"""The float64 oracle against closed forms and independent computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specs import examples
from specs.problems import build
from specs.reference import attention, attention_output, matmul, merge_heads, multi_head_attention, split_heads
from specs.tolerance import difference_allowance, dot_product_allowance, forward_allowance, lse_allowance
from specs.validation import AttentionInputError


def _within(got, oracle_result, allowance):
    return np.all(np.abs(got - oracle_result) <= allowance.bound)


def test_equal_scores_give_the_mean_of_values():
    p = build(n_q=4, n_k=7, d=3, d_v=5, seed=1)
    q = np.zeros_like(p.q)
    result, allowance = forward_allowance(q, p.k, p.v, dtype="float64")
    assert _within(np.broadcast_to(p.v.mean(axis=-2, keepdims=True), result.out.shape), result.out, allowance)
    assert np.all(result.weights == 1 / 7)


def test_one_dominant_score_gives_that_value_row():
    k = np.zeros((1, 1, 5, 2))
    k[0, 0, 3] = [1000.0, 0.0]
    q = np.array([[[[1.0, 0.0]]]])
    v = np.arange(10.0).reshape(1, 1, 5, 2)
    result = attention(q, k, v, scale=1.0)
    assert np.array_equal(result.out[0, 0, 0], v[0, 0, 3])  # e^-1000 underflows to exactly 0
    assert result.weights[0, 0, 0].tolist() == [0.0, 0.0, 0.0, 1.0, 0.0]


def test_seed001_worked_example_by_hand():
    """3 queries, 4 keys, dimension 2: every weight and output recomputed with math.exp and math.fsum."""
    p = examples.worked_example_001(7)
    q, k, v = p.q[0, 0], p.k[0, 0], p.v[0, 0]
    result, allowance = forward_allowance(p.q, p.k, p.v, dtype="float64")
    assert result.weights.shape == (1, 1, 3, 4) and result.out.shape == (1, 1, 3, 2)
    for i in range(3):
        scores = [math.fsum(q[i, c] * k[j, c] for c in range(2)) / math.sqrt(2) for j in range(4)]
        top = max(scores)
        total = math.fsum(math.exp(s - top) for s in scores)
        weights = [math.exp(s - top) / total for s in scores]
        for c in range(2):
            by_hand = math.fsum(w * v[j, c] for j, w in enumerate(weights))
            assert abs(by_hand - result.out[0, 0, i, c]) <= allowance.bound[0, 0, i, c]


def test_siwuxiang_example_gives_the_seeds_answer():
    problem = examples.siwuxiang(seed=3, d_v=4)
    result, allowance = forward_allowance(problem.q, problem.k, problem.v, dtype="float64")
    assert np.all(np.abs(result.out[0, 0, 0] - examples.siwuxiang_expected(problem.v)) <= allowance.bound[0, 0, 0])
    assert result.weights[0, 0, 0, -1] == 0.0  # the frog
    one_hot = np.eye(5)[None, None]
    weights, weight_allowance = forward_allowance(problem.q, problem.k, one_hot, dtype="float64")
    exact = np.array([float(w) for w in examples.SIWUXIANG_WEIGHTS])
    assert np.all(np.abs(weights.out[0, 0, 0] - exact) <= weight_allowance.bound[0, 0, 0])


def test_log_sum_exp_and_fully_masked_rows():
    p = build(n_q=3, n_k=5, d=4, seed=2)
    mask = np.ones((3, 5), dtype=bool)
    mask[1] = False
    result = attention(p.q, p.k, p.v, mask=mask)
    assert np.all(result.out[0, 0, 1] == 0) and np.all(result.weights[0, 0, 1] == 0)
    assert result.lse[0, 0, 1] == -np.inf
    allowance = lse_allowance(p.q, p.k, p.v, dtype="float64", oracle=result, mask=mask)
    for i in (0, 2):
        by_hand = math.log(math.fsum(math.exp(s) for s in result.scores[0, 0, i]))
        assert abs(result.lse[0, 0, i] - by_hand) <= allowance.bound[0, 0, i]


@pytest.mark.parametrize("alignment, expected", [
    ("top_left", [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]]),
    ("bottom_right", [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
])
def test_causal_alignments(alignment, expected):
    p = build(n_q=3, n_k=5, seed=0)
    allowed = attention(p.q, p.k, p.v, causal=True, causal_alignment=alignment).allowed
    assert allowed[0, 0].astype(int).tolist() == expected


def test_grouped_heads_read_their_kv_head():
    p = build(batch=2, heads=6, heads_kv=2, n_q=4, n_k=5, d=3, d_v=2, seed=4)
    out = attention(p.q, p.k, p.v).out
    for h in range(6):
        single = attention(p.q[:, h:h + 1], p.k[:, h // 3:h // 3 + 1], p.v[:, h // 3:h // 3 + 1]).out
        assert np.array_equal(out[:, h:h + 1], single)


def test_default_scale_is_inverse_sqrt_d():
    p = build(n_q=2, n_k=3, d=9, seed=5)
    assert np.array_equal(attention(p.q, p.k, p.v).out, attention(p.q, p.k, p.v, scale=1 / 3).out)


def test_multi_head_attention_is_heads_concatenated_then_projected():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 5, 8))
    w_q, w_k, w_v, w_o = (rng.standard_normal((8, 8)) for _ in range(4))
    got = multi_head_attention(x, x, w_q, w_k, w_v, w_o, heads=2)
    q, k, v = (split_heads(x @ w, 2) for w in (w_q, w_k, w_v))
    heads = [attention(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1]).out for h in range(2)]
    expected = merge_heads(np.concatenate(heads, axis=1)) @ w_o
    assert np.array_equal(got, expected)
    per_head_sum = sum(merge_heads(heads[h]) @ w_o[4 * h:4 * h + 4] for h in range(2))
    concatenated = merge_heads(np.concatenate(heads, axis=1))
    rounding = dot_product_allowance(concatenated, w_o.T)
    assert np.all(np.abs(got - per_head_sum) <= difference_allowance(rounding, rounding).bound)


def test_split_merge_are_inverse():
    x = np.random.default_rng(7).standard_normal((2, 10, 512))
    assert np.array_equal(merge_heads(split_heads(x, 8)), x)


def test_attention_output_forwards_every_keyword():
    p = build(batch=2, n_q=4, n_k=6, d=3, d_v=2, mask_layout="full", seed=8)
    for kwargs in (dict(scale=0.7), dict(causal=True), dict(mask=p.mask), dict(scale=2.0, causal=True)):
        assert np.array_equal(attention_output(p.q, p.k, p.v, **kwargs), attention(p.q, p.k, p.v, **kwargs).out)
    assert not np.array_equal(attention_output(p.q, p.k, p.v, scale=0.7), attention_output(p.q, p.k, p.v))


def test_one_head_splits_and_bad_head_counts_are_named():
    x = np.random.default_rng(9).standard_normal((1, 3, 6))
    assert np.array_equal(split_heads(x, 1)[:, 0], x)
    with pytest.raises(AttentionInputError, match=r"features=6 do not split into 4 heads"):
        split_heads(x, 4)
    with pytest.raises(AttentionInputError, match=r"split_heads expects \(batch, n, features\)"):
        split_heads(x[0], 2)


def test_multi_head_attention_with_grouped_kv_heads_and_core_keywords():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((1, 5, 8))
    w_q, w_o = rng.standard_normal((8, 8)), rng.standard_normal((8, 8))
    w_k, w_v = rng.standard_normal((8, 4)), rng.standard_normal((8, 4))  # 1 kv head of width 4 for 2 heads
    got = multi_head_attention(x, x, w_q, w_k, w_v, w_o, heads=2, heads_kv=1, causal=True)
    q, k, v = split_heads(x @ w_q, 2), split_heads(x @ w_k, 1), split_heads(x @ w_v, 1)
    assert np.array_equal(got, merge_heads(attention(q, k, v, causal=True).out) @ w_o)


@pytest.mark.parametrize("name, args", [
    ("x_q", lambda x, w: (x[0], x, w, w, w, w)),
    ("x_kv", lambda x, w: (x, x[0], w, w, w, w)),
    ("w_q", lambda x, w: (x, x, w[:3], w, w, w)),
    ("w_k", lambda x, w: (x, x, w, w[:3], w, w)),
    ("w_v", lambda x, w: (x, x, w, w, w[:3], w)),
    ("w_o", lambda x, w: (x, x, w, w, w, w[:3])),
])
def test_multi_head_attention_names_the_bad_argument(name, args):
    x, w = np.zeros((1, 2, 4)), np.eye(4)
    with pytest.raises(AttentionInputError, match=rf"^{name} must"):
        multi_head_attention(*args(x, w), heads=2)


def test_causal_and_mask_together_hide_what_either_hides():
    p = build(n_q=4, n_k=4, d=2, d_v=2, seed=11)
    mask = np.array([[True, False, True, True]] * 4)
    allowed = attention(p.q, p.k, p.v, causal=True, mask=mask).allowed[0, 0]
    assert np.array_equal(allowed, np.tril(np.ones((4, 4), dtype=bool)) & mask)


def test_non_finite_inputs_when_allowed_stay_where_no_query_sees_them():
    """finite=False (what the numpy-reference record passes): NaN/Inf in padded keys and values never reach
    the output, a NaN a query sees does; the default rejects them by name."""
    p = build(batch=2, n_q=3, n_k=5, d=2, d_v=2, mask_layout="key_padding", seed=12)
    mask = np.ones((2, 1, 1, 5), dtype=bool)
    mask[0, ..., 3] = False
    k, v = p.k.copy(), p.v.copy()
    k[0, :, 3], v[0, :, 3] = np.nan, np.inf
    clean = attention(p.q, p.k, p.v, mask=mask).out
    np.testing.assert_array_equal(attention(p.q, k, v, mask=mask, finite=False).out[0], clean[0])
    assert np.isnan(attention(p.q, k, v, finite=False).out[0]).all()
    with pytest.raises(AttentionInputError, match="k contains a non-finite value"):
        attention(p.q, k, v, mask=mask)


def _same_float16(got: np.ndarray, expected: np.ndarray) -> bool:
    """The same bits, NaN at the same places (a NaN's payload is the cast's business)."""
    nan = np.isnan(expected)
    return (got.shape == expected.shape and np.array_equal(np.isnan(got), nan)
            and np.array_equal(got.view(np.uint16)[~nan], expected.view(np.uint16)[~nan]))


@given(batch=st.sampled_from([(), (1,), (2, 3), (1, 4)]), m=st.integers(1, 70), k=st.integers(1, 90),
       n=st.integers(1, 70), magnitude=st.sampled_from([1e-6, 1e-3, 1.0, 30.0, 3e3]), seed=st.integers(0, 2**16),
       special=st.sampled_from([None, np.inf, -np.inf, np.nan, 0.0]))
@settings(max_examples=200, deadline=None)
def test_float16_matmul_has_numpys_bits(batch, m, k, n, magnitude, seed, special):
    """specs.reference.matmul sums float16 products in float32 steps: NumPy's own float16 product, to the bit,
    through overflow to inf, subnormals, infinities and NaN."""
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((*batch, m, k)) * magnitude).astype(np.float16)
    b = (rng.standard_normal((*batch, k, n)) * magnitude).astype(np.float16)
    if special is not None:
        a[(0,) * len(batch) + (0, 0)] = special
    assert _same_float16(matmul(a, b), np.matmul(a, b))


def test_float16_matmul_bits_tell_a_float16_running_sum_apart():
    """The check above has power: summing in float16 (rounding after each product) is caught."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 64, 64)).astype(np.float16)
    b = rng.standard_normal((4, 64, 64)).astype(np.float16)
    running = np.zeros((4, 64, 64), np.float16)
    for j in range(64):
        running += a[..., :, j:j + 1] * b[..., j:j + 1, :]
    assert _same_float16(matmul(a, b), np.matmul(a, b)) and not _same_float16(running, np.matmul(a, b))
