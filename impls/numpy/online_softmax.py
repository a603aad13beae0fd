"""The online-softmax accumulator shared by the tiled and paged implementations.

Seed 000 § Flash Attention: O_i = sum_j e^{S_ij} V_j / sum_j e^{S_ij} is built one
block of keys at a time; a running maximum m, running sum l and running output
are rescaled by e^{m_old - m_new} whenever the maximum grows ("online softmax
correction"), so no block ever overflows and no S_ij is kept.
"""

from __future__ import annotations

import numpy as np


class OnlineSoftmax:
    """Accumulates softmax(scores) @ values over successive key blocks for a block of query rows."""

    def __init__(self, rows_shape: tuple[int, ...], d_v: int, dtype: np.dtype) -> None:
        self.dtype = np.dtype(dtype)
        self.row_max = np.full(rows_shape, -np.inf, dtype=self.dtype)
        self.row_sum = np.zeros(rows_shape, dtype=self.dtype)
        self.acc = np.zeros(rows_shape + (d_v,), dtype=self.dtype)

    def update(self, scores: np.ndarray, values: np.ndarray) -> None:
        """Fold in one block: scores (..., rows, cols) with -inf where hidden, values (..., cols, d_v)."""
        new_max = np.maximum(self.row_max, scores.max(axis=-1))
        shift = np.where(np.isfinite(new_max), new_max, self.dtype.type(0))
        correction = np.exp(self.row_max - shift)
        weights = np.exp(scores - shift[..., None])
        self.row_sum = self.row_sum * correction + weights.sum(axis=-1)
        self.acc = self.acc * correction[..., None] + weights @ values_seen(scores, values)
        self.row_max = new_max

    def output(self) -> np.ndarray:
        """acc / l; rows that saw no visible key stay zero."""
        seen = self.row_sum > 0
        return self.acc / np.where(seen, self.row_sum, self.dtype.type(1))[..., None]

    def lse(self) -> np.ndarray:
        seen = self.row_sum > 0
        with np.errstate(divide="ignore"):
            return np.where(seen, self.row_max + np.log(np.where(seen, self.row_sum, 1)), -np.inf)


def values_seen(scores: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`values` with the rows of keys that no query of the block sees (score -inf in every row) set to 0.

    Their weights are 0, but 0 * NaN is NaN: a NaN or Inf in padding would otherwise reach every output.
    """
    seen = ~(scores == -np.inf).all(axis=-2)
    return np.where(seen[..., None], values, values.dtype.type(0))
