"""Fused float16/bfloat16 kernels for tests/test_fused_half.py, written in NumPy and torch: one keeps its scores
in the storage dtype (as accurate as the naive formula, so sdpa-formula passes it, yet not the unfused sequence
with float32 inside), the others keep float32 inside in unusual ways (P rounded to half before P V, as
FlashAttention's second MatMul takes it; odd tiles)."""

import math

import numpy as np

from impls.registry import attention_impl
from impls.torch_flash import flash_attention_tiled

HALF = dict(backend="numpy", dtypes=("float16",), gqa=False, fused=True)


def _visible_scores(q, k, scale, causal, mask):
    s = q @ k.swapaxes(-1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    visible = np.ones(s.shape[-2:], dtype=bool)
    if causal:
        visible = np.tril(visible)
    if mask is not None:
        visible = visible & mask
    return np.where(visible, s, -np.inf)


def _softmax32(s):
    top = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total > 0, total, 1.0)


@attention_impl(name="wrong-fused-scores-in-half", **HALF)
def scores_in_half(q, k, v, *, scale=None, causal=False, mask=None):
    """Wrong for a fused kernel: S = Q K^T rounded to float16 before the float32 softmax."""
    s = _visible_scores(q, k, scale, causal, mask).astype(np.float16).astype(np.float32)
    return (_softmax32(s) @ v.astype(np.float32)).astype(np.float16)


@attention_impl(name="correct-fused-p-in-half", **HALF)
def p_in_half(q, k, v, *, scale=None, causal=False, mask=None):
    """Right: S and the softmax in float32, P rounded to float16 for the second MatMul, accumulated in float32."""
    wide = [x.astype(np.float32) for x in (q, k, v)]
    p = _softmax32(_visible_scores(*wide[:2], scale, causal, mask)).astype(np.float16)
    return (p.astype(np.float32) @ wide[2]).astype(np.float16)


@attention_impl(name="correct-fused-tiled-odd-blocks-half", backend="torch", dtypes=("float16", "bfloat16"),
                tensors="torch", gqa=False, fused=True)
def tiled_odd_blocks_half(q, k, v, *, scale=None, causal=False, mask=None):
    """Right: the project's tiled FlashAttention (float32 inside) with 3 x 5 tiles."""
    return flash_attention_tiled(q, k, v, scale=scale, causal=causal, mask=mask, block_rows=3, block_cols=5)


