"""Deliberately wrong implementations for the probabilistic and information-theoretic readings; each is right on
ordinary inputs in some way a weaker check would accept, and wrong in exactly the way one reading sees.
tests/test_readings_prob_catches.py runs them with --impl (the correct ones written unusually are zoo/correct.py's)."""

from __future__ import annotations

import math

import numpy as np

from impls.registry import attention_impl

CAPS = dict(backend="numpy", dtypes=("float64",), gqa=False)


def _scores(q, k, scale, mask, *, bias=None):
    s = (q @ k.swapaxes(-1, -2)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if bias is not None:
        s = s + bias
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return s


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@attention_impl(name="wrong-values-normalised", **CAPS)
def values_normalised(q, k, v, *, scale=None, mask=None):
    """Each value row scaled to unit length before the weighted sum ("normalised values"): one-hot values are unit
    already, so the weights read through them are right, but on real values the output is not E_{j~W}[v_j]."""
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    return _softmax(_scores(q, k, scale, mask)) @ (v / np.where(norms > 0, norms, 1.0))


@attention_impl(name="wrong-output-off-its-weights", **CAPS)
def output_off_its_weights(q, k, v, *, scale=None, mask=None):
    """The weighted sum scaled by 1 + 1e-3: normalising the weights read through one-hot values removes the
    factor, and the Monte Carlo mean cannot resolve a relative 1e-3 at 20000 draws, but out is not E_{j~W}[v_j]."""
    return (1 + 1e-3) * (_softmax(_scores(q, k, scale, mask)) @ v)


@attention_impl(name="wrong-ties-broken-by-position", **CAPS)
def ties_broken_by_position(q, k, v, *, scale=None, mask=None):
    """A bias of 1e-7 j added to the scores "to break ties deterministically": invisible at ordinary scales, it
    tilts the split of tied keys, so the large-scale limit is no longer 1/t on each tie."""
    return _softmax(_scores(q, k, scale, mask, bias=1e-7 * np.arange(k.shape[-2]))) @ v


@attention_impl(name="wrong-mask-added-before-scale", **CAPS)
def mask_added_before_scale(q, k, v, *, scale=None, mask=None):
    """BERT-style additive mask of -1e4, added before the scale multiplies: at scale 1/sqrt(d) a hidden key gets
    e^-2500 = 0, but as the scale goes to 0 the mask goes with it and hidden values enter the mean."""
    s = q @ k.swapaxes(-1, -2)
    if mask is not None:
        s = s + np.where(mask, 0.0, -1e4)
    return _softmax(s * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)) @ v


@attention_impl(name="wrong-scale-as-temperature", **CAPS)
def scale_as_temperature(q, k, v, *, scale=None, mask=None):
    """An explicit scale read as a temperature (scores divided by it); the default 1/sqrt(d) stays right. A larger
    scale then flattens the weights: their entropy rises with it."""
    s = (q @ k.swapaxes(-1, -2)) / (math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return _softmax(s) @ v


@attention_impl(name="wrong-small-weights-dropped", **CAPS)
def small_weights_dropped(q, k, v, *, scale=None, mask=None):
    """Sparse-attention pruning: weights below 1e-3 set to 0 and the rest renormalised. A 0 at a score gap of ~7,
    where softmax is far from underflow; the rows are no longer the maximiser of <p, s> + H(p)."""
    w = _softmax(_scores(q, k, scale, mask))
    w = np.where(w < 1e-3, 0.0, w)
    return w / w.sum(axis=-1, keepdims=True) @ v
