"""Attention written in unusual but correct ways, and slightly wrong, for the tolerance model's tests.

Correct float16 and bfloat16 attention stores in its 16 bits and computes inside in float32 (FlashAttention
keeps S, the maximum, exp and the accumulators in float32 and rounds P to the storage dtype before P V);
float32 and float64 variants compute in their own precision. Each takes (q, k, v) in the storage dtype.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from specs.dtypes import accumulator
from specs.reference import attention


def _inner(x: np.ndarray) -> type:
    return accumulator(x.dtype).type


def _promote(q, k, v):
    return tuple(x.astype(_inner(q)) for x in (q, k, v))


def _softmax(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _scale(q: np.ndarray) -> float:
    return 1 / math.sqrt(q.shape[-1])


def naive(q, k, v):
    """The formula in the storage precision (the reference of FlashAttention's rule)."""
    return attention(q, k, v).out


def torch_math(q, k, v):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from impls.torch_convert import as_tensor, to_numpy

    with sdpa_kernel(SDPBackend.MATH):
        return to_numpy(F.scaled_dot_product_attention(*map(as_tensor, (q, k, v))))


def float32_inside(q, k, v):
    q_, k_, v_ = _promote(q, k, v)
    return (_softmax(q_ @ k_.swapaxes(-1, -2) * _scale(q)) @ v_).astype(q.dtype)


def online_one_key_at_a_time(q, k, v):
    """Online softmax with B_c = 1: a serial accumulation, P rounded to the storage dtype as FA2 does."""
    q_, k_, v_ = _promote(q, k, v)
    inner = _inner(q)
    row_max = np.full(q.shape[:-1], -np.inf, inner)
    row_sum = np.zeros(q.shape[:-1], inner)
    acc = np.zeros(q.shape[:-1] + (v.shape[-1],), inner)
    for j in range(k.shape[-2]):
        score = np.einsum("...id,...d->...i", q_, k_[..., j, :]) * _scale(q)
        new_max = np.maximum(row_max, score)
        correction, weight = np.exp(row_max - new_max), np.exp(score - new_max)
        row_sum = row_sum * correction + weight
        acc = acc * correction[..., None] + weight.astype(q.dtype).astype(inner)[..., None] * v_[..., j, None, :]
        row_max = new_max
    return (acc / row_sum[..., None]).astype(q.dtype)


def exp2_softmax(q, k, v):
    """exp2 with the scale folded into log2(e), as FlashAttention's kernels do."""
    q_, k_, v_ = _promote(q, k, v)
    t = q_ @ k_.swapaxes(-1, -2) * (_scale(q) * math.log2(math.e))
    e = np.exp2(t - t.max(axis=-1, keepdims=True))
    return ((e @ v_) / e.sum(axis=-1, keepdims=True)).astype(q.dtype)


def split_kv_merge(q, k, v, parts: int = 4, chained: bool = False):
    """Keys in `parts` splits, each normalised on its own, merged through their log-sum-exp: as
    FlashAttention's combine step does, or (chained) by a pairwise logaddexp per split."""
    q_, k_, v_ = _promote(q, k, v)
    outs, lses = [], []
    for keys in np.array_split(np.arange(k.shape[-2]), min(parts, k.shape[-2])):
        scores = q_ @ k_[..., keys, :].swapaxes(-1, -2) * _scale(q)
        top = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - top)
        total = e.sum(axis=-1, keepdims=True)
        outs.append((e @ v_[..., keys, :]) / total)
        lses.append(top + np.log(total))
    if chained:
        lse = np.logaddexp.reduce(np.stack(lses), axis=0)
    else:
        top = np.max(lses, axis=0)
        lse = top + np.log(sum(np.exp(part - top) for part in lses))
    return sum(np.exp(part - lse) * out for part, out in zip(lses, outs, strict=True)).astype(q.dtype)


