"""float16 implementations for tests/test_past_range.py: one keeps its scores in float16 (wrong past 65504),
the others store float16 and compute in float32 in unusual ways (both right)."""

import numpy as np

from zoo.correct import exp2_with_folded_scale


def float16_scores(q, k, v, *, scale=None, causal=False, mask=None):
    """Wrong past float16's range: q k^T is formed in float16 (inf past 65504), the rest in float32."""
    group = q.shape[1] // k.shape[1]
    scores = (q @ np.repeat(k, group, axis=1).swapaxes(-1, -2)).astype(np.float32)
    scores *= q.shape[-1] ** -0.5 if scale is None else scale
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], dtype=bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out = (e / e.sum(axis=-1, keepdims=True)) @ np.repeat(v, group, axis=1).astype(np.float32)
    return out.astype(np.float16)


float16_scores.attention_capabilities = {"dtypes": ("float16",)}


def scale_folded_into_float32_queries(q, k, v, *, scale=None, causal=False, mask=None):
    """Right: q scaled in float32 before the product, keys and values widened, the output rounded once."""
    s = q.shape[-1] ** -0.5 if scale is None else scale
    wide = [x.astype(np.float32) for x in (q, k, v)]
    return exp2_with_folded_scale(wide[0] * np.float32(s), *wide[1:], scale=1.0, causal=causal,
                                  mask=mask).astype(np.float16)


scale_folded_into_float32_queries.attention_capabilities = {"dtypes": ("float16",)}
