"""Six deliberately wrong implementations, written as an outside user would write one (CONTRACT 1: plain
functions, no import of the suite), each with one bug that breaks many claims.

The claims each breaks are its catches in zoo/catches.toml (subject = its --impl target);
tests/suite_run/test_defects_caught.py runs every property against all six and requires each caught exactly: every
catch's claim fails, unexpectedly, and every other claim holds. zoo/defects.py lists them with the rest of the
defect zoo.
"""

import math

import numpy as np


def _softmax(scores, axis=-1):
    shifted = scores - np.max(scores, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def _expand(k, v, heads):
    group = heads // k.shape[1]
    return np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)


def _masked(scores, causal, mask, shift=0):
    n_q, n_k = scores.shape[-2:]
    if causal:
        scores = np.where(np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + shift, scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return scores


def _weights_to_out(weights, v):
    weights = np.where(np.isnan(weights), 0.0, weights)  # fully masked rows give zeros, per the convention
    return weights @ v


def missing_scale(q, k, v, *, causal=False, mask=None):
    """softmax(Q K^T) V: the 1/sqrt(d_k) is forgotten."""
    k, v = _expand(k, v, q.shape[1])
    return _weights_to_out(_softmax(_masked(q @ k.swapaxes(-1, -2), causal, mask)), v)


def softmax_over_queries(q, k, v, *, scale=None):
    """Normalises each column (over queries) instead of each row."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _softmax(q @ k.swapaxes(-1, -2) * s, axis=-2) @ v


def causal_off_by_one(q, k, v, *, scale=None, causal=False):
    """The causal mask lets each query see one future token (j <= i + 1)."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _weights_to_out(_softmax(_masked(q @ k.swapaxes(-1, -2) * s, causal, None, shift=1)), v)


def per_block_softmax(q, k, v, *, scale=None, block_cols=16):
    """Tiled over keys, but each key block is normalised on its own and the blocks are summed."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for start in range(0, k.shape[2], block_cols):
        block = slice(start, start + block_cols)
        out += _softmax(q @ k[:, :, block].swapaxes(-1, -2) * s) @ v[:, :, block]
    return out


per_block_softmax.attention_capabilities = {"tile_keywords": ("block_cols",)}


def positional_bias(q, k, v, *, scale=None):
    """Adds a linear position bias 0.5 (j - i) to the scores: keys are no longer exchangeable."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    n_q, n_k = q.shape[2], k.shape[2]
    bias = 0.5 * (np.arange(n_k)[None, :] - np.arange(n_q)[:, None])
    return _softmax(q @ k.swapaxes(-1, -2) * s + bias) @ v


def softmax_in_float32(q, k, v, *, scale=None):
    """Declares float64 (the default) but rounds the softmax through float32."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    weights = _softmax((q @ k.swapaxes(-1, -2) * s).astype(np.float32)).astype(np.float64)
    return weights @ v


DEFECTIVE = ("missing_scale", "softmax_over_queries", "causal_off_by_one", "per_block_softmax",
             "positional_bias", "softmax_in_float32")
