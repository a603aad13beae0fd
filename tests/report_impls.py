"""Implementations for the report's own tests (tests/test_figures.py, tests/test_report_document.py)."""

from __future__ import annotations

import numpy as np


def keys_reversed(q, k, v, *, scale=None, causal=False, mask=None):
    """Wrong: pairs query i's weights with the keys in reverse order (the values stay in place)."""
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = scale * q @ k[..., ::-1, :].swapaxes(-1, -2)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v
