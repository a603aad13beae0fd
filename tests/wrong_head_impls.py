"""Implementations for tests/test_weak_checks.py: each wrong one breaks one claim in one way, and the
correct ones are written unusually (base-2 exponentials, a log-sum-exp merge of two key halves) so the
checks are shown to accept legitimate code, not only the oracle's own formula.

Plain CONTRACT 1 functions on NumPy arrays (batch, heads, n, d); no declarations: the tests call the
checks in-process and assert which ones raise.
"""

import math

import numpy as np


def _scores(q, k, scale):
    """q k^T * scale with query head h reading kv head h // group."""
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    return q @ k.swapaxes(-1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)


def _attend(scores, v, heads):
    """softmax over keys, applied to the values of each query head's kv head."""
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True) @ np.repeat(v, heads // v.shape[1], axis=1)


def exp2_attention(q, k, v, *, scale=None):
    """Correct: 2^(log2(e) (s - max)) normalised, kv heads looked up by index instead of repeated."""
    group = q.shape[1] // k.shape[1]
    kv = np.arange(q.shape[1]) // group
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.einsum("bhid,bhjd->bhij", q, k[:, kv]) * (s * math.log2(math.e))
    e = np.exp2(scores - scores.max(axis=-1, keepdims=True))
    return np.einsum("bhij,bhjd->bhid", e, v[:, kv]) / e.sum(axis=-1)[..., None]


def lse_halves_attention(q, k, v, *, scale=None):
    """Correct: attention over each half of the keys, merged through their log-sum-exps."""
    scores = _scores(q, k, scale)
    values = np.repeat(v, q.shape[1] // v.shape[1], axis=1)
    half = max(1, scores.shape[-1] // 2)
    parts = []
    for block in (slice(0, half), slice(half, None)):
        s = scores[..., block]
        if s.shape[-1] == 0:
            continue
        top = s.max(axis=-1, keepdims=True)
        e = np.exp(s - top)
        total = e.sum(axis=-1, keepdims=True)
        parts.append((top + np.log(total), e / total @ values[:, :, block]))
    lse = np.logaddexp.reduce(np.stack([p[0] for p in parts]), axis=0)
    return sum(np.exp(part_lse - lse) * out for part_lse, out in parts)


def positional_bias(q, k, v, *, scale=None):
    """Wrong: adds 0.5 (j - i) to score (i, j), so keys are no longer scored by content alone."""
    scores = _scores(q, k, scale)
    n_q, n_k = scores.shape[-2:]
    return _attend(scores + 0.5 * (np.arange(n_k)[None, :] - np.arange(n_q)[:, None]), v, q.shape[1])


def doubled_keys(q, k, v, *, scale=None):
    """Wrong: scores q (2k)^T, so self-attention multiplies X by 2 X^T, not by its own transpose."""
    return _attend(_scores(q, 2 * k, scale), v, q.shape[1])


def unscaled(q, k, v, *, scale=None):
    """Wrong: ignores the scale, scoring with the plain dot product."""
    return _attend(_scores(q, k, 1.0), v, q.shape[1])


def negated_scores(q, k, v, *, scale=None):
    """Wrong: softmax(-S), so the key most aligned with the query gets the least weight."""
    return _attend(-_scores(q, k, scale), v, q.shape[1])


def shared_head_weights(q, k, v, *, scale=None):
    """Wrong: every head reuses the weights of head 0 (each on its own values)."""
    scores = _scores(q, k, scale)
    return _attend(np.broadcast_to(scores[:, :1], scores.shape), v, q.shape[1])


def excludes_own_key(q, k, v, *, scale=None):
    """Wrong as attention, right for seed 003's literal sentence: query i never sees key i (n_q = n_k)."""
    scores = _scores(q, k, scale)
    return _attend(np.where(np.eye(scores.shape[-1], dtype=bool), -np.inf, scores), v, q.shape[1])


def distance_scores(q, k, v, *, scale=None):
    """Scores -s |q_i - k_j|^2 / 2 (a distance, not a dot product): seed 003's literal reading of 点积 as 距离."""
    k_all = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    squared = ((q[..., :, None, :] - k_all[..., None, :, :]) ** 2).sum(-1)
    return _attend(-0.5 * squared * (1 / math.sqrt(q.shape[-1]) if scale is None else scale), v, q.shape[1])


def ignores_extra_values(q, k, v, *, scale=None):
    """Wrong: reads only the first n_k values, so v with more rows than k is accepted silently."""
    return _attend(_scores(q, k, scale), v[:, :, :k.shape[2]], q.shape[1])


def leaks_fifth_of_next_kv_head(q, k, v, *, scale=None):
    """Wrong: each query head's weights apply to 4/5 of its kv head's values and 1/5 of the next kv head's."""
    heads, heads_kv = q.shape[1], k.shape[1]
    kv = np.arange(heads) // (heads // heads_kv)
    values = 0.8 * v[:, kv] + 0.2 * v[:, (kv + 1) % heads_kv]
    scores = _scores(q, k, scale)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True) @ values
