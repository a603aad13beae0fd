"""Deliberately wrong implementations for the gradient, dropout, fused and determinism properties, and correct
ones written in unusual ways; tests/test_flash_family_catches.py runs them all with --impl."""

from __future__ import annotations

import math

import torch

from impls.registry import attention_impl
from impls.torch_flash import flash_attention_tiled
from specs.dropout_mask import keep_from_row_keys, keep_mask, row_keys
from specs.gradients import attention_backward
from specs.reference import attention

CAPS = dict(backend="torch", dtypes=("float64",), tensors="torch", gqa=False)


def _scores(q, k, *, scale, causal, mask):
    s = torch.matmul(q, k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    visible = torch.ones(s.shape[-2:], dtype=torch.bool)
    if causal:
        visible = visible.tril()
    if mask is not None:
        visible = visible & mask
    return s.masked_fill(~visible, -math.inf), visible


def _keep(seed, p, shape, *, heads_from=None):
    b, h, i, j = (torch.arange(n) for n in shape)
    h = h if heads_from is None else torch.full_like(h, heads_from)
    keys = row_keys(seed, b[:, None, None, None], h[None, :, None, None], i[None, None, :, None])
    return keep_from_row_keys(keys, j, p)


def _softmax_attention(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0, dropout_seed=0,
                       rescale=True, heads_from=None, transpose_mask=False):
    s, visible = _scores(q, k, scale=scale, causal=causal, mask=mask)
    w = torch.where(visible.any(-1, keepdim=True), torch.softmax(s, -1), 0.0)
    if dropout_p:
        if transpose_mask:
            keep = _keep(dropout_seed, dropout_p, w.shape[:2] + w.shape[:-3:-1]).transpose(-1, -2)
        else:
            keep = _keep(dropout_seed, dropout_p, w.shape, heads_from=heads_from)
        w = w * keep / ((1 - dropout_p) if rescale else 1.0)
    return torch.matmul(w, torch.where(visible.any(-2)[..., None], v, 0.0))


# ---- wrong -----------------------------------------------------------------------------------------------

@attention_impl(name="wrong-detached-normaliser", **CAPS)
def detached_normaliser(q, k, v, *, scale=None, causal=False, mask=None):
    """Forward right; the row sum of exp is detached, so the softmax's Jacobian loses its -P P^T part."""
    s, _ = _scores(q, k, scale=scale, causal=causal, mask=mask)
    e = torch.exp(s - s.amax(-1, keepdim=True).detach())
    return torch.matmul(e / e.sum(-1, keepdim=True).detach(), v)


def _backward_without_row_dot(q, k, v, d_out, **kwargs):
    result = attention(q, k, v, **kwargs)
    d_v = attention_backward(q, k, v, d_out, **kwargs)[2]
    d_p = d_out @ v.swapaxes(-1, -2)
    d_s = result.weights * d_p  # forgets - rowsum(dO * O)
    return result.scale * (d_s @ k), result.scale * (d_s.swapaxes(-1, -2) @ q), d_v


@attention_impl(name="wrong-backward-without-row-dot", backend="numpy", dtypes=("float64",), gqa=False)
def backward_without_row_dot(q, k, v, *, scale=None, causal=False, mask=None):
    return attention(q, k, v, scale=scale, causal=causal, mask=mask).out


backward_without_row_dot.attention_backward = _backward_without_row_dot


@attention_impl(name="wrong-nan-gradient-of-masked-rows", **CAPS)
def nan_gradient_of_masked_rows(q, k, v, *, scale=None, causal=False, mask=None):
    """Zeroes the NaN output of a fully masked row after the fact: the forward is right, its gradient NaN."""
    s, _ = _scores(q, k, scale=scale, causal=causal, mask=mask)
    return torch.nan_to_num(torch.matmul(torch.softmax(s, -1), v), nan=0.0)


@attention_impl(name="wrong-dropout-mask-shared-by-heads", **CAPS)
def dropout_mask_shared_by_heads(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0, dropout_seed=0):
    return _softmax_attention(q, k, v, scale=scale, causal=causal, mask=mask, dropout_p=dropout_p,
                              dropout_seed=dropout_seed, heads_from=0)


@attention_impl(name="wrong-dropout-without-rescale", **CAPS)
def dropout_without_rescale(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0, dropout_seed=0):
    return _softmax_attention(q, k, v, scale=scale, causal=causal, mask=mask, dropout_p=dropout_p,
                              dropout_seed=dropout_seed, rescale=False)


@attention_impl(name="wrong-dropout-rate-doubled", **CAPS)
def dropout_rate_doubled(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0, dropout_seed=0):
    """Drops at 2p and rescales by 1/(1 - 2p): survivors and unbiasedness hold, the rate does not."""
    return _softmax_attention(q, k, v, scale=scale, causal=causal, mask=mask, dropout_p=2 * dropout_p,
                              dropout_seed=dropout_seed)


@attention_impl(name="wrong-dropout-mask-per-block", **CAPS, tile_keywords=("block_cols",))
def dropout_mask_per_block(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0, dropout_seed=0,
                           block_cols=16):
    """Each key block draws its mask from the seed plus its block index: the mask moves with the tiling."""
    s, visible = _scores(q, k, scale=scale, causal=causal, mask=mask)
    w = torch.where(visible.any(-1, keepdim=True), torch.softmax(s, -1), 0.0)
    if dropout_p:
        parts = [_keep(dropout_seed + c0 // block_cols, dropout_p,
                       w.shape[:-1] + (min(block_cols, w.shape[-1] - c0),)) for c0 in range(0, w.shape[-1], block_cols)]
        w = w * torch.cat(parts, dim=-1) / (1 - dropout_p)
    return torch.matmul(w, v)


@attention_impl(name="wrong-dropout-ignores-seed", **CAPS)
def dropout_ignores_seed(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0, dropout_seed=0):
    """Draws its mask from torch's global generator whatever dropout_seed says."""
    s, visible = _scores(q, k, scale=scale, causal=causal, mask=mask)
    w = torch.where(visible.any(-1, keepdim=True), torch.softmax(s, -1), 0.0)
    return torch.matmul(torch.nn.functional.dropout(w, dropout_p) if dropout_p else w, v)


@attention_impl(name="wrong-fused-mask-transposed", **CAPS, fused=True)
def fused_mask_transposed(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0, dropout_seed=0):
    """Keeps weight (i, j) where the suite's mask keeps (j, i): a fine mask, but not the sequence's."""
    return _softmax_attention(q, k, v, scale=scale, causal=causal, mask=mask, dropout_p=dropout_p,
                              dropout_seed=dropout_seed, transpose_mask=True)


@attention_impl(name="wrong-nondeterministic-key-order", **CAPS)
def nondeterministic_key_order(q, k, v, *, scale=None, causal=False, mask=None):
    """Visits the keys in a random order each call: the same attention, summed in another order."""
    order = torch.randperm(k.shape[-2])
    mask = None if mask is None else torch.broadcast_to(mask, q.shape[:-1] + k.shape[-2:-1])[..., order]
    if causal:
        hidden = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()[:, order]
        mask = hidden if mask is None else mask & hidden
    return _softmax_attention(q, k[..., order, :], v[..., order, :], scale=scale, mask=mask)


# ---- correct, written unusually ----------------------------------------------------------------------------

@attention_impl(name="correct-logsumexp-form", **CAPS, fused=True)
def logsumexp_form(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0, dropout_seed=0):
    """exp(S - logsumexp(S)) V, the mask taken from NumPy's keep_mask; autograd through both."""
    s, visible = _scores(q, k, scale=scale, causal=causal, mask=mask)
    lse = torch.logsumexp(s, -1, keepdim=True)
    w = torch.where(torch.isfinite(lse), torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)), 0.0)
    if dropout_p:
        w = w * torch.from_numpy(keep_mask(dropout_seed, dropout_p, tuple(w.shape))) / (1 - dropout_p)
    return torch.matmul(w, torch.where(visible.any(-2)[..., None], v, 0.0))


@attention_impl(name="correct-flash-tiled-odd-blocks", **CAPS, fused=True)
def flash_tiled_odd_blocks(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0, dropout_seed=0):
    return flash_attention_tiled(q, k, v, scale=scale, causal=causal, mask=mask, dropout_p=dropout_p,
                                 dropout_seed=dropout_seed, block_rows=3, block_cols=5)
