"""Implementations for tests/test_readings_geom.py, the geometric, differential-geometric and Bayesian readings
(seed 002 § 3.1.2, § 3.1.4, § 3.1.5). Each wrong one is a real variant of attention that breaks some of the
readings and keeps others; the correct ones are written unusually.

Plain CONTRACT 1 functions on NumPy arrays (batch, heads, n, d); the tests call the checks in-process.
The correct exp2 and log-sum-exp-merge forms are tests/wrong_head_impls.py's, and so is `unscaled`.
"""

import math

import numpy as np

from tests.wrong_head_impls import _attend, _scores


def _with_kv_heads(q, k, v):
    group = q.shape[1] // k.shape[1]
    return np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)


def _scale(q, scale):
    return 1 / math.sqrt(q.shape[-1]) if scale is None else scale


def sigmoid_weights(q, k, v, *, scale=None):
    """Wrong (sigmoid attention): W = sigmoid(S - log n_k), each weight on its own; rows need not sum to 1."""
    _, values = _with_kv_heads(q, k, v)
    scores = _scores(q, k, scale) - math.log(k.shape[2])
    return (1 / (1 + np.exp(-scores))) @ values


def key_norm_penalty(q, k, v, *, scale=None):
    """Wrong (distance attention): scores -s |q - k|^2 / 2 = s q.k - s |k|^2 / 2 - s |q|^2 / 2, so each key
    pays s |k_j|^2 / 2: a bias per key, which a translation of the keys changes."""
    keys, _ = _with_kv_heads(q, k, v)
    penalty = _scale(q, scale) * np.sum(keys * keys, axis=-1)[..., None, :] / 2
    return _attend(_scores(q, k, scale) - penalty, v, q.shape[1])


def cosine_scores(q, k, v, *, scale=None):
    """Wrong (cosine attention): s q.k / (|q| |k|); the same as dot-product attention on unit vectors only."""
    keys, _ = _with_kv_heads(q, k, v)
    norms = np.linalg.norm(q, axis=-1)[..., :, None] * np.linalg.norm(keys, axis=-1)[..., None, :]
    return _attend(_scores(q, k, scale) / norms, v, q.shape[1])


def _rotary(x):
    """RoPE by position along the sequence axis, on pairs (2i, 2i+1) with base 10000."""
    n, d = x.shape[-2:]
    angles = np.arange(n)[:, None] * 10000.0 ** (-np.arange(0, d - d % 2, 2) / d)[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    out = x.copy()
    out[..., 0:d - d % 2:2] = x[..., 0:d - d % 2:2] * cos - x[..., 1:d:2][..., :d // 2] * sin
    out[..., 1:d:2][..., :d // 2] = x[..., 0:d - d % 2:2] * sin + x[..., 1:d:2][..., :d // 2] * cos
    return out


def rope_inside(q, k, v, *, scale=None):
    """Wrong (rotary embedding applied inside the attention call): the scores see coordinates, not only dot
    products, so a rotation of q and k or a translation of the keys changes them."""
    return _attend(_scores(_rotary(q), _rotary(k), scale), v, q.shape[1])


def column_softmax(q, k, v, *, scale=None):
    """Wrong: the softmax normalises each key's column over the queries instead of each query's row."""
    scores = _scores(q, k, scale)
    e = np.exp(scores - scores.max(axis=-2, keepdims=True))
    return e / e.sum(axis=-2, keepdims=True) @ _with_kv_heads(q, k, v)[1]


def polarised_scores(q, k, v, *, scale=None):
    """Correct, unusually: q.k by the polarisation identity (|q + k|^2 - |q - k|^2) / 4, weights as
    e^(S - max) divided by their sum after the product with V."""
    keys, values = _with_kv_heads(q, k, v)
    plus = np.sum((q[..., :, None, :] + keys[..., None, :, :]) ** 2, axis=-1)
    minus = np.sum((q[..., :, None, :] - keys[..., None, :, :]) ** 2, axis=-1)
    scores = (plus - minus) / 4 * _scale(q, scale)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e @ values) / e.sum(axis=-1, keepdims=True)
