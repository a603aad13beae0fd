"""Seed 001 § 1.3: the multi-head split / merge pseudo-code, made to run.

What had to change for it to run at all (recorded in the claim catalogue):
- `assert hdim % head_dim = 0` is a SyntaxError; it is `==` here;
- `MultiHeadAttention(q, k, v)` is "given later" but never given; it is the
  seed's own § 1.4 scaled dot-product formula, applied per head;
- `multi_head_split` reads `num_head` and `head_dim` from the enclosing scope
  and `multi_head_merge(x, b)` ignores its `b`: both run as written, from
  impls/seeds/seed_code/seed001_multihead.py, with those two names in their scope.
The protocol hands q, k, v already split into heads, so they are merged into
the (batch, len, hdim) tensors the pseudo-code expects, run through it, and the
merged output is split back. All of q, k, v share hdim in the pseudo-code, so
d_v must equal d and heads_kv must equal heads.
"""

from __future__ import annotations

import math

import torch

from impls.seeds.seed_code.seed001_multihead import SEED_SPLIT_MERGE
from protocol.registry import attention_impl


@attention_impl(name="seed001-multihead", backend="torch", dtypes=("float64",), gqa=False,
                value_dim=False, tensors="torch")
def seed_multi_head_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    batch_size, num_head, _, head_dim = q.shape
    hdim = num_head * head_dim
    assert hdim % head_dim == 0

    # the seed's split / merge, as written (impls/seeds/seed_code), reading num_head and head_dim from its scope
    scope = {"num_head": num_head, "head_dim": head_dim}
    exec(compile(SEED_SPLIT_MERGE, "seed001_split_merge", "exec"), scope)
    multi_head_split, multi_head_merge = scope["multi_head_split"], scope["multi_head_merge"]

    def MultiHeadAttention(q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head_dim)
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    q, k, v = (multi_head_merge(x, batch_size) for x in (q, k, v))
    q, k, v = map(multi_head_split, [q, k, v])
    output = MultiHeadAttention(q, k, v)
    output = multi_head_merge(output, batch_size)
    return multi_head_split(output)
