"""The keyword edges: the oracle at each edge against closed forms (properties/test_keyword_domain.py catching each
wrong implementation of tests/fixtures/keyword_edge_impls.py, and passing the correct one written unusually:
tests/suite_run/test_expectations_caught.py, group "keyword-edges")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specs.dropout_mask import check_dropout
from specs.keyword_edges import SCALE_TYPES, SCALE_VALUES
from specs.problems import build
from specs.reference import attention
from specs.validation import AttentionInputError


def _two_keys(a: float, b: float):
    """One query, two keys with unscaled scores a and b (d = 1, q = 1), values 0 and 1."""
    q = np.ones((1, 1, 1, 1))
    k = np.array([a, b]).reshape(1, 1, 2, 1)
    v = np.array([0.0, 1.0]).reshape(1, 1, 2, 1)
    return q, k, v


def test_scale_zero_gives_uniform_weights_over_the_visible_keys():
    p = build(n_q=4, n_k=6, d=3, d_v=2, seed=5, score_style="large", mask_layout="query_key", mask_density=0.5)
    result = attention(p.q, p.k, p.v, scale=0.0, mask=p.mask)
    visible = p.mask.sum(axis=-1, keepdims=True)
    assert np.array_equal(result.weights[0, 0], np.where(p.mask, 1.0 / visible, 0.0))
    np.testing.assert_allclose(result.out[0, 0], (p.mask / visible) @ p.v[0, 0], rtol=1e-15, atol=0)
    np.testing.assert_allclose(result.lse[0, 0], np.log(visible[:, 0]), rtol=1e-15)


@pytest.mark.parametrize("scale", [-1.0, -0.25, -3.0])
def test_a_negative_scale_reverses_the_ranking(scale):
    """softmax over two keys: the weight of the second is 1 / (1 + e^(s (a - b)))."""
    result = attention(*_two_keys(2.0, -1.0), scale=scale)
    assert result.weights[0, 0, 0, 1] == pytest.approx(1 / (1 + math.exp(scale * 3.0)), rel=1e-15)
    assert result.weights[0, 0, 0, 1] > result.weights[0, 0, 0, 0]  # the lower score now weighs more


def test_a_huge_scale_gives_argmax_and_a_subnormal_one_the_mean():
    assert np.array_equal(attention(*_two_keys(2.0, -1.0), scale=1e9).weights[0, 0, 0], [1.0, 0.0])
    assert np.array_equal(attention(*_two_keys(2.0, -1.0), scale=-1e9).weights[0, 0, 0], [0.0, 1.0])
    assert np.array_equal(attention(*_two_keys(2.0, -1.0), scale=5e-324).weights[0, 0, 0], [0.5, 0.5])


def test_every_scale_edge_type_is_its_float_value():
    """A Python int, a NumPy scalar and a 0-d array are the same scale as the float they hold, bit for bit."""
    p = build(n_q=3, n_k=5, d=4, d_v=2, seed=2)
    for edge in SCALE_VALUES + SCALE_TYPES:
        as_float = attention(p.q, p.k, p.v, scale=float(edge.value))
        given = attention(p.q, p.k, p.v, scale=edge.value)
        assert given.scale == float(edge.value), edge.describe()
        assert np.array_equal(given.out, as_float.out), edge.describe()


def test_scores_past_float64_are_rejected_by_the_oracle_not_answered_with_nan():
    """|scale| q.k past 1.8e308 has no float64 answer: the oracle says so, where it once returned NaN with lse
    -inf (the row taken for one that sees no key). A hidden overflowing score, non-finite inputs accepted on
    purpose and a lower precision (the naive formula, whose overflow the tolerance model reads) are left alone."""
    q, k, v = _two_keys(2.0, -1.0)
    with pytest.raises(AttentionInputError, match=r"scaled score at \(0, 0, 0, 0\) overflows float64"):
        attention(q, k, v, scale=1e308)
    with np.errstate(over="ignore"):
        hidden = attention(q, k, v, scale=1e308, mask=np.array([False, True]))
        assert np.array_equal(hidden.weights[0, 0, 0], [0.0, 1.0])
        attention(q, k, v, scale=1e308, finite=False)  # inputs may hold Inf on purpose: no rejection
        assert attention(*(x.astype(np.float32) for x in (q, k, v)), scale=1e38).scores.dtype == np.float32


@pytest.mark.parametrize("scale, message", [
    (np.array([0.5]), "scale must be a real number or None, got ndarray"),
    (np.array(True), "scale must be a real number or None, got ndarray"),
    (np.array(np.inf), "scale must be finite"),
])
def test_scales_outside_the_domain_are_rejected(scale, message):
    p = build(n_q=2, n_k=2, d=2)
    with pytest.raises(AttentionInputError, match=message):
        attention(p.q, p.k, p.v, scale=scale)


def test_a_uint8_mask_is_rejected_naming_its_dtype():
    p = build(n_q=2, n_k=3, d=2)
    with pytest.raises(AttentionInputError, match=r"mask must be boolean .* got dtype uint8"):
        attention(p.q, p.k, p.v, mask=np.ones((2, 3), dtype=np.uint8))


def test_a_mask_hiding_every_key_gives_zero_output_and_lse_minus_inf():
    p = build(batch=2, heads=2, n_q=3, n_k=4, d=2)
    result = attention(p.q, p.k, p.v, mask=np.zeros((4,), dtype=bool))
    assert np.array_equal(result.out, np.zeros_like(result.out))
    assert np.all(result.lse == -np.inf)


def test_the_lse_of_rows_of_tiny_and_of_huge_scores():
    """All scores ~1e-20: lse = log n_k; all scores equal to -c (huge): lse = -c + log n_k."""
    p = build(n_q=2, n_k=5, d=3, seed=3, score_style="tiny")
    assert np.allclose(attention(p.q, p.k, p.v).lse, math.log(5), rtol=1e-15)
    q, k = np.ones((1, 1, 1, 1)), np.full((1, 1, 5, 1), -1e5)
    assert attention(q, k, np.ones((1, 1, 5, 1)), scale=1.0).lse[0, 0, 0] == pytest.approx(-1e5 + math.log(5),
                                                                                            rel=1e-15)


def test_dropout_edges_of_the_protocol():
    assert check_dropout(0.0, 7) == (0.0, 7)
    assert check_dropout(0.999, 7) == (0.999, 7)
    with pytest.raises(AttentionInputError, match=r"dropout_p must be a number in \[0, 1\)"):
        check_dropout(1.0, 7)

