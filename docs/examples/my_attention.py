import numpy as np


def attention(q, k, v, *, scale=None, causal=False, mask=None):
    """softmax(q k^T * scale) v with grouped kv heads, a causal mask and a boolean mask."""
    k, v = (np.repeat(x, q.shape[1] // x.shape[1], axis=1) for x in (k, v))
    scores = q @ k.swapaxes(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    visible = np.ones(scores.shape, bool) if mask is None else np.broadcast_to(mask, scores.shape)
    visible = visible & np.tri(*scores.shape[-2:], dtype=bool) if causal else visible
    top = np.max(scores, axis=-1, keepdims=True, where=visible, initial=-np.inf)
    weights = np.where(visible, np.exp(scores - np.where(np.isfinite(top), top, 0)), 0.0)
    total = weights.sum(axis=-1, keepdims=True)
    return weights / np.where(total > 0, total, 1) @ v
