"""Paged attention in NumPy (seed 001 § 2.4 与Paged Attention的关系).

Keys and values are stored the way a paged KV cache stores them: fixed-size
pages scattered through a shared pool in an arbitrary physical order, found
through a block table. Attention walks the logical pages in order with the
online softmax, so the result must equal attention over the contiguous cache.
Causal alignment is bottom-right, as in decoding, where the n_q newest tokens
query a cache of n_k.
"""

from __future__ import annotations

import numpy as np

from impls.numpy.numpy_tiled import check_block_size
from impls.numpy.online_softmax import OnlineSoftmax
from protocol.registry import attention_impl
from specs.validation import check_mask, check_shapes, resolve_scale


def page_cache(x: np.ndarray, page_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Scatter (batch, heads_kv, n, dim) into a pool of pages; return (pool, block_table).

    pool has shape (pages, heads_kv, page_size, dim); block_table[b, p] is the
    physical page holding logical page p of sequence b.
    """
    batch, heads_kv, n, dim = x.shape
    pages_per_seq = -(-n // page_size)
    physical = rng.permutation(batch * pages_per_seq).reshape(batch, pages_per_seq)
    pool = np.zeros((batch * pages_per_seq, heads_kv, page_size, dim), dtype=x.dtype)
    for b in range(batch):
        for p in range(pages_per_seq):
            chunk = x[b, :, p * page_size:(p + 1) * page_size]
            pool[physical[b, p], :, :chunk.shape[1]] = chunk
    return pool, physical


def paged_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: np.ndarray | None = None,
    page_size: int = 16,
) -> np.ndarray:
    """Attention over a KV cache held in shuffled pages; bottom-right causal alignment."""
    shape = check_shapes(q, k, v, finite=False)
    mask = check_mask(mask, shape)
    s = resolve_scale(scale, shape.d)
    page_size = check_block_size("page_size", page_size)
    rng = np.random.default_rng(shape.n_k)
    k_pool, k_table = page_cache(k, page_size, rng)
    v_pool, v_table = page_cache(v, page_size, rng)
    dtype = np.result_type(q, k, v)
    group = shape.group
    out = np.empty(shape.out_shape, dtype=dtype)
    rows = np.arange(shape.n_q)[:, None] + (shape.n_k - shape.n_q)
    for b in range(shape.batch):
        state = OnlineSoftmax((shape.heads, shape.n_q), shape.d_v, dtype)
        for page in range(k_table.shape[1]):
            start = page * page_size
            valid = min(page_size, shape.n_k - start)
            keys = np.repeat(k_pool[k_table[b, page], :, :valid], group, axis=0)
            values = np.repeat(v_pool[v_table[b, page], :, :valid], group, axis=0)
            scores = (q[b] @ keys.swapaxes(-1, -2)) * s
            if causal:
                scores = np.where(np.arange(start, start + valid)[None, :] <= rows, scores, -np.inf)
            if mask is not None:
                scores = np.where(mask[b, :, :, start:start + valid], scores, -np.inf)
            state.update(scores, values)
        out[b] = state.output()
    return out


# The record is declared after the definition, not as a decorator: mutation testing (tox -e mutants)
# skips decorated functions, and this body is what it must reach.
paged_attention = attention_impl(name="numpy-paged", backend="numpy", dtypes=("float64",),
                                 causal_alignment="bottom_right", tile_keywords=("page_size",))(paged_attention)
