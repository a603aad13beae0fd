"""The tolerance model's power on the varlen and kv-cache faces, as a table that is a test (issue 22's power rows).

A pack of sequences of 128, 37, 96 and 1 queries on 128, 64, 96 and 5 keys, and a decode step of 16 queries over
caches of 128, 40 and 96 keys, at d = 64 (fixed seeds). The slots a correct implementation never reads (rows past
cu_seqlens[-1], keys past seqused_k, left padding, spare rows and pages) hold finite values here, not NaN, so what
catches a defect that reads them is the allowance, not a NaN. Every wrong implementation of zoo/wrong_faces.py
named below is caught in float32 and float16 by the allowance of specs.tolerance (largest error / allowed > 1 in
some sequence), and the correct core and the correct zoo of the faces stay under half of it in every sequence.
Each computes as kernels do: float32 inside, the float16 output rounded once at the end.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import numpy as np
import pytest

from specs.dtypes import numpy_dtype
from specs.kv_cache import build_cache
from specs.tolerance import forward_allowance
from specs.varlen import pack_sequences
from zoo import correct_faces, wrong_faces

DTYPES = ("float32", "float16")
LENGTHS_Q, LENGTHS_K = [128, 37, 96, 1], [128, 64, 96, 5]
CACHE_LENGTHS, DECODE_QUERIES = [128, 40, 96], 16
WRONG_VARLEN = ("varlen_keys_off_by_one", "varlen_last_sequence_to_the_end", "varlen_seqused_k_ignored",
                "varlen_causal_on_packed_index", "varlen_equal_lengths_only")
# wrong kv-cache implementation -> the layout (specs.kv_cache.build_cache keywords) and call keywords it is asked on
WRONG_KV_CACHE = {
    "cache_leftpad_ignored": (dict(leftpad=[0, 3, 1]), {}),
    "cache_batch_idx_ignored": (dict(spare_rows=2), {}),
    "pages_assumed_contiguous": (dict(page_size=16), {}),
    "split_minus_inf_lse_as_zero": ({}, dict(num_splits=4)),
    "num_splits_averaged": ({}, dict(num_splits=4)),
}
CORRECT_VARLEN = {"the core": wrong_faces._varlen, "varlen_padded_and_masked": correct_faces.varlen_padded_and_masked,
                  "varlen_as_dense_calls": correct_faces.varlen_as_dense_calls}
CORRECT_KV_CACHE = {"the core": wrong_faces._kv_cache, "paged_cache_gathered": correct_faces.paged_cache_gathered,
                    "split_kv_uneven": correct_faces.split_kv_uneven}


def _source(dtype: str, batch: int, n_q: int, n_k: int, seed: int) -> tuple[np.ndarray, ...]:
    """Dense q, k, v rounded to the storage dtype, held in float64."""
    rng = np.random.default_rng(seed)
    shapes = ((batch, 4, n_q, 64), (batch, 2, n_k, 64), (batch, 2, n_k, 64))
    return tuple(rng.standard_normal(s).astype(numpy_dtype(dtype)).astype(np.float64) for s in shapes)


def _finite(x: np.ndarray, seed: int) -> np.ndarray:
    """x with its NaN slots (those nothing may read) given finite values."""
    nan = np.isnan(x)
    return np.where(nan, np.random.default_rng(seed).standard_normal(x.shape), x)


def _ratio(got: np.ndarray, exact: tuple[np.ndarray, ...], dtype: str, causal: bool) -> float:
    """Largest |error| / allowed of one sequence's output (n_q, heads, d_v) against its dense attention."""
    oracle, allowance = forward_allowance(*exact, dtype=dtype, causal=causal, causal_alignment="bottom_right")
    error = np.abs(got.swapaxes(0, 1)[None] - oracle.out)
    return float(np.max(error / np.broadcast_to(allowance.bound, error.shape)))


def _stored(out: np.ndarray, dtype: str) -> np.ndarray:
    return out.astype(numpy_dtype(dtype)).astype(np.float64)


@functools.cache
def varlen_ratios(name: str, dtype: str) -> float:
    fn = CORRECT_VARLEN.get(name) or getattr(wrong_faces, name)
    causal = name == "varlen_causal_on_packed_index" or name == "the core"
    q, k, v = _source(dtype, len(LENGTHS_Q), max(LENGTHS_Q), max(LENGTHS_K), seed=22)
    unused = 2 if "seqused_k" in inspect.signature(fn).parameters else 0
    packed = pack_sequences(q, k, v, LENGTHS_Q, LENGTHS_K, unused_k=unused, tail=3)
    inside = (_finite(x, i).astype(np.float32) for i, x in enumerate((packed.q, packed.k, packed.v)))
    out = _stored(np.asarray(fn(*inside, *packed.arrays[3:], **packed.keywords, causal=causal)), dtype)
    ratios = []
    for b, rows, _ in packed.packing().sequences():
        if rows.stop > rows.start and LENGTHS_K[b]:
            exact = (q[b:b + 1, :, :LENGTHS_Q[b]], k[b:b + 1, :, :LENGTHS_K[b]], v[b:b + 1, :, :LENGTHS_K[b]])
            ratios.append(_ratio(out[rows], exact, dtype, causal))
    return max(ratios)


@functools.cache
def kv_cache_ratios(name: str, dtype: str, layout_name: str = "") -> float:
    fn = CORRECT_KV_CACHE.get(name) or getattr(wrong_faces, name)
    layout, keywords = WRONG_KV_CACHE.get(name) or WRONG_KV_CACHE[layout_name]
    q, k, v = _source(dtype, len(CACHE_LENGTHS), DECODE_QUERIES, max(CACHE_LENGTHS), seed=23)
    cache = build_cache(q, k, v, lengths_k=CACHE_LENGTHS, n_new=1, seed=23, **layout)
    arrays = [None if x is None else _finite(x, i).astype(np.float32) for i, x in enumerate(cache.arrays)]
    out = _stored(np.asarray(fn(*arrays, **cache.keywords, **keywords, causal=True)), dtype)
    return max(_ratio(out[b], (q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n]), dtype, True)
               for b, n in enumerate(CACHE_LENGTHS))


def _accepts(fn: Callable, layout: dict, keywords: dict) -> bool:
    names = inspect.signature(fn).parameters
    needed = {"leftpad": "cache_leftpad", "spare_rows": "cache_batch_idx", "page_size": "block_table"}
    return all(needed[key] in names for key in layout) and all(key in names for key in keywords)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", WRONG_VARLEN)
def test_each_wrong_varlen_is_caught_by_the_allowance(name, dtype):
    assert varlen_ratios(name, dtype) > 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(WRONG_KV_CACHE))
def test_each_wrong_kv_cache_is_caught_by_the_allowance(name, dtype):
    assert kv_cache_ratios(name, dtype) > 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CORRECT_VARLEN))
def test_correct_varlen_stays_under_half_the_allowance(name, dtype):
    assert varlen_ratios(name, dtype) < 0.5


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout_name", list(WRONG_KV_CACHE))
@pytest.mark.parametrize("name", list(CORRECT_KV_CACHE))
def test_correct_kv_cache_stays_under_half_the_allowance(name, layout_name, dtype):
    layout, keywords = WRONG_KV_CACHE[layout_name]
    if not _accepts(CORRECT_KV_CACHE[name], layout, keywords):
        pytest.skip(f"{name} does not take the keywords of the layout {layout_name}")
    assert kv_cache_ratios(name, dtype, layout_name) < 0.5
