"""The tiled, paged and split-KV records in process, on a grid of block sizes against the oracle: the
tests mutation testing (`tox -e mutants`) runs against impls/numpy/numpy_tiled.py, numpy_paged.py,
numpy_split_kv.py and online_softmax.py, as the properties run them through the plugin."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from harness.api.trial import Trial, check_against_oracle
from protocol.registry import Variant, load_impl
from specs.problems import build
from specs.reference import attention
from specs.validation import AttentionInputError

TILED = load_impl("impls.numpy.numpy_tiled:tiled_attention")
PAGED = load_impl("impls.numpy.numpy_paged:paged_attention")
SPLIT = load_impl("impls.numpy.numpy_split_kv:split_kv_attention")
RECIPES = [
    dict(n_q=1, n_k=1, d=1, d_v=1),
    dict(n_q=17, n_k=33, d=5, d_v=3, batch=2, heads=4, heads_kv=2),
    dict(n_q=33, n_k=17, d=8, d_v=8, causal=True),
    dict(n_q=20, n_k=20, d=4, d_v=6, causal=True, heads=2, heads_kv=1),
    dict(n_q=9, n_k=40, d=4, d_v=4, mask_layout="full", mask_density=0.3, empty_rows=True),
    dict(n_q=12, n_k=12, d=4, d_v=4, mask_layout="key_padding", batch=2),
    dict(n_q=6, n_k=30, d=3, d_v=3, score_style="large"),
    dict(n_q=5, n_k=7, d=4, d_v=4, scale=0.3, causal=True),
    dict(n_q=130, n_k=9, d=2, d_v=2, mask_layout="full", mask_density=0.1, empty_rows=True),
]


def _variant(impl, dtype="float64") -> Variant:
    return Variant(impl, dtype)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: ",".join(f"{k}={v}" for k, v in r.items()))
@pytest.mark.parametrize("rows, cols", [(1, 1), (3, 5), (16, 16), (64, 7)])
def test_tiled_equals_oracle_for_any_blocks(recipe, rows, cols):
    for dtype in ("float64", "float32"):
        check_against_oracle(_variant(TILED, dtype), build(**recipe), block_rows=rows, block_cols=cols)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: ",".join(f"{k}={v}" for k, v in r.items()))
@pytest.mark.parametrize("page_size", [1, 4, 16, 64])
def test_paged_equals_oracle_for_any_page_size(recipe, page_size):
    check_against_oracle(_variant(PAGED), build(**recipe), page_size=page_size)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: ",".join(f"{k}={v}" for k, v in r.items()))
@pytest.mark.parametrize("splits", [1, 2, 5, 100])
def test_split_kv_equals_oracle_for_any_split(recipe, splits):
    for dtype in ("float64", "float32", "float16"):
        check_against_oracle(_variant(SPLIT, dtype), build(**recipe), num_splits=splits)


@pytest.mark.parametrize("record, blocks", [(TILED, dict(block_rows=4, block_cols=3)), (SPLIT, dict(num_splits=3))])
def test_returned_lse_is_the_oracles(record, blocks):
    problem = build(n_q=7, n_k=11, d=4, d_v=4, causal=True, heads=2, heads_kv=1)
    out, lse = record.fn(problem.q, problem.k, problem.v, causal=True, return_lse=True, **blocks)
    oracle = attention(problem.q, problem.k, problem.v, causal=True)
    np.testing.assert_allclose(out, oracle.out, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lse, oracle.lse, rtol=1e-12)


@pytest.mark.parametrize("record", [TILED, PAGED, SPLIT], ids=lambda i: i.name)
def test_padding_holding_nan_never_reaches_the_output(record):
    problem = build(n_q=5, n_k=9, d=3, d_v=3, batch=2, mask_layout="key_padding", seed=3)
    batch, key = np.nonzero(~problem.mask[:, 0, 0])  # (batch, key) pairs the padding hides
    assert batch.size, "the recipe must pad some keys"
    k, v = problem.k.copy(), problem.v.copy()
    k[batch, 0, key], v[batch, 0, key] = np.nan, np.inf
    out = record.fn(problem.q, k, v, mask=problem.mask)
    np.testing.assert_allclose(out, attention(problem.q, problem.k, problem.v, mask=problem.mask).out,
                               rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("record", [TILED, PAGED, SPLIT], ids=lambda i: i.name)
def test_visible_nan_reaches_its_rows(record):
    problem = build(n_q=4, n_k=6, d=3, d_v=3)
    v = problem.v.copy()
    v[0, 0, 2, 1] = np.nan
    out = record.fn(problem.q, problem.k, v)
    assert np.isnan(out[..., 1]).all() and np.isfinite(out[..., [0, 2]]).all()


@pytest.mark.parametrize("record, keyword", [(TILED, "block_rows"), (TILED, "block_cols"), (PAGED, "page_size"),
                                           (SPLIT, "num_splits")])
@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_block_sizes_are_named(record, keyword, bad):
    problem = build(n_q=3, n_k=3, d=2, d_v=2)
    with pytest.raises(AttentionInputError, match=rf"(?<![A-Za-z_]){keyword}(?![A-Za-z_])"):
        record.fn(problem.q, problem.k, problem.v, **{keyword: bad})


def test_a_wrong_block_is_caught_by_the_check():
    """The check these tests rely on fails on a tiled result that is off in one block."""
    problem = build(n_q=8, n_k=8, d=4, d_v=4)
    trial = Trial(_variant(TILED), problem)
    oracle, allowance = trial.oracle()
    wrong = oracle.out.copy()
    wrong[..., :4, :] *= 1 + 1e-9
    with pytest.raises(PropertyViolation, match="beyond the tolerance"):
        trial.expect_close(wrong, oracle.out, allowance)


@pytest.mark.parametrize("record, blocks", [(TILED, dict(block_rows=2, block_cols=2)), (SPLIT, dict(num_splits=2))])
def test_rows_with_no_visible_key_give_zero_and_lse_minus_infinity(record, blocks):
    problem = build(n_q=3, n_k=4, d=2, d_v=2, mask_layout="query_key", seed=4)
    mask = np.ones((3, 4), dtype=bool)
    mask[1] = False
    out, lse = record.fn(problem.q, problem.k, problem.v, mask=mask, return_lse=True, **blocks)
    assert np.array_equal(out[:, :, 1], np.zeros_like(out[:, :, 1])) and np.all(lse[:, :, 1] == -np.inf)
    assert np.all(np.isfinite(lse[:, :, [0, 2]]))


@pytest.mark.parametrize("record", [TILED, PAGED, SPLIT], ids=lambda i: i.name)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_outputs_keep_the_inputs_dtype(record, dtype):
    if dtype == "float16" and record is TILED:
        pytest.skip("numpy-tiled declares float64 and float32")
    problem = build(n_q=3, n_k=5, d=2, d_v=2)
    out = record.fn(*(x.astype(dtype) for x in (problem.q, problem.k, problem.v)))
    assert out.dtype == dtype


@pytest.mark.parametrize("record, dtype, lse_dtype", [
    (SPLIT, "float64", "float64"), (SPLIT, "float32", "float32"), (SPLIT, "float16", "float32"),
    (TILED, "float64", "float64"), (TILED, "float32", "float32"),
], ids=lambda x: getattr(x, "name", x))
def test_lse_is_float32_or_wider_as_flash_attention_returns_it(record, dtype, lse_dtype):
    problem = build(n_q=3, n_k=5, d=2, d_v=2)
    _, lse = record.fn(*(x.astype(dtype) for x in (problem.q, problem.k, problem.v)), return_lse=True)
    assert lse.dtype == lse_dtype
