"""Decode attention over a paged KV cache (impls/cuda/kernels/paged_decode.cu), as the records
`cuda-paged-decode` (device) and `cuda-paged-decode-on-cpu` of CONTRACT 1.

The cache is impls.numpy.numpy_paged's: pages of (heads_kv, page_size, dim) scattered through a pool in a shuffled
order, found through a block table; K and V share the table, as a serving cache's do. The padding slots of
each sequence's last page hold NaN, so a kernel that reads past a sequence's length shows it. Every query row
is one decode query (one block each), causal alignment bottom-right: the n_q newest tokens query a cache of n_k.
"""

from __future__ import annotations

import numpy as np

from impls.cuda.cuda_flash_simt import HEAD_DIM_CLASSES, STORAGE, check_inputs, mask_arguments
from impls.cuda.cuda_records import cuda_records
from impls.cuda.geometry import TileGeometry
from impls.cuda.runtime.execute import execute
from impls.cuda.runtime.launch import KERNEL_DIR, KernelSource, Launch
from impls.numpy.numpy_paged import page_cache
from impls.numpy.numpy_tiled import check_block_size
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


def paged_decode(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float | None = None,
                 causal: bool = False, mask: np.ndarray | None = None, page_size: int = 16,
                 return_lse: bool = False, executor: str):
    """Attention by paged_decode.cu over (k, v) paged; (out, lse) with return_lse, lse float32."""
    shape = check_inputs(q, k, v)
    check_causal(causal, "bottom_right")
    s = resolve_scale(scale, shape.d)
    page_size = check_block_size("page_size", page_size)
    if shape.n_q > MAX_GRID_X:
        raise AttentionInputError(f"n_q={shape.n_q} exceeds the grid's limit of {MAX_GRID_X} blocks")
    mask_array, has_mask, *mask_strides = mask_arguments(mask, shape)
    k_pool, v_pool, table = paged_cache(k, v, page_size)
    seq_lens = np.full(shape.batch, shape.n_k, dtype=np.int32)
    out = np.full(shape.out_shape, np.nan, dtype=q.dtype)  # NaN: an element the kernel does not write shows
    lse = np.full(shape.out_shape[:3], np.nan, dtype=np.float32)
    launch = Launch(
        entry=f"paged_decode<{STORAGE[q.dtype]}>",
        grid=(shape.n_q, shape.heads, shape.batch),
        block=(32 * min(MAX_WARPS, -(-shape.n_k // CHUNK)), 1, 1),  # a warp per chunk of keys, at most 4
        shared_bytes=0,
        args=(np.ascontiguousarray(q), k_pool, v_pool, table, seq_lens, out, lse, mask_array,
              *(np.int32(n) for n in (shape.heads, shape.heads_kv, shape.n_q, shape.d, shape.d_v, page_size,
                                      table.shape[1])),
              np.float32(s), np.int32(bool(causal)), has_mask, *mask_strides),
    )
    result = execute(KERNEL, launch, executor)
    return (result[5], result[6]) if return_lse else result[5]


paged_decode_on_device, paged_decode_on_cpu = cuda_records(
    "paged-decode", paged_decode, dtypes=("float32", "float16"), lse=True, causal_alignment="bottom_right",
    tile_keywords=("page_size",), geometry=GEOMETRY)
