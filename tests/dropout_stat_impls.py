"""Dropout masks for the statistical dropout properties (properties/test_dropout.py): four wrong ones, each
with one mistake in how its uniforms are laid out over the positions, and correct ones drawn in unusual
orders. tests/test_dropout_statistics.py runs them with --impl.

The weights and the output are the float64 oracle's (specs.reference.attention under the mask drawn here), so
the mask is the only thing each implementation gets right or wrong. Those without `dropout_seed` draw from
NumPy's or torch's global generator, which the suite seeds where the call runs.
"""

from __future__ import annotations

import numpy as np
import torch

from specs.dropout_mask import keep_mask
from specs.reference import attention


def _attend(q, k, v, keep, dropout_p, *, scale, causal, mask) -> np.ndarray:
    return attention(q, k, v, scale=scale, causal=causal, mask=mask, keep=keep if dropout_p else None,
                     dropout_p=dropout_p).out


def _positions(q, k) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices broadcast to (n_q, n_k)."""
    return np.arange(q.shape[-2])[:, None], np.arange(k.shape[-2])[None, :]


# ---- wrong -----------------------------------------------------------------------------------------------

def mask_keyed_on_i_plus_j(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0):
    """Wrong: one uniform per anti-diagonal, read at i + j (a stream indexed by the sum of the coordinates)."""
    rows, columns = _positions(q, k)
    uniforms = np.random.random(q.shape[:2] + (q.shape[-2] + k.shape[-2] - 1,))
    return _attend(q, k, v, uniforms[..., rows + columns] >= dropout_p, dropout_p, scale=scale, causal=causal,
                   mask=mask)


def mask_keyed_on_i_minus_j(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0):
    """Wrong: one uniform per diagonal, read at i - j (a relative-position key)."""
    rows, columns = _positions(q, k)
    uniforms = np.random.random(q.shape[:2] + (q.shape[-2] + k.shape[-2] - 1,))
    return _attend(q, k, v, uniforms[..., rows - columns + k.shape[-2] - 1] >= dropout_p, dropout_p,
                   scale=scale, causal=causal, mask=mask)


def mask_period_two_over_heads(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0):
    """Wrong: masks drawn for two heads only, head h using mask h % 2."""
    b, h, n_q, _ = q.shape
    uniforms = np.random.random((b, min(h, 2), n_q, k.shape[-2]))
    return _attend(q, k, v, uniforms[:, np.arange(h) % 2] >= dropout_p, dropout_p, scale=scale, causal=causal,
                   mask=mask)


def one_position_at_one_and_a_half_p(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0):
    """Wrong at one position: the last head's last row drops its first column at 1.5 p, everything else is
    right (an off-by-one threshold table, say)."""
    uniforms = np.random.random(q.shape[:-1] + (k.shape[-2],))
    threshold = np.full(uniforms.shape, dropout_p)
    threshold[:, -1, -1, 0] = 1.5 * dropout_p
    return _attend(q, k, v, uniforms >= threshold, dropout_p, scale=scale, causal=causal, mask=mask)


# ---- correct, unusual ---------------------------------------------------------------------------------------

def hash_mask_in_transposed_blocks(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0,
                                   dropout_seed=0):
    """specs.dropout_mask's mask built column block by column block, last block first, rows in blocks of 3
    within each, into a transposed buffer: the order of the draws must not matter."""
    b, h, n_q, _ = q.shape
    n_k = k.shape[-2]
    transposed = np.zeros((b, h, n_k, n_q), dtype=bool)
    for c0 in reversed(range(0, n_k, 5)):
        for r0 in range(0, n_q, 3):
            block = keep_mask(dropout_seed, dropout_p, (b, h, min(3, n_q - r0), min(5, n_k - c0)),
                              row_offset=r0, column_offset=c0)
            transposed[:, :, c0:c0 + 5, r0:r0 + 3] = block.swapaxes(-1, -2)
    return _attend(q, k, v, transposed.swapaxes(-1, -2), dropout_p, scale=scale, causal=causal, mask=mask)


def torch_uniforms_drawn_transposed(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0):
    """torch's global generator, its uniforms drawn key-major (b, h, n_k, n_q) and transposed."""
    b, h, n_q, _ = q.shape
    uniforms = torch.rand(b, h, k.shape[-2], n_q, dtype=torch.float64).transpose(-1, -2).numpy()
    return _attend(q, k, v, uniforms >= dropout_p, dropout_p, scale=scale, causal=causal, mask=mask)
