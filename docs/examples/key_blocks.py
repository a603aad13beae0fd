"""A built-in record written with the decorator: the online softmax over blocks of keys (FlashAttention's forward
loop in NumPy), in float64 and float32, with its block size as a declared tile keyword."""

import numpy as np

from protocol.registry import attention_impl


@attention_impl(name="numpy-key-blocks", backend="numpy", dtypes=("float64", "float32"),
                tile_keywords=("block_keys",))
def key_block_attention(q, k, v, *, scale=None, causal=False, mask=None, block_keys=16):
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    n_q, n_k = q.shape[2], k.shape[2]
    visible = np.ones(q.shape[:2] + (n_q, n_k), dtype=bool) if mask is None else np.broadcast_to(
        mask, q.shape[:2] + (n_q, n_k))
    if causal:
        visible = visible & np.tri(n_q, n_k, dtype=bool)
    s = q.dtype.type(q.shape[-1] ** -0.5 if scale is None else scale)
    top = np.full(q.shape[:3] + (1,), -np.inf, dtype=q.dtype)
    total = np.zeros(q.shape[:3] + (1,), dtype=q.dtype)
    acc = np.zeros(q.shape[:3] + (v.shape[-1],), dtype=q.dtype)
    for start in range(0, n_k, block_keys):
        keys = slice(start, start + block_keys)
        scores = np.where(visible[..., keys], q @ k[:, :, keys].swapaxes(-1, -2) * s, -np.inf)
        new_top = np.maximum(top, scores.max(axis=-1, keepdims=True))
        safe = np.where(np.isfinite(new_top), new_top, 0)
        weights, rescale = np.exp(scores - safe), np.exp(top - safe)
        total = total * rescale + weights.sum(axis=-1, keepdims=True)
        acc = acc * rescale + weights @ v[:, :, keys]
        top = new_top
    return acc / np.where(total > 0, total, 1)
