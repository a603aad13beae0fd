"""The NumPy tiled forward (impls/numpy/numpy_tiled.py) skips every key block that no row of a query block may see
under its sliding window and causal mask, and scores every block that some row may see."""

from __future__ import annotations

import numpy as np
import pytest

from impls.numpy import numpy_tiled
from specs.reference import attention

RNG = np.random.default_rng(7)


def blocks_with_a_visible_key(n_q, n_k, rows, cols, window, causal):
    """Brute force: the (query block, key block) pairs holding some visible (i, j)."""
    i, j = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    left, right = window
    visible = np.ones((n_q, n_k), bool)
    visible &= (j >= i - left) if left >= 0 else True
    visible &= (j <= i + right) if right >= 0 else True
    visible &= (j <= i) if causal else True
    return sum(visible[r0:r0 + rows, c0:c0 + cols].any()
               for r0 in range(0, n_q, rows) for c0 in range(0, n_k, cols))


@pytest.mark.parametrize("window, causal", [((16, 0), True), ((5, 5), False), ((0, 0), False), ((-1, 3), False),
                                            ((40, -1), True), ((300, 300), False)])
@pytest.mark.parametrize("rows, cols", [(16, 16), (7, 13)])
def test_a_window_skips_every_block_outside_it_and_no_other(window, causal, rows, cols):
    n_q = n_k = 200
    q, k, v = (RNG.normal(size=(1, 2, 200, 8)) for _ in range(3))
    numpy_tiled.SCORED_BLOCKS.clear()
    out = numpy_tiled.tiled_attention(q, k, v, causal=causal, window_size=window, block_rows=rows, block_cols=cols)
    assert numpy_tiled.SCORED_BLOCKS["forward"] == blocks_with_a_visible_key(n_q, n_k, rows, cols, window, causal)
    np.testing.assert_allclose(out, attention(q, k, v, causal=causal, window_size=window).out, rtol=1e-12,
                               atol=1e-14)


def test_a_narrow_window_scores_a_sliver_of_the_blocks():
    """(window + block_rows + block_cols) / n of the dense forward's blocks, about: 256 keys of window at n = 4096."""
    n, block = 4096, 64
    q, k, v = (RNG.normal(size=(1, 1, n, 4)) for _ in range(3))
    numpy_tiled.SCORED_BLOCKS.clear()
    numpy_tiled.tiled_attention(q, k, v, window_size=(128, 128), block_rows=block, block_cols=block)
    dense = (n // block) ** 2
    assert numpy_tiled.SCORED_BLOCKS["forward"] <= (256 + 2 * block) / n * dense
