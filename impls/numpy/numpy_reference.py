"""The reference formula run in reduced precision (float32, float16).

The same code as the float64 oracle (specs.reference), so this record is the
"naive implementation in the same precision" of FlashAttention's error rule,
checked against every claim like any other implementation.
"""

from __future__ import annotations

import numpy as np

from protocol.registry import attention_impl
from specs.reference import attention


@attention_impl(name="numpy-reference", backend="numpy", dtypes=("float32", "float16"),
                causal_alignment="top_left")
def reference_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """softmax(q k^T * scale) v computed in the inputs' own precision."""
    return attention(q, k, v, scale=scale, causal=causal, mask=mask, finite=False).out
