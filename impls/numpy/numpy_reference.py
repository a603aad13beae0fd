"""The reference formula run in reduced precision (float32, float16).

The same code as the float64 oracle (specs.reference), so this record is the
"naive implementation in the same precision" of FlashAttention's error rule,
checked against every claim like any other implementation.
"""

from __future__ import annotations

import numpy as np

from protocol.registry import attention_impl
from specs.reference import attention

PAST_FLOAT16 = ("computes its scores in float16 (it is the rule's naive baseline): q k^T past 65504 is inf, "
                "before any softmax correction can act")


@attention_impl(name="numpy-reference", backend="numpy", dtypes=("float32", "float16"),
                causal_alignment="top_left",
                known_defects={"online-softmax-avoids-overflow": {
                    "why": PAST_FLOAT16, "dtypes": ("float16",),
                    "properties": ("test_scores_past_the_dtypes_range_give_finite_correct_outputs",),
                    "match": r"returned (-?inf|nan) at out"}})
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
