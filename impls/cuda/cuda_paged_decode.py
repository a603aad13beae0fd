"""Decode attention over a paged KV cache (impls/cuda/kernels/paged_decode.cu), as the records
`cuda-paged-decode` (device) and `cuda-paged-decode-on-cpu` of CONTRACT 1.

The cache is impls.numpy.numpy_paged's: pages of (heads_kv, page_size, dim) scattered through a pool in a shuffled
order, found through a block table; K and V share the table, as a serving cache's do. The padding slots of
each sequence's last page hold NaN, so a kernel that reads past a sequence's length shows it. Every query row
is one decode query (one block each), causal alignment bottom-right: the n_q newest tokens query a cache of n_k.
"""

from __future__ import annotations

import numpy as np

from impls.cuda.cuda_flash_simt import HEAD_DIM_CLASSES, MAX_DIM, STORAGE, check_inputs, mask_arguments
from impls.cuda.cuda_records import cuda_records
from impls.cuda.geometry import TileGeometry
from impls.cuda.runtime.execute import execute
from impls.cuda.runtime.launch import KERNEL_DIR, KernelSource, Launch
from impls.numpy.numpy_paged import page_cache
from impls.numpy.numpy_tiled import check_block_size
from specs.kv_cache import check_kv_cache
from specs.validation import AttentionInputError, check_causal, resolve_scale

KERNEL = KernelSource(KERNEL_DIR / "paged_decode.cu", ("paged_decode<float>", "paged_decode<__half>"))
MAX_WARPS, CHUNK = 4, 32  # the kernel's constants
MAX_GRID_X = 2**31 - 1
# one query per block; warp w takes the chunks of CHUNK keys w, w + warps, ...: a warp's second chunk (its online
# softmax across chunks) starts MAX_WARPS * CHUNK keys on; lanes own output columns as in flash_simt.cu
GEOMETRY = TileGeometry(dict.fromkeys(HEAD_DIM_CLASSES, MAX_WARPS * CHUNK), 1)


