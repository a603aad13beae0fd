"""Deliberately wrong implementations, written as an outside user would write one (CONTRACT 1:
plain functions with `attention_capabilities` and `known_defects` attributes, no import of the suite).

Each declares, as data, the claims its bug breaks; tests/test_defects_caught.py runs the properties
against all of them and requires every declared claim to fail and every other claim to hold.
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


SCALE_DEPENDENT = "scores are sqrt(d) times too large, so every value-level comparison with the oracle fails"
missing_scale.known_defects = {
    "sqrt-dk-variance": "the log-weight gaps have variance 2 d, not 2",
    "scale-keeps-softmax-flat": "without the scale the softmax saturates as d grows",
    **dict.fromkeys((
        "sdpa-formula", "cross-and-self-same-computation", "worked-example-shapes", "worked-example-cross-shapes",
        "siwuxiang-query-result", "ratio-of-exp-sums", "online-softmax-avoids-overflow", "self-attention-four-steps",
        "concat-then-output-projection", "attention-is-expectation",
    ), SCALE_DEPENDENT),
}


def softmax_over_queries(q, k, v, *, scale=None):
    """Normalises each column (over queries) instead of each row."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _softmax(q @ k.swapaxes(-1, -2) * s, axis=-2) @ v


WRONG_AXIS = "columns, not rows, sum to 1"
softmax_over_queries.known_defects = dict.fromkeys((
    "rows-sum-to-one", "weights-in-unit-interval", "sdpa-formula", "output-in-convex-hull",
    "parallel-over-positions", "cross-and-self-same-computation", "worked-example-shapes",
    "worked-example-cross-shapes", "siwuxiang-query-result", "explicit-softmax-scale",
    "weights-measure-relevance", "score-large-when-query-seeks-key", "ratio-of-exp-sums",
    "online-softmax-avoids-overflow", "self-attention-four-steps", "concat-then-output-projection",
    "attention-is-expectation", "attention-optimal-linear-approximation", "sqrt-dk-variance",
), WRONG_AXIS)


def causal_off_by_one(q, k, v, *, scale=None, causal=False):
    """The causal mask lets each query see one future token (j <= i + 1)."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _weights_to_out(_softmax(_masked(q @ k.swapaxes(-1, -2) * s, causal, None, shift=1)), v)


causal_off_by_one.known_defects = {
    "causal-mask-zeroes-future": "query i sees key i + 1",
    "causal-alignment": "neither top-left nor bottom-right: the diagonal is shifted by one",
    "sdpa-formula": "with causal=True the output includes one future token",
}


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
BLOCKS = "each key block is normalised separately: a row's weights sum to the number of key blocks"
per_block_softmax.known_defects = {
    **dict.fromkeys((
        "tiled-equals-global", "sdpa-formula", "rows-sum-to-one", "weights-in-unit-interval",
        "output-in-convex-hull", "cross-and-self-same-computation", "explicit-softmax-scale",
        "weights-measure-relevance", "score-large-when-query-seeks-key", "ratio-of-exp-sums",
        "online-softmax-avoids-overflow", "self-attention-four-steps", "concat-then-output-projection",
        "attention-optimal-linear-approximation",
    ), BLOCKS),
    "permutation-equivariance": "which keys share a block depends on their order",
    "long-range-in-one-step": "which keys share a block depends on their order",
}


def positional_bias(q, k, v, *, scale=None):
    """Adds a linear position bias 0.5 (j - i) to the scores: keys are no longer exchangeable."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    n_q, n_k = q.shape[2], k.shape[2]
    bias = 0.5 * (np.arange(n_k)[None, :] - np.arange(n_q)[:, None])
    return _softmax(q @ k.swapaxes(-1, -2) * s + bias) @ v


POSITION = "the scores depend on where a key sits, not only on what it is"
positional_bias.known_defects = dict.fromkeys((
    "permutation-equivariance", "long-range-in-one-step", "sdpa-formula",
    "cross-and-self-same-computation", "worked-example-shapes", "worked-example-cross-shapes",
    "siwuxiang-query-result", "explicit-softmax-scale", "weights-measure-relevance",
    "score-large-when-query-seeks-key", "ratio-of-exp-sums", "online-softmax-avoids-overflow",
    "self-attention-four-steps", "concat-then-output-projection", "attention-is-expectation",
    "sqrt-dk-variance",
), POSITION)


def softmax_in_float32(q, k, v, *, scale=None):
    """Declares float64 (the default) but rounds the softmax through float32."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    weights = _softmax((q @ k.swapaxes(-1, -2) * s).astype(np.float32)).astype(np.float64)
    return weights @ v


HALF_PRECISION = "weights carry float32 rounding (~6e-8 relative), far above the float64 bound"
softmax_in_float32.known_defects = {
    **dict.fromkeys((
        "sdpa-formula", "cross-and-self-same-computation", "worked-example-shapes", "worked-example-cross-shapes",
        "siwuxiang-query-result", "explicit-softmax-scale", "ratio-of-exp-sums", "online-softmax-avoids-overflow",
        "self-attention-four-steps", "concat-then-output-projection", "rows-sum-to-one",
        "weights-in-unit-interval", "attention-optimal-linear-approximation", "output-in-convex-hull",
        "permutation-equivariance", "long-range-in-one-step",
    ), HALF_PRECISION),
    "complete-graph-positive-weights": "float32 exponentials underflow to 0 once a score is ~87 below the row's "
                                      "maximum, where float64 keeps them positive down to ~-708",
}

DEFECTIVE = ("missing_scale", "softmax_over_queries", "causal_off_by_one", "per_block_softmax",
             "positional_bias", "softmax_in_float32")
