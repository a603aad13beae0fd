"""Seed 000 § Flash Attention: the output written as a ratio of exponential sums.

    O_i = (e^{S_i1} V_1 + ... + e^{S_iN} V_N) / (e^{S_i1} + ... + e^{S_iN})

taken literally, without the maximum subtraction the seed's next paragraph
adds ("通过在线softmax校正避免数值溢出"). Mathematically it is softmax attention;
numerically e^{S} overflows once a score passes ~709.78 (float64), giving
inf/inf = NaN; when every score of a row is below ~-708, e^{S} is subnormal and
both sums keep only a few significant bits (a 2% error at -736, found by this
suite), and below ~-745 they are 0 and 0/0 = NaN.
"""

from __future__ import annotations

import numpy as np

from protocol.registry import attention_impl
from specs.validation import check_shapes, resolve_scale


@attention_impl(
    name="seed000-exp-ratio",
    backend="numpy",
    dtypes=("float64",),
)
def exp_ratio_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float | None = None) -> np.ndarray:
    shape = check_shapes(q, k, v, finite=False)
    s = resolve_scale(scale, shape.d)
    k, v = (np.repeat(x, shape.group, axis=1) for x in (k, v))
    with np.errstate(over="ignore", invalid="ignore"):
        exp_scores = np.exp((q @ k.swapaxes(-1, -2)) * s)
        return (exp_scores @ v) / exp_scores.sum(axis=-1, keepdims=True)
