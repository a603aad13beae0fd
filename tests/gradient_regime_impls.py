"""Deliberately wrong backwards that only the gradient regimes (specs.regimes) and the gradient poisoning
properties catch, one mistake each, and correct implementations written in unusual ways;
tests/test_gradient_regime_catches.py runs them with --impl.

The NumPy ones take the forward from the float64 oracle's formula and carry their own backward
(fn.attention_backward), written block by block over keys, as a kernel with a fixed key tile is.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from impls.registry import attention_impl
from impls.torch_flash import flash_attention_tiled
from specs.gradients import sum_groups
from specs.reference import attention, repeat_kv

KEY_TILE = 512  # the backward's fixed key tile: n_k <= 512 is one tile
PACKED_GROUP = 4  # from this GQA group on, the backward takes its packed path
NUMPY_CAPS = dict(backend="numpy", dtypes=("float64",))


def _forward(q, k, v, *, scale=None, causal=False, mask=None):
    return attention(q, k, v, scale=scale, causal=causal, mask=mask, finite=False).out


def _blocked_backward(q, k, v, d_out, *, scale=None, causal=False, mask=None, key_offset_forgotten=False,
                      packed_from=None, raw_keys_in_d_q=False):
    """dQ, dK, dV over key tiles of KEY_TILE: dV = P^T dO, dS = P (dO V^T - D), dQ = s dS K, dK = s dS^T Q, with
    hidden keys and values replaced by 0 where no row sees them and dS = 0 at hidden scores. Each flag is one
    mistake: the second tile's dK added at the first tile's keys; dK and dV of GQA groups >= packed_from taken
    from the group's first head; dQ from the keys as given (0 * NaN at a hidden NaN key)."""
    result = attention(q, k, v, scale=scale, causal=causal, mask=mask, finite=False)
    heads_kv = k.shape[1]
    group = q.shape[1] // heads_kv
    allowed = np.broadcast_to(True if result.allowed is None else result.allowed, result.weights.shape)
    seen = allowed.any(axis=-2)[..., None]  # (batch, heads, n_k, 1): some row of the head sees the key
    k_all, v_all = repeat_kv(k, group), repeat_kv(v, group)
    k_seen, v_seen = np.where(seen, k_all, 0.0), np.where(seen, v_all, 0.0)
    p, s = result.weights, result.scale
    row_dot = np.sum(d_out * (p @ v_seen), axis=-1, keepdims=True)
    d_q = np.zeros(q.shape)
    d_k, d_v = np.zeros(k_all.shape), np.zeros(v_all.shape)
    for c0 in range(0, k.shape[2], KEY_TILE):
        cols = slice(c0, min(c0 + KEY_TILE, k.shape[2]))
        p_c = p[..., cols]
        d_s = np.where(allowed[..., cols], p_c * (d_out @ v_seen[:, :, cols].swapaxes(-1, -2) - row_dot), 0.0)
        d_q += s * (d_s @ (k_all if raw_keys_in_d_q else k_seen)[:, :, cols])
        into = slice(0, cols.stop - cols.start) if key_offset_forgotten else cols
        d_k[:, :, into] += s * (d_s.swapaxes(-1, -2) @ q)
        d_v[:, :, cols] += p_c.swapaxes(-1, -2) @ d_out
    if packed_from is not None and group >= packed_from:
        return d_q, d_k[:, ::group], d_v[:, ::group]
    return d_q, sum_groups(d_k, heads_kv), sum_groups(d_v, heads_kv)


def _numpy_record(name: str, **mistake):
    def fn(q, k, v, *, scale=None, causal=False, mask=None):
        return _forward(q, k, v, scale=scale, causal=causal, mask=mask)

    fn.__doc__ = f"The oracle's forward; the backward over {KEY_TILE}-key tiles ({mistake or 'no mistake'})."
    record = attention_impl(name=name, **NUMPY_CAPS)(fn)
    record.attention_backward = lambda q, k, v, d_out, **kw: _blocked_backward(q, k, v, d_out, **kw, **mistake)
    return record


# ---- wrong -----------------------------------------------------------------------------------------------

# past 512 keys the second tile's dK lands on the first tile's keys (the tile offset forgotten in the store)
second_key_tile_dk_misplaced = _numpy_record("wrong-second-key-tile-dk-misplaced", key_offset_forgotten=True)
# GQA groups of 4 and more (the packed path) keep dK and dV of the group's first query head, unsummed
packed_gqa_first_head_only = _numpy_record("wrong-packed-gqa-first-head-only", packed_from=PACKED_GROUP)
# dQ = s dS K with the keys as given: dS = 0 at a key no row sees, but 0 * NaN = NaN
hidden_key_nan_in_d_q = _numpy_record("wrong-hidden-key-nan-in-dq", raw_keys_in_d_q=True)


# ---- correct, written unusually --------------------------------------------------------------------------

correct_key_tiles = _numpy_record("correct-512-key-tiles")


@attention_impl(name="correct-flash-tiled-97x211", backend="torch", dtypes=("float64", "float32"), tensors="torch",
                tile_keywords=("block_rows", "block_cols"), lse=True)
def flash_tiled_odd_defaults(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0, dropout_seed=None,
                             block_rows=97, block_cols=211, return_lse=False):
    """The project's FlashAttention-2 (impls.torch_flash) with default blocks that divide nothing the regimes use."""
    return flash_attention_tiled(q, k, v, scale=scale, causal=causal, mask=mask, dropout_p=dropout_p,
                                 dropout_seed=dropout_seed, block_rows=block_rows, block_cols=block_cols,
                                 return_lse=return_lse)


@attention_impl(name="correct-where-sanitised", backend="torch", dtypes=("float64", "float32"), tensors="torch")
def where_sanitised(q, k, v, *, scale=None, causal=False, mask=None):
    """Keys and values no row of a head sees are swapped for zeros with torch.where before anything touches
    them, so autograd's where-backward hands them exact zeros and no product ever meets their NaN; GQA by
    broadcasting the query heads against their kv head (no repeat)."""
    batch, heads, n_q, d = q.shape
    heads_kv, n_k = k.shape[1], k.shape[2]
    visible = torch.ones((n_q, n_k), dtype=torch.bool)
    if causal:
        visible = visible.tril()
    if mask is not None:
        visible = visible & mask
    visible = visible.broadcast_to((batch, heads, n_q, n_k)).reshape(batch, heads_kv, -1, n_q, n_k)
    seen = visible.any(dim=(2, 3))[..., None]  # (batch, heads_kv, n_k, 1)
    k, v = torch.where(seen, k, 0.0)[:, :, None], torch.where(seen, v, 0.0)[:, :, None]
    q = q.reshape(batch, heads_kv, -1, n_q, d)
    s = torch.matmul(q, k.transpose(-1, -2)) * (1 / math.sqrt(d) if scale is None else scale)
    s = s.masked_fill(~visible, -math.inf)
    w = torch.where(visible.any(dim=-1, keepdim=True), torch.softmax(s, dim=-1), 0.0)
    return torch.matmul(w, v).reshape(batch, heads, n_q, v.shape[-1])
