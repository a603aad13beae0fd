"""The torch tiled FlashAttention (impls/torch/torch_flash.py) reads, forward and backward, only the keys some row
of a query block may see under its window and causal horizon, in either alignment: the tiles it visits are the
brute force's, and a narrow window visits a sliver of the dense pass's tiles."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from impls.torch import torch_flash
from specs.gradients import attention_backward
from specs.reference import attention

RNG = np.random.default_rng(17)


def tiles_over_the_visible_keys(n_q, n_k, rows, cols, window, causal, offset):
    """Brute force: per query block, the span from the first to the last key some row sees, in chunks of `cols`."""
    i, j = np.arange(n_q)[:, None] + offset, np.arange(n_k)[None, :]
    left, right = window
    visible = np.ones((n_q, n_k), bool)
    visible &= (j >= i - left) if left >= 0 else True
    visible &= (j <= i + right) if right >= 0 else True
    visible &= (j <= i) if causal else True
    tiles = 0
    for r0 in range(0, n_q, rows):
        seen = np.flatnonzero(visible[r0:r0 + rows].any(axis=0))
        tiles += math.ceil((seen[-1] - seen[0] + 1) / cols) if seen.size else 0
    return tiles


@pytest.mark.parametrize("window, causal", [((16, 0), True), ((5, 5), False), ((0, 0), False), ((-1, 3), False),
                                            ((40, -1), True), ((300, 300), False)])
@pytest.mark.parametrize("alignment, n_q, n_k", [("top_left", 200, 200), ("bottom_right", 150, 230),
                                                 ("bottom_right", 230, 150)])
def test_the_tiles_visited_are_those_over_the_visible_keys(window, causal, alignment, n_q, n_k):
    rows, cols = 16, 24
    offset = 0 if alignment == "top_left" else n_k - n_q
    q, k, v, d_out = (RNG.normal(size=(1, 2, n, 8)) for n in (n_q, n_k, n_k, n_q))
    leaves = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    torch_flash.VISITED_TILES.clear()
    out = torch_flash.flash_attention_tiled(*leaves, causal=causal, causal_alignment=alignment, window_size=window,
                                            block_rows=rows, block_cols=cols)
    out.backward(torch.tensor(d_out))
    expected = tiles_over_the_visible_keys(n_q, n_k, rows, cols, window, causal, offset)
    assert {"forward": expected, "backward": expected} == torch_flash.VISITED_TILES
    kwargs = dict(causal=causal, causal_alignment=alignment, window_size=window)
    np.testing.assert_allclose(out.detach().numpy(), attention(q, k, v, **kwargs).out, rtol=1e-12, atol=1e-14)
    for leaf, grad in zip(leaves, attention_backward(q, k, v, d_out, **kwargs), strict=True):
        np.testing.assert_allclose(leaf.grad.numpy(), grad, rtol=1e-10, atol=1e-12)


def test_a_window_of_256_at_8192_visits_a_sliver_of_the_dense_tiles():
    """(window + block_rows + block_cols) / n of the dense forward's tiles at most, at the default block sizes: the
    benchmark (benchmarks/summary.py's window target) times what this counts."""
    n, window, rows, cols = 8192, 256, 256, 512
    q, k, v = (torch.zeros((1, 1, n, 4)) for _ in range(3))
    torch_flash.VISITED_TILES.clear()
    torch_flash.flash_attention_tiled(q, k, v, window_size=(window, 0))
    dense = (n // rows) * (n // cols)
    assert torch_flash.VISITED_TILES["forward"] <= (window + rows + cols) / n * dense
