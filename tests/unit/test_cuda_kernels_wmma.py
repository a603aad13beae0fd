"""The tensor-core kernel (impls/cuda/kernels/flash_wmma.cu) run by the CPU executor against the float64 oracle
on the same float16 / bfloat16 inputs, under an error bound derived from where the kernel rounds; plus rows with
no visible key, NaN and Inf where a row may or may not see them, the inputs the record refuses, and a clean
NVRTC build for the H100.

The bound, per output element (i, c), with u the unit roundoff of the input type (2^-11 float16, 2^-8
bfloat16) and w the oracle's weights:
- scores, exp2 and every sum run in float32 (unit roundoff 2^-24): a row's exponents are off by at most
  e_i = (d + 4) 2^-24 scale max_j sum_c |q_ic k_jc| log2(e) (the dot product, the folded scale and the
  subtraction of the maximum), which moves each normalised weight by a relative 2 e_i ln 2 at most;
- the weights are rounded to the input type before the P V product (the row sum l is taken unrounded): each
  by a relative u, plus, in float16, an absolute 2^-25 where it is subnormal (weights are <= 2^8 there, as
  the running maximum is only raised by more than 2^8, so divided by l >= 1 that is <= n_k 2^-25 max|v|);
- the output is rounded to the input type: a relative u.
So |out - oracle| <= (u + 2 e_i ln 2) sum_j w_ij |v_jc| + u |oracle_ic| + n_k 2^-25 max|v| (float16) + 1e-6,
and a kernel that drops a rescale, a mask entry or a key, or reads the wrong kv head, is off by far more.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from impls.cuda.cuda_flash_wmma import KERNEL, run
from impls.cuda.cuda_records import cpu_unavailable
from specs.dtypes import missing, numpy_dtype
from specs.reference import attention
from specs.validation import AttentionInputError

on_cpu = pytest.mark.skipif(bool(cpu_unavailable()), reason=f"CPU executor: {cpu_unavailable()}")
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


def case(dtype: str, *rest):
    """One parameter set, skipped where the package of `dtype` (ml_dtypes for bfloat16) is not installed."""
    return pytest.param(dtype, *rest, marks=pytest.mark.skipif(bool(missing(dtype)), reason=str(missing(dtype))))


def inputs(dtype: str, batch: int, heads: int, heads_kv: int, n_q: int, n_k: int, d: int, d_v: int,
           seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = ((batch, heads, n_q, d), (batch, heads_kv, n_k, d), (batch, heads_kv, n_k, d_v))
    return tuple(rng.standard_normal(shape).astype(numpy_dtype(dtype)) for shape in shapes)


def expect_within_bound(q, k, v, *, scale=None, causal=False, mask=None) -> None:
    dtype = q.dtype.name
    u = UNIT_ROUNDOFF[dtype]
    out, lse = run(q, k, v, scale=scale, causal=causal, mask=mask, return_lse=True, executor="cpu")
    assert out.dtype == q.dtype and lse.dtype == np.float32
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    oracle = attention(q64, k64, v64, scale=scale, causal=causal, mask=mask)
    group = q.shape[1] // k.shape[1]
    k_all, v_all = np.repeat(k64, group, axis=1), np.repeat(v64, group, axis=1)
    dots = np.abs(q64) @ np.abs(k_all).swapaxes(-1, -2)
    exponent = (q.shape[-1] + 4) * 2.0**-24 * oracle.scale * dots.max(axis=-1, keepdims=True) * math.log2(math.e)
    floor = 1e-6 + (k.shape[2] * 2.0**-25 * np.abs(v64).max() if dtype == "float16" else 0.0)
    bound = (u + 2 * exponent * math.log(2)) * (oracle.weights @ np.abs(v_all)) + u * np.abs(oracle.out) + floor
    error = np.abs(out.astype(np.float64) - oracle.out)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert (error <= bound).all(), f"out{list(worst)} off by {error[worst]:.3g} > bound {bound[worst]:.3g}"
    empty = np.isneginf(oracle.lse)
    assert np.array_equal(np.isneginf(lse), empty) and np.all(out[empty] == 0)
    np.testing.assert_allclose(lse[~empty], oracle.lse[~empty], rtol=1e-5, atol=1e-5)


CASES = [  # dtype, (batch, heads, heads_kv, n_q, n_k, d, d_v), keywords
    case("float16", (1, 2, 1, 1, 1, 16, 16), {}),
    case("float16", (1, 2, 1, 17, 80, 128, 128), {}),  # head-dim class 128, a key tail
    case("float16", (1, 3, 1, 5, 130, 24, 40), dict(causal=True)),  # MQA, padded head dims, n_q < n_k
    case("float16", (1, 1, 1, 40, 150, 32, 48), dict(scale=1.0, ramp=True)),  # the maximum keeps rising: rescales
    case("bfloat16", (2, 6, 2, 33, 70, 48, 80), {}),  # GQA packed across a head boundary, d_v > d
    case("bfloat16", (1, 2, 2, 130, 65, 64, 64), dict(causal=True)),  # n_q > n_k: causal tiles stop early
    case("bfloat16", (1, 4, 2, 65, 100, 64, 64), dict(causal=True)),  # row 64 alone sees key tile 2
    case("bfloat16", (1, 8, 2, 1, 70, 64, 32), {}),  # decode: 4 query heads share one row tile
    case("bfloat16", (1, 1, 1, 20, 50, 200, 256), dict(scale=10.0)),  # head-dim class 256, sharp weights
]


@on_cpu
@pytest.mark.parametrize("dtype, sizes, keywords", CASES, ids=lambda x: str(x).replace(" ", ""))
def test_flash_wmma_is_within_its_rounding_bound_of_the_oracle(dtype, sizes, keywords):
    keywords = dict(keywords)
    q, k, v = inputs(dtype, *sizes, seed=sum(sizes))
    if keywords.pop("ramp", False):  # score of key j grows with j: each key tile raises the maximum past 2^8
        q = (np.abs(q.astype(np.float64)) * 0.1 + 1).astype(q.dtype)
        k = (np.linspace(0, 3, k.shape[2])[:, None] + 0.1 * k.astype(np.float64)).astype(k.dtype)
    expect_within_bound(q, k, v, **keywords)


@on_cpu
@pytest.mark.parametrize("dtype", [case("float16"), case("bfloat16")])
def test_masks_broadcast_and_rows_with_no_visible_key_are_zero(dtype):
    q, k, v = inputs(dtype, 2, 4, 2, 40, 90, 16, 32, seed=4)
    mask = np.random.default_rng(4).random((2, 1, 40, 90)) < 0.5  # one mask for every head of a batch
    mask[:, :, 3] = False
    mask[1, :, :, 0] = True
    expect_within_bound(q, k, v, mask=mask)
    expect_within_bound(q, k, v, mask=mask[1, 0, 0] | mask[0, 0, 7], causal=True, scale=2.5)  # key padding
    per_head = np.random.default_rng(5).random((1, 4, 40, 90)) < 0.5  # heads 0 and 1 share kv head 0
    per_head[..., 0] = True
    expect_within_bound(q, k, v, mask=per_head)


@on_cpu
def test_hidden_nan_and_inf_never_reach_a_row():
    q, k, v = inputs("float16", 1, 2, 1, 40, 40, 16, 16, seed=5)
    mask = np.ones(40, dtype=bool)
    mask[7] = False
    clean, clean_masked = run(q, k, v, causal=True, executor="cpu"), run(q, k, v, mask=mask, executor="cpu")
    k2, v2 = k.copy(), v.copy()
    k2[0, 0, 25:], v2[0, 0, 25:] = np.inf, np.nan  # the causal future of rows < 25, in their key tile
    out = run(q, k2, v2, causal=True, executor="cpu")
    assert np.array_equal(out[:, :, :25], clean[:, :, :25]) and np.isnan(out[:, :, 25:]).all()
    k2, v2 = k.copy(), v.copy()
    k2[0, 0, 7], v2[0, 0, 7] = np.nan, -np.inf  # a masked key
    assert np.array_equal(run(q, k2, v2, mask=mask, executor="cpu"), clean_masked)


@on_cpu
@pytest.mark.parametrize("dtype", [case("bfloat16")])
def test_a_visible_nan_reaches_exactly_the_rows_and_column_that_see_it(dtype):
    q, k, v = inputs(dtype, 1, 2, 1, 40, 40, 16, 16, seed=6)
    clean = run(q, k, v, causal=True, executor="cpu")
    v2 = v.copy()
    v2[0, 0, 30, 5] = np.nan
    out = run(q, k, v2, causal=True, executor="cpu")
    expected = np.zeros(out.shape, dtype=bool)
    expected[:, :, 30:, 5] = True
    assert np.array_equal(np.isnan(out), expected)
    assert np.array_equal(np.where(expected, 0, out), np.where(expected, 0, clean))
    k2 = k.copy()
    k2[0, 0, 11] = np.nan
    out = run(q, k2, v, causal=True, executor="cpu")
    assert np.isnan(out[:, :, 11:]).all() and np.array_equal(out[:, :, :11], clean[:, :, :11])


@pytest.mark.parametrize("change, message", [
    (dict(dtype=np.float32), "all float16 or all bfloat16"),
    (dict(k_dtype=np.float32), "all float16 or all bfloat16"),
    (dict(d=257), "head dims up to 256.*d=257"),
    (dict(d_v=272), "head dims up to 256.*d_v=272"),
])
def test_inputs_the_kernel_cannot_take_are_refused(change, message):
    d, d_v, dtype = change.get("d", 16), change.get("d_v", 16), change.get("dtype", np.float16)
    q, v = np.ones((1, 1, 2, d), dtype), np.ones((1, 1, 3, d_v), dtype)
    k = np.ones((1, 1, 3, d), change.get("k_dtype", dtype))
    with pytest.raises(AttentionInputError, match=message):
        run(q, k, v, executor="cpu")


def test_nvrtc_builds_every_entry_for_the_h100_within_its_launch_bounds():
    from impls.cuda.runtime.nvrtc import NvrtcUnavailable, resources

    try:
        found = resources(KERNEL, "sm_90")
    except NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    assert sorted(r.kernel for r in found) == sorted(KERNEL.entries)
    assert all(r.spill_stores == r.spill_loads == r.stack_bytes == 0 for r in found), found
    blocks = {"64>": 4, "128>": 3}  # the template's MIN_BLOCKS: a 64 K register file holds that many blocks
    for r in found:
        assert r.registers * 128 * blocks.get(r.kernel.rsplit(" ", 1)[-1], 2) <= 65536, r
