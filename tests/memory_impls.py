"""Implementations whose memory is known by construction, for the tests of the peak-memory property
(tests/test_seed_code_checks.py): the child processes of harness.peak_memory import them from here."""

from __future__ import annotations

import numpy as np
import torch


def torch_key_blocks(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, block: int = 512) -> torch.Tensor:
    """Correct and linear in n: an online softmax over blocks of `block` keys, in torch, in base 2
    (exp2 of log2(e)-scaled scores), holding n_q x block scores at a time."""
    q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    log2e = 1.4426950408889634
    scores_scale = log2e / q.shape[-1] ** 0.5
    running_max = torch.full(q.shape[:-1] + (1,), -torch.inf, dtype=q.dtype)
    total = torch.zeros_like(running_max)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for start in range(0, k.shape[-2], block):
        scores = (q @ k[..., start:start + block, :].transpose(-1, -2)) * scores_scale
        new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
        correction = torch.exp2(running_max - new_max)
        weights = torch.exp2(scores - new_max)
        total = total * correction + weights.sum(dim=-1, keepdim=True)
        acc = acc * correction + weights @ v[..., start:start + block, :]
        running_max = new_max
    return acc / total


def torch_full_matrix(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> torch.Tensor:
    """Correct but quadratic in n: the whole n_q x n_k weight matrix at once."""
    q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    return torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1) @ v
