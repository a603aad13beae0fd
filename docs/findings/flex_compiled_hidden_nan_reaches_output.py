"""torch.compile(flex_attention) on the CPU lets a NaN in a key or value that a block_mask hides reach every query's
output.

Peer: torch (checked: 2.13.0), flex_attention under torch.compile, inductor's fused C++ kernel for the CPU. A key the
mask_mod excludes should take no part in a row, but the kernel computes over the whole block and multiplies the NaN
by a weight of 0, so padding that holds garbage makes every row NaN. Status: new for the compiled CPU kernel (SDPA's
instance is pytorch #101967; flex's eager path does the same). Needs only torch.
"""
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

flex = torch.compile(flex_attention, dynamic=False)
torch.manual_seed(0)
q, k, v = torch.randn(1, 1, 3, 16), torch.randn(1, 1, 3, 16), torch.randn(1, 1, 3, 16)  # (batch, heads, seq, dim)
k[0, 0, 2], v[0, 0, 2] = float("nan"), float("nan")  # key 2: padding nobody may see
block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx < 2, 1, 1, 3, 3, device="cpu")
out = flex(q, k, v, block_mask=block_mask)
expected = flex(q, k.nan_to_num(), v.nan_to_num(), block_mask=block_mask)
print("output with NaN only in a hidden key:", out[0, 0, :, 0], " without it:", expected[0, 0, :, 0])
assert torch.allclose(out, expected), "a hidden key's NaN reached the output"