CORRECT = {"naive": naive, "torch-math": torch_math, "float32-inside": float32_inside,
           "online-one-key": online_one_key_at_a_time, "exp2": exp2_softmax, "split-kv-merge": split_kv_merge}


def scale_of_d_plus_one(q, k, v):
    q_, k_, v_ = _promote(q, k, v)
    return (_softmax(q_ @ k_.swapaxes(-1, -2) / math.sqrt(q.shape[-1] + 1)) @ v_).astype(q.dtype)


def output_one_percent_low(q, k, v):
    return (float32_inside(q, k, v).astype(_inner(q)) * (1 - 1e-2)).astype(q.dtype)


def one_key_dropped(q, k, v):
    middle = k.shape[-2] // 2
    keep = np.arange(k.shape[-2]) != middle
    q_, k_, v_ = _promote(q, k[..., keep, :], v[..., keep, :])
    return (_softmax(q_ @ k_.swapaxes(-1, -2) * _scale(q)) @ v_).astype(q.dtype)


def score_bias_on_one_key(q, k, v):
    q_, k_, v_ = _promote(q, k, v)
    scores = q_ @ k_.swapaxes(-1, -2) * _scale(q)
    scores[..., k.shape[-2] // 2] += 1e-3
    return (_softmax(scores) @ v_).astype(q.dtype)


def weights_rounded_to_float16(q, k, v):
    q_, k_, v_ = _promote(q, k, v)
    weights = _softmax(q_ @ k_.swapaxes(-1, -2) * _scale(q)).astype(np.float16).astype(_inner(q))
    return (weights @ v_).astype(q.dtype)


def softmax_in_bfloat16(q, k, v):
    q_, k_, v_ = _promote(q, k, v)

    def bf16(x):
        return x.astype(ml_dtypes.bfloat16).astype(_inner(q))

    scores = bf16(q_ @ k_.swapaxes(-1, -2) * _scale(q))
    e = bf16(np.exp(scores - scores.max(axis=-1, keepdims=True)))
    return (bf16(e / e.sum(axis=-1, keepdims=True)) @ v_).astype(q.dtype)


def softmax_sum_in_bfloat16(q, k, v):
    """float32 inside, but the softmax's row sum accumulated in bfloat16 one key at a time (NumPy's own
    bfloat16 sum): once the sum reaches 2^8 times a term, the term is lost."""
    q_, k_, v_ = _promote(q, k, v)
    scores = q_ @ k_.swapaxes(-1, -2) * _scale(q)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True)).astype(ml_dtypes.bfloat16)
    return ((e.astype(_inner(q)) @ v_) / e.sum(axis=-1, keepdims=True).astype(_inner(q))).astype(q.dtype)


def output_accumulated_in_bfloat16(q, k, v):
    """P V accumulated in a bfloat16 accumulator one key at a time (no float32 inside)."""
    q_, k_, _ = _promote(q, k, v)
    weights = _softmax(q_ @ k_.swapaxes(-1, -2) * _scale(q)).astype(ml_dtypes.bfloat16)
    acc = np.zeros(q.shape[:-1] + (v.shape[-1],), ml_dtypes.bfloat16)
    for j in range(k.shape[-2]):
        acc = acc + weights[..., j:j + 1] * v[..., j:j + 1, :].astype(ml_dtypes.bfloat16)
    return acc.astype(q.dtype)


SLIGHTLY_WRONG = {"scale 1/sqrt(d+1)": scale_of_d_plus_one, "output x (1 - 1e-2)": output_one_percent_low,
                  "one key dropped": one_key_dropped, "bias 1e-3 on one score": score_bias_on_one_key,
                  "weights rounded to float16": weights_rounded_to_float16,
                  "softmax in bfloat16": softmax_in_bfloat16,
                  "softmax sum in bfloat16": softmax_sum_in_bfloat16,
                  "P V accumulated in bfloat16": output_accumulated_in_bfloat16}
