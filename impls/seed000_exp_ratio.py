"""Seed 000 § Flash Attention: the output written as a ratio of exponential sums.

    O_i = (e^{S_i1} V_1 + ... + e^{S_iN} V_N) / (e^{S_i1} + ... + e^{S_iN})

taken literally, without the maximum subtraction the seed's next paragraph
adds ("通过在线softmax校正避免数值溢出"). Mathematically it is softmax attention;
numerically e^{S} overflows once a score passes ~709.78 (float64), giving
inf/inf = NaN, and underflows to 0/0 when every score of a row is below ~-745.
"""

from __future__ import annotations

import numpy as np

from impls.registry import attention_impl
from specs.validation import check_shapes, resolve_scale

OVERFLOW = ("e^S overflows for scores above ~709.78 (float64): the ratio becomes inf/inf = NaN on the "
            "large-score inputs this claim's properties draw")
# Every claim whose properties draw scores of order 1e3 sees the NaN (CONTRACT 1: NaN where the
# oracle is finite fails); the properties that keep scores inside exp's range pass.
OVERFLOW_CLAIMS = (
    "sdpa-formula", "online-softmax-avoids-overflow", "weights-measure-relevance",
    "output-is-weighted-sum-of-values", "output-shape-follows-query", "output-in-convex-hull",
    "permutation-equivariance", "multi-head-independent-subspaces", "explicit-softmax-scale",
    "rows-sum-to-one", "weights-in-unit-interval", "cross-and-self-same-computation",
    "self-attention-four-steps", "concat-then-output-projection", "parallel-over-positions",
    "long-range-in-one-step", "attention-optimal-linear-approximation", "gqa-shares-kv-heads",
)


@attention_impl(
    name="seed000-exp-ratio",
    backend="numpy",
    dtypes=("float64",),
    known_defects=dict.fromkeys(OVERFLOW_CLAIMS, OVERFLOW),
)
def exp_ratio_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float | None = None) -> np.ndarray:
    shape = check_shapes(q, k, v)
    s = resolve_scale(scale, shape.d)
    k, v = (np.repeat(x, shape.group, axis=1) for x in (k, v))
    with np.errstate(over="ignore", invalid="ignore"):
        exp_scores = np.exp((q @ k.swapaxes(-1, -2)) * s)
        return (exp_scores @ v) / exp_scores.sum(axis=-1, keepdims=True)
