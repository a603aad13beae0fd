"""Implementations as a user outside the project would bring them: plain functions, no attributes.

`einsum_attention` is correct; the others break CONTRACT 1 in one way each, for the harness tests.
"""

import time

import numpy as np


def einsum_attention(q, k, v, *, scale=None, causal=False, mask=None):
    """A correct float64 attention written independently of the oracle (einsum, log-sum-exp)."""
    if k.shape[2] != v.shape[2]:  # einsum would broadcast a single key against several values
        raise ValueError(f"{k.shape[2]} keys but {v.shape[2]} values")
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q.shape[-1] ** -0.5 if scale is None else scale
    scores = np.einsum("bhid,bhjd->bhij", q, k) * s
    n_q, n_k = scores.shape[-2:]
    if causal:
        scores = np.where(np.tril(np.ones((n_q, n_k), dtype=bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(scores - top)
    total = e.sum(axis=-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", e / np.where(total > 0, total, 1.0), v)


def plain_qkv_only(q, k, v):
    """Takes no keywords at all: properties needing scale, causal or mask must skip."""
    return einsum_attention(q, k, v)


def raises(q, k, v):
    raise ValueError("this implementation always fails")


def wrong_shape(q, k, v):
    return einsum_attention(q, k, v)[..., :1, :]


def wrong_dtype(q, k, v):
    return einsum_attention(q, k, v).astype(np.float32)


def returns_nan(q, k, v):
    out = einsum_attention(q, k, v)
    out[..., 0, 0] = np.nan
    return out


def returns_list(q, k, v):
    return einsum_attention(q, k, v).tolist()


def too_slow(q, k, v):
    time.sleep(30)
    return einsum_attention(q, k, v)


def bad_capabilities(q, k, v):
    return einsum_attention(q, k, v)


bad_capabilities.attention_capabilities = {"flash": True}


def declares_an_unknown_dtype(q, k, v):
    return einsum_attention(q, k, v)


declares_an_unknown_dtype.attention_capabilities = {"dtypes": ("float64", "bf16")}
