"""torch implementations for tests/test_resident_memory.py (scores-used-once on a backend tracemalloc cannot
see): both tile the keys and give the right output; one keeps every tile's scores in a whole n_q x n_k buffer."""

import math

import torch


def _tiles(q, k, v, block_cols, scale, *, backwards=False):
    """Each key tile's start, scores and values, computed only when the loop reaches it."""
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    starts = range(0, k.shape[-2], block_cols)
    for c0 in reversed(starts) if backwards else starts:
        yield c0, torch.matmul(q, k[..., c0:c0 + block_cols, :].transpose(-1, -2)) * s, v[..., c0:c0 + block_cols, :]


def keeps_every_score_tile(q, k, v, *, scale=None, block_cols=64):
    """Wrong for the claim: the online softmax is right, but each tile's scores are also copied into a
    preallocated (n_q, n_k) buffer "for inspection", so the whole matrix is resident."""
    kept = torch.empty(q.shape[:-1] + (k.shape[-2],), dtype=q.dtype)
    top = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
    total = torch.zeros_like(top)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for c0, scores, values in _tiles(q, k, v, block_cols, scale):
        kept[..., c0:c0 + scores.shape[-1]] = scores
        new_top = torch.maximum(top, scores.amax(-1, keepdim=True))
        e = torch.exp(scores - new_top)
        rescale = torch.exp(top - new_top)
        total = total * rescale + e.sum(-1, keepdim=True)
        acc = acc * rescale + torch.matmul(e, values)
        top = new_top
    return acc / total


def keys_streamed_backwards_in_log_space(q, k, v, *, scale=None, block_cols=48):
    """Right, unusually: tiles visited last to first, the running state kept as a log-sum-exp and a
    normalised output merged with logaddexp."""
    lse = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
    out = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for _, scores, values in _tiles(q, k, v, block_cols, scale, backwards=True):
        tile_lse = torch.logsumexp(scores, -1, keepdim=True)
        tile_out = torch.matmul(torch.exp(scores - tile_lse), values)
        merged = torch.logaddexp(lse, tile_lse)
        out = out * torch.exp(lse - merged) + tile_out * torch.exp(tile_lse - merged)
        lse = merged
    return out


for _fn in (keeps_every_score_tile, keys_streamed_backwards_in_log_space):
    _fn.attention_capabilities = {"dtypes": ("float32",), "tensors": "torch", "tile_keywords": ("block_cols",),
                                  "gqa": False}
