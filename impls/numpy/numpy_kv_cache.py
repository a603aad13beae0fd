"""A decode step over a KV cache in NumPy (issue 22; seed 001 § 2.4 与Paged Attention的关系): the kv-cache face.

The new keys and values are written into the cache in place at cache_seqlens; each sequence then attends over its
slots leftpad .. seqlen + n_new - 1, read from its cache row or, with a block_table, page by page from a shuffled
pool (specs.kv_cache.CacheLayout), never a slot outside them. The slots are cut into `num_splits` contiguous
splits, each normalised on its own (impls.numpy.numpy_split_kv.partial_attention) and merged through their
log-sum-exp (merge_partials): flash-decoding. Causal is aligned bottom-right; float16 is computed in float32 inside.
"""

from __future__ import annotations

import numpy as np

from impls.numpy.numpy_split_kv import QUERY_BLOCK, merge_partials, partial_attention
from impls.numpy.numpy_tiled import check_block_size
from protocol.registry import attention_impl
from specs.dtypes import is_float
from specs.kv_cache import CacheLayout, check_kv_cache
from specs.validation import AttentionInputError, resolve_scale


def _check_arrays(**arrays) -> np.dtype:
    given = {name: x for name, x in arrays.items() if x is not None}
    for name, x in given.items():
        if not isinstance(x, np.ndarray) or not is_float(x.dtype):
            raise AttentionInputError(f"{name} must be a floating-point numpy array, got {type(x).__name__}")
    if len({x.dtype for x in given.values()}) != 1:
        raise AttentionInputError(f"q, the caches and the new keys must share a dtype, got "
                                  f"{sorted({str(x.dtype) for x in given.values()})}")
    return arrays["q"].dtype


def _sequence(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, layout: CacheLayout, b: int, scale: float,
              causal: bool, splits: int, inner: type) -> tuple[np.ndarray, np.ndarray]:
    """Sequence b's output (heads, n_q, d_v) and log-sum-exp (heads, n_q), its slots read split by split, QUERY_BLOCK
    queries at a time (no n_q x n_k score matrix is held)."""
    slots = layout.slots(b)
    heads, n_q = q.shape[1], q.shape[0]
    out = np.zeros((heads, n_q, v_cache.shape[3]), inner)
    lse = np.full((heads, n_q), -np.inf, inner)
    if not len(slots):
        return out, lse
    group = heads // k_cache.shape[2]
    parts = np.array_split(np.arange(len(slots)), min(splits, len(slots)))
    for r0 in range(0, n_q, QUERY_BLOCK):
        block = slice(r0, min(r0 + QUERY_BLOCK, n_q))
        queries = q[block].swapaxes(0, 1).astype(inner)  # (heads, rows, d)
        rows = np.arange(block.start, block.stop)[:, None] + (len(slots) - n_q)  # bottom-right alignment
        outs, lses = [], []
        for part in parts:
            where = layout.where(b, range(slots.start + int(part[0]), slots.start + int(part[-1]) + 1))
            keys = np.repeat(k_cache[where].swapaxes(0, 1), group, axis=0).astype(inner)
            values = np.repeat(v_cache[where].swapaxes(0, 1), group, axis=0).astype(inner)
            scores = (queries @ keys.swapaxes(-1, -2)) * inner(scale)
            if causal:
                scores = np.where(part[None, :] <= rows, scores, -np.inf)
            partial_out, partial_lse = partial_attention(scores, values)
            outs.append(partial_out)
            lses.append(partial_lse)
        out[:, block], lse[:, block] = merge_partials(outs, lses)
    return out, lse


def kv_cache_attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, k: np.ndarray | None = None,
                       v: np.ndarray | None = None, *, cache_seqlens: np.ndarray,
                       cache_batch_idx: np.ndarray | None = None,
                       cache_leftpad: np.ndarray | None = None, block_table: np.ndarray | None = None,
                       scale: float | None = None, causal: bool = False, num_splits: int = 1,
                       return_lse: bool = False):
    """q (batch, n_q, heads, d) over the cache (specs.kv_cache) -> (batch, n_q, heads, d_v), and with return_lse
    (out, lse (batch, heads, n_q)); k, v (batch, n_new, heads_kv, d) are written into the cache first."""
    storage = _check_arrays(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v)
    layout = check_kv_cache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                            cache_leftpad=cache_leftpad, block_table=block_table)
    s = resolve_scale(scale, q.shape[3])
    splits = check_block_size("num_splits", num_splits)
    for b in range(layout.batch if k is not None else 0):
        where = layout.where(b, layout.written(b))
        k_cache[where] = k[b]
        v_cache[where] = v[b]
    inner = np.float32 if storage == np.float16 else storage.type
    batch, n_q, heads, _ = q.shape
    out = np.empty((batch, n_q, heads, v_cache.shape[3]), storage)
    lse = np.empty((batch, heads, n_q), inner)
    for b in range(batch):
        seq_out, lse[b] = _sequence(q[b], k_cache, v_cache, layout, b, s, bool(causal), splits, inner)
        out[b] = seq_out.swapaxes(0, 1)
    return (out, lse) if return_lse else out


# The record is declared after the definition, not as a decorator: mutation testing (tox -e mutants)
# skips decorated functions, and this body is what it must reach.
# float32 computes as float64 does, in its own precision; float16 takes the float32-inside path
kv_cache_attention = attention_impl(name="numpy-kvcache", backend="numpy", dtypes=("float64", "float16"),
                                    causal_alignment="bottom_right", tile_keywords=("page_size", "num_splits"),
                                    lse=True, faces=("kvcache",))(kv_cache_attention)
