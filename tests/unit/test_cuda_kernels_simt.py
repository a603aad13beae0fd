"""The SIMT kernels (impls/cuda/kernels/flash_simt.cu and paged_decode.cu) run by the CPU executor against the
float64 oracle under the tolerance model, on shapes past every tile edge; plus the rows the contract singles out
(no visible key, hidden NaN, visible NaN), the inputs the records refuse, and a clean NVRTC build for the GPUs."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.trial import check_against_oracle
from impls.cuda.cuda_flash_simt import KERNEL as FLASH_KERNEL
from impls.cuda.cuda_paged_decode import KERNEL as PAGED_KERNEL
from impls.cuda.runtime.launch import KernelSource
from protocol.registry import Variant, load_impl
from specs.problems import build
from specs.reference import attention
from specs.validation import AttentionInputError

FLASH = load_impl("impls.cuda.cuda_flash_simt:flash_simt_on_cpu")
FLASH_BOTTOM_RIGHT = load_impl("impls.cuda.cuda_flash_simt:flash_simt_bottom_right_on_cpu")
PAGED = load_impl("impls.cuda.cuda_paged_decode:paged_decode_on_cpu")
on_cpu = pytest.mark.skipif(bool(FLASH.unavailable), reason=f"CPU executor: {FLASH.unavailable}")
DTYPES = ("float32", "float16")

FLASH_RECIPES = [
    dict(n_q=1, n_k=1, d=8, d_v=8),
    dict(n_q=65, n_k=130, d=64, d_v=24, batch=2, heads=4, heads_kv=2),  # GQA, tails on both tiles
    dict(n_q=97, n_k=100, d=80, d_v=96, heads=2, heads_kv=1, causal=True),  # row 96 needs key tile 96..127
    dict(n_q=5, n_k=40, d=256, d_v=256, heads=3, heads_kv=1, mask_layout="full", mask_density=0.3, empty_rows=True),
    dict(n_q=33, n_k=70, d=16, d_v=8, batch=2, mask_layout="key_padding"),
    dict(n_q=20, n_k=37, d=8, d_v=40, score_style="large", scale=0.7),
]
BOTTOM_RIGHT_RECIPES = [
    dict(n_q=40, n_k=20, d=16, d_v=8, heads=2, heads_kv=1, causal=True),  # the first 20 rows see no key
    dict(n_q=5, n_k=130, d=64, d_v=32, causal=True),
]
PAGED_RECIPES = [
    dict(n_q=1, n_k=130, d=64, d_v=80, batch=2, heads=4, heads_kv=2),  # decode
    dict(n_q=9, n_k=70, d=256, d_v=256, heads=2, heads_kv=1, causal=True),
    dict(n_q=4, n_k=33, d=8, d_v=16, batch=2, mask_layout="full", mask_density=0.3, empty_rows=True),
    dict(n_q=7, n_k=3, d=8, d_v=8, causal=True),  # one warp; the first 4 rows see no key
]


def _ids(recipe: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in recipe.items())


@on_cpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("recipe", FLASH_RECIPES, ids=_ids)
def test_flash_simt_matches_the_oracle(recipe, dtype):
    check_against_oracle(Variant(FLASH, dtype), build(**recipe))


@on_cpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("recipe", BOTTOM_RIGHT_RECIPES, ids=_ids)
def test_flash_simt_bottom_right_matches_the_oracle(recipe, dtype):
    check_against_oracle(Variant(FLASH_BOTTOM_RIGHT, dtype), build(**recipe))


@on_cpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page_size", [1, 7, 64])
@pytest.mark.parametrize("recipe", PAGED_RECIPES, ids=_ids)
def test_paged_decode_matches_the_oracle(recipe, page_size, dtype):
    check_against_oracle(Variant(PAGED, dtype), build(**recipe), page_size=page_size)


@on_cpu
@pytest.mark.parametrize("record, extra", [(FLASH, {}), (PAGED, dict(page_size=5))], ids=["flash", "paged"])
def test_lse_is_the_oracles_and_empty_rows_are_zero(record, extra):
    problem = build(n_q=6, n_k=45, d=16, d_v=12, heads=2, heads_kv=1, seed=5)
    mask = np.ones((6, 45), dtype=bool)
    mask[2] = False
    q, k, v = (x.astype(np.float32) for x in (problem.q, problem.k, problem.v))
    out, lse = record.fn(q, k, v, mask=mask, return_lse=True, **extra)
    oracle = attention(*(x.astype(np.float64) for x in (q, k, v)), mask=mask)
    assert out.dtype == np.float32 and lse.shape == (1, 2, 6)
    assert np.all(out[:, :, 2] == 0) and np.all(lse[:, :, 2] == -np.inf)
    np.testing.assert_allclose(lse, oracle.lse, rtol=1e-6)
    np.testing.assert_allclose(out, oracle.out, atol=1e-6)


@on_cpu
@pytest.mark.parametrize("record, extra", [(FLASH, {}), (PAGED, dict(page_size=6))], ids=["flash", "paged"])
@pytest.mark.parametrize("mask_shape", [(40,), (17, 1), (1, 2, 1, 40), (2, 1, 17, 1)], ids=str)
def test_masks_broadcast_along_any_axis(record, extra, mask_shape):
    problem = build(n_q=17, n_k=40, d=8, d_v=8, batch=2, heads=2, heads_kv=1, seed=7)
    mask = np.random.default_rng(7).random(mask_shape) < 0.6
    q, k, v = (x.astype(np.float32) for x in (problem.q, problem.k, problem.v))
    out = record.fn(q, k, v, mask=mask, **extra)
    np.testing.assert_allclose(out, attention(*(x.astype(np.float64) for x in (q, k, v)), mask=mask).out, atol=1e-6)


@on_cpu
@pytest.mark.parametrize("record, extra", [(FLASH, {}), (PAGED, dict(page_size=3))], ids=["flash", "paged"])
def test_hidden_nan_and_inf_never_reach_the_output(record, extra):
    problem = build(n_q=5, n_k=40, d=8, d_v=8, batch=2, mask_layout="key_padding", seed=3)
    batch, key = np.nonzero(~problem.mask[:, 0, 0])
    assert batch.size, "the recipe must pad some keys"
    q, k, v = (x.astype(np.float16) for x in (problem.q, problem.k, problem.v))
    clean = record.fn(q, k, v, mask=problem.mask, **extra)
    k[batch, 0, key], v[batch, 0, key] = np.nan, np.inf
    assert np.array_equal(record.fn(q, k, v, mask=problem.mask, **extra), clean)


@on_cpu
@pytest.mark.parametrize("record, extra", [(FLASH, {}), (PAGED, dict(page_size=4))], ids=["flash", "paged"])
def test_a_visible_nan_reaches_its_rows(record, extra):
    problem = build(n_q=4, n_k=35, d=8, d_v=3)
    q, k, v = (x.astype(np.float32) for x in (problem.q, problem.k, problem.v))
    v[0, 0, 33, 1] = np.nan
    out = record.fn(q, k, v, **extra)
    assert np.isnan(out[..., 1]).all() and np.isfinite(out[..., [0, 2]]).all()
    q[0, 0, 2, 0] = np.nan  # every score of row 2 is NaN: not a row without keys
    out, lse = record.fn(q, problem.k.astype(np.float32), problem.v.astype(np.float32), return_lse=True, **extra)
    assert np.isnan(out[0, 0, 2]).all() and np.isnan(lse[0, 0, 2]) and np.isfinite(np.delete(out, 2, axis=2)).all()


@pytest.mark.parametrize("record", [FLASH, PAGED], ids=["flash", "paged"])
@pytest.mark.parametrize("change, message", [
    (dict(dtype=np.float64), "float32 or float16"),
    (dict(k_dtype=np.float16), "share one dtype"),
    (dict(d=257), "d=257 exceeds"),
    (dict(d_v=300), "d_v=300 exceeds"),
])
def test_inputs_the_kernels_cannot_take_are_refused(record, change, message):
    d, d_v = change.get("d", 4), change.get("d_v", 4)
    dtype = change.get("dtype", np.float32)
    q, v = np.ones((1, 1, 2, d), dtype), np.ones((1, 1, 3, d_v), dtype)
    k = np.ones((1, 1, 3, d), change.get("k_dtype", dtype))
    with pytest.raises(AttentionInputError, match=message):
        record.fn(q, k, v)


@pytest.mark.parametrize("kernel", [FLASH_KERNEL, PAGED_KERNEL], ids=lambda k: k.name)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_builds_every_entry_without_spilling_or_stack(kernel: KernelSource, arch):
    from impls.cuda.runtime.nvrtc import NvrtcUnavailable, resources

    try:
        found = resources(kernel, arch)
    except NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    assert sorted(r.kernel for r in found) == sorted(kernel.entries)
    assert all(r.spill_stores == r.spill_loads == r.stack_bytes == 0 for r in found), found
