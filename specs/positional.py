"""Position encodings named by the seeds: sinusoidal (三角编码) and rotary (RoPE).

Seed 000 § 具体过程 (为此我们必须引入位置编码) and seed 003 (在经过了位置编码之后
（三角编码或者RoPE）). Used by the symmetry properties.
"""

from __future__ import annotations

import numpy as np

from specs.validation import AttentionInputError


def sinusoidal_encoding(n: int, d: int, base: float = 10000.0) -> np.ndarray:
    """(n, d): PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(p / base^(2i/d))."""
    if n < 1 or d < 1:
        raise AttentionInputError(f"sinusoidal_encoding needs n >= 1 and d >= 1, got n={n}, d={d}")
    positions = np.arange(n)[:, None]
    frequencies = base ** (-np.arange(0, d, 2) / d)
    encoding = np.zeros((n, d))
    encoding[:, 0::2] = np.sin(positions * frequencies)
    encoding[:, 1::2] = np.cos(positions * frequencies)[:, : d // 2]
    return encoding


def rotary_embedding(x: np.ndarray, positions: np.ndarray, base: float = 10000.0) -> np.ndarray:
    """Rotate consecutive pairs (x_2i, x_2i+1) of each row by angle position * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2:
        raise AttentionInputError(f"rotary embedding needs an even last dimension, got {d}")
    if positions.shape != x.shape[-2:-1]:
        raise AttentionInputError(f"positions of shape {positions.shape} do not match rows {x.shape[-2:-1]}")
    angles = positions[:, None] * base ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles), np.sin(angles)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out
