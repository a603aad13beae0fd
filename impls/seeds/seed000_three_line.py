"""Seed 000 § 注意力机制的Q、K、V: the three lines of torch code, as written.

    scores = torch.matmul(Q,K.transpose(-2,-1)) / sqrt_dim
    weights = torch.softmax(scores, dim=-1)
    output = torch.matmul(weights, V)

The seed never defines `sqrt_dim`; the formula above the code makes it
sqrt(d_k), which is what it is here. There is no scale, causal or mask
argument, so properties that need them skip this record. Grouped kv heads
(1 < heads_kv < heads) do not broadcast through torch.matmul (MQA, heads_kv=1,
does), so the record declares gqa=False.
"""

from __future__ import annotations

import math

import torch

from protocol.registry import attention_impl


@attention_impl(name="seed000-three-line", backend="torch", dtypes=("float64",), gqa=False, tensors="torch")
def three_line_attention(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    sqrt_dim = math.sqrt(K.shape[-1])
    scores = torch.matmul(Q, K.transpose(-2, -1)) / sqrt_dim
    weights = torch.softmax(scores, dim=-1)
    output = torch.matmul(weights, V)
    return output
