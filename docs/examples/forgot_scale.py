"""A plausible attention with one mistake: it never applies the scale (neither 1/sqrt(d) nor the one given)."""

import numpy as np


def attention(q, k, v, *, scale=None):
    scores = q @ k.swapaxes(-1, -2)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True) @ v


attention.attention_capabilities = {"gqa": False}  # one kv head per query head: GQA problems are skipped
