"""paged_decode.cu's kv-cache face (impls/cuda/cuda_paged_decode.py, issue 22) on this CPU: per-sequence cache
lengths and block tables reach the kernel, its output is each sequence's dense attention, and a block-table entry
past the pool that the host check did not see is caught by the memory checker as the kernel reads it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import impls.cuda.cuda_paged_decode as paged
from impls.cuda.runtime.cpu_build import compiler_unavailable
from impls.cuda.runtime.on_cpu import KernelDefect
from specs.kv_cache import build_cache, check_kv_cache
from specs.reference import attention

pytestmark = pytest.mark.skipif(compiler_unavailable() is not None, reason=str(compiler_unavailable()))


def _problem():
    rng = np.random.default_rng(22)
    q = rng.standard_normal((3, 4, 2, 8)).astype(np.float32)
    k, v = (rng.standard_normal((3, 2, 11, 8)).astype(np.float32) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("layout", [dict(page_size=1), dict(page_size=4), dict(page_size=256), dict(spare_rows=2), {}])
def test_each_sequence_is_its_dense_attention(layout):
    q, k, v = _problem()
    lengths = [11, 3, 7]
    cache = build_cache(q, k, v, lengths_k=lengths, n_new=2, **layout)
    out = paged.paged_decode_kv_cache(*cache.arrays, **cache.keywords, causal=True, executor="cpu")
    for b, n in enumerate(lengths):
        expected = attention(*(x[b:b + 1, :, :m].astype(np.float64) for x, m in ((q, 2), (k, n), (v, n))),
                             causal=True, causal_alignment="bottom_right").out[0]
        np.testing.assert_allclose(out[b].swapaxes(0, 1), expected, rtol=2e-5, atol=2e-6)
    for got, want in zip((cache.k_cache, cache.v_cache), cache.expected_caches(), strict=True):
        np.testing.assert_array_equal(got, want)  # the append, and nothing else


def test_a_page_past_the_pool_is_caught_by_the_memory_checker(monkeypatch):
    q, k, v = _problem()
    cache = build_cache(q, k, v, lengths_k=[11, 3, 7], n_new=1, page_size=4)

    def unchecked(*args, **kwargs):  # the host check passes a table whose first entry the kernel reads off the pool
        layout = check_kv_cache(*args, **kwargs)
        table = layout.block_table.copy()
        table[0, 0] = 10_000
        return dataclasses.replace(layout, block_table=table)

    monkeypatch.setattr(paged, "check_kv_cache", unchecked)
    with pytest.raises(KernelDefect, match="memcheck"):
        paged.paged_decode_kv_cache(*cache.arrays, **cache.keywords, executor="memcheck")