def paged_cache(k: np.ndarray, v: np.ndarray, page_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(k_pool, v_pool, block_table int32): numpy_paged's layout, one table for both, padding slots NaN."""
    n_k = k.shape[2]
    k_pool, table = page_cache(k, page_size, np.random.default_rng(n_k))
    v_pool, v_table = page_cache(v, page_size, np.random.default_rng(n_k))
    assert np.array_equal(table, v_table)
    tail = n_k - (table.shape[1] - 1) * page_size  # keys on each sequence's last page
    for pool in (k_pool, v_pool):
        pool[table[:, -1], :, tail:] = np.nan
    return k_pool, v_pool, np.ascontiguousarray(table, dtype=np.int32)


def _launch(q: np.ndarray, k_pool: np.ndarray, v_pool: np.ndarray, table: np.ndarray, seq_lens: np.ndarray, *,
            heads_kv: int, page_size: int, scale: float, causal: bool, mask: tuple, executor: str):
    """paged_decode.cu on q (batch, heads, n_q, d) over pools (pages, heads_kv, page_size, dim): (out, lse)."""
    batch, heads, n_q, d = q.shape
    d_v = v_pool.shape[3]
    if n_q > MAX_GRID_X:
        raise AttentionInputError(f"n_q={n_q} exceeds the grid's limit of {MAX_GRID_X} blocks")
    longest = int(seq_lens.max(initial=0))
    out = np.full((batch, heads, n_q, d_v), np.nan, dtype=q.dtype)  # NaN: an element the kernel does not write shows
    lse = np.full((batch, heads, n_q), np.nan, dtype=np.float32)
    launch = Launch(
        entry=f"paged_decode<{STORAGE[q.dtype]}>",
        grid=(n_q, heads, batch),
        block=(32 * max(1, min(MAX_WARPS, -(-longest // CHUNK))), 1, 1),  # a warp per chunk of keys, at most 4
        shared_bytes=0,
        args=(np.ascontiguousarray(q), k_pool, v_pool, table, seq_lens, out, lse, *mask[:1],
              *(np.int32(n) for n in (heads, heads_kv, n_q, d, d_v, page_size, table.shape[1])),
              np.float32(scale), np.int32(bool(causal)), *mask[1:]),
    )
    result = execute(KERNEL, launch, executor)
    return result[5], result[6]


def paged_decode(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float | None = None,
                 causal: bool = False, mask: np.ndarray | None = None, page_size: int = 16,
                 return_lse: bool = False, executor: str):
    """Attention by paged_decode.cu over (k, v) paged; (out, lse) with return_lse, lse float32."""
    shape = check_inputs(q, k, v)
    check_causal(causal, "bottom_right")
    page_size = check_block_size("page_size", page_size)
    k_pool, v_pool, table = paged_cache(k, v, page_size)
    out, lse = _launch(q, k_pool, v_pool, table, np.full(shape.batch, shape.n_k, dtype=np.int32),
                       heads_kv=shape.heads_kv, page_size=page_size, scale=resolve_scale(scale, shape.d),
                       causal=causal, mask=mask_arguments(mask, shape), executor=executor)
    return (out, lse) if return_lse else out


def paged_decode_kv_cache(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, k: np.ndarray | None = None,
                          v: np.ndarray | None = None, *, cache_seqlens: np.ndarray,
                          cache_batch_idx: np.ndarray | None = None, block_table: np.ndarray | None = None,
                          scale: float | None = None, causal: bool = False, return_lse: bool = False,
                          executor: str):
    """The kv-cache face (specs.kv_cache) of paged_decode.cu: the new keys are written into the cache here, on the
    host, then the kernel reads each sequence's cache_seqlens + n_new slots through the block table, a contiguous
    cache being one page per row (cache_batch_idx picks it). Pools are transposed to the kernel's (pages, heads_kv,
    page_size, dim); out (batch, n_q, heads, d_v), lse (batch, heads, n_q) float32."""
    for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v)):
        if x is not None and (not isinstance(x, np.ndarray) or x.dtype not in STORAGE or x.dtype != q.dtype):
            raise AttentionInputError(f"{name} must be a float32 or float16 numpy array of q's dtype")
    layout = check_kv_cache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                            block_table=block_table)
    for name, size in (("d", q.shape[3]), ("d_v", v_cache.shape[3])):
        if size > MAX_DIM:
            raise AttentionInputError(f"{name}={size} exceeds the kernel's maximum head dimension {MAX_DIM}")
    for b in range(layout.batch if k is not None else 0):
        where = layout.where(b, layout.written(b))
        k_cache[where], v_cache[where] = k[b], v[b]
    table = layout.block_table if layout.block_table is not None else layout.rows[:, None]
    pools = (np.ascontiguousarray(c.transpose(0, 2, 1, 3)) for c in (k_cache, v_cache))
    d = q.shape[3]
    no_mask = (np.uint8([0]), np.int32(0)) + (np.int32(0),) * 4
    out, lse = _launch(np.ascontiguousarray(q.transpose(0, 2, 1, 3)), *pools, np.ascontiguousarray(table, np.int32),
                       (layout.seqlens + layout.n_new).astype(np.int32), heads_kv=k_cache.shape[2],
                       page_size=layout.page_size, scale=resolve_scale(scale, d), causal=causal, mask=no_mask,
                       executor=executor)
    out = out.transpose(0, 2, 1, 3)
    return (out, lse) if return_lse else out


paged_decode_on_device, paged_decode_on_cpu = cuda_records(
    "paged-decode", paged_decode, dtypes=("float32", "float16"), lse=True, causal_alignment="bottom_right",
    tile_keywords=("page_size",), geometry=GEOMETRY, kv_cache=paged_decode_kv_cache)
