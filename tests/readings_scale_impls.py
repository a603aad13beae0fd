"""Deliberately wrong implementations for the scaling and position readings, and correct ones written in unusual
ways; tests/test_readings_scale.py runs them all with --impl."""

from __future__ import annotations

import math

import numpy as np

from impls.registry import attention_impl

CAPS = dict(backend="numpy", dtypes=("float64",))


def _visible(n_q: int, n_k: int, causal: bool, mask) -> np.ndarray:
    visible = np.ones((n_q, n_k), dtype=bool)
    if causal:
        visible = np.tril(visible)
    return visible if mask is None else visible & mask


def _softmax_attention(q, k, v, *, scale, causal=False, mask=None, bias=None):
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = (q @ k.swapaxes(-1, -2)) * scale
    if bias is not None:
        s = s + bias
    s = np.where(_visible(s.shape[-2], s.shape[-1], causal, mask), s, -np.inf)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ v


@attention_impl(name="wrong-ignores-scale", **CAPS)
def ignores_scale(q, k, v, *, scale=None, causal=False, mask=None):
    """Accepts `scale` and always uses 1/sqrt(d): scale=1 gives the scaled weights."""
    return _softmax_attention(q, k, v, scale=1 / math.sqrt(q.shape[-1]), causal=causal, mask=mask)


@attention_impl(name="wrong-scale-one-over-dk", **CAPS)
def scale_one_over_dk(q, k, v, *, scale=None, causal=False, mask=None):
    """The default scale 1/d_k instead of 1/sqrt(d_k)."""
    return _softmax_attention(q, k, v, scale=1 / q.shape[-1] if scale is None else scale, causal=causal, mask=mask)


@attention_impl(name="wrong-absolute-position-bias", **CAPS)
def absolute_position_bias(q, k, v, *, scale=None, causal=False, mask=None):
    """Adds 0.5 sin(j) to every score of the key stored at index j: a learned absolute position bias."""
    bias = 0.5 * np.sin(np.arange(k.shape[-2]))
    return _softmax_attention(q, k, v, scale=1 / math.sqrt(q.shape[-1]) if scale is None else scale,
                              causal=causal, mask=mask, bias=bias)


@attention_impl(name="wrong-ignores-causal", **CAPS)
def ignores_causal(q, k, v, *, scale=None, causal=False, mask=None):
    """Accepts `causal` and never masks."""
    return _softmax_attention(q, k, v, scale=1 / math.sqrt(q.shape[-1]) if scale is None else scale, mask=mask)


@attention_impl(name="wrong-mean-of-values", **CAPS)
def mean_of_values(q, k, v, *, scale=None, causal=False, mask=None):
    """Uniform weights over the visible keys, whatever q and k."""
    return _softmax_attention(q, k, v, scale=0.0, causal=causal, mask=mask)


@attention_impl(name="correct-exp2-reversed-keys", **CAPS)
def exp2_reversed_keys(q, k, v, *, scale=None, causal=False, mask=None):
    """softmax in base 2 with log2(e) folded into the scale, keys streamed last to first with a running max."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    factor = (1 / math.sqrt(q.shape[-1]) if scale is None else scale) * math.log2(math.e)
    visible = _visible(q.shape[-2], k.shape[-2], causal, mask)
    visible = np.broadcast_to(visible, q.shape[:-1] + (k.shape[-2],))
    running = np.full(q.shape[:-1] + (1,), -np.inf)
    total = np.zeros(q.shape[:-1] + (1,))
    acc = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for j in reversed(range(k.shape[-2])):
        s = np.where(visible[..., j:j + 1], (q @ k[..., j:j + 1, :].swapaxes(-1, -2)) * factor, -np.inf)
        new = np.maximum(running, s)
        safe = np.where(np.isfinite(new), new, 0.0)
        correction, p = np.exp2(running - safe), np.exp2(s - safe)
        total = total * correction + p
        acc = acc * correction + p * v[..., j:j + 1, :]
        running = new
    return acc / total


@attention_impl(name="correct-scale-on-keys-split", **CAPS)
def scale_on_keys_split(q, k, v, *, scale=None, causal=False, mask=None):
    """The scale applied to k, keys in blocks of 3 merged by their log-sum-exp."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale), np.repeat(
        v, group, axis=1)
    visible = _visible(q.shape[-2], k.shape[-2], causal, mask)
    outs, lses = [], []
    for start in range(0, k.shape[-2], 3):
        block = slice(start, start + 3)
        s = np.where(visible[..., block], q @ k[..., block, :].swapaxes(-1, -2), -np.inf)
        top = np.max(s, axis=-1, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        w = np.exp(s - top)
        total = w.sum(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            outs.append(np.where(total > 0, (w @ v[..., block, :]) / total, 0.0))
            lses.append(top + np.log(total))
    lse = np.stack(lses)
    merged = np.exp(lse - lse.max(axis=0))
    return np.sum(merged * np.stack(outs), axis=0) / merged.sum(axis=0)
