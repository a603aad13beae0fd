"""torch's flex_attention on the CPU, eager and under torch.compile, lets a NaN in a key or value that a block_mask
hides reach every query's output.

Peer: torch (checked: 2.13.0), torch.nn.attention.flex_attention: the eager path (it materialises the scores) and
torch.compile's fused C++ kernel for the CPU. A key the mask_mod excludes should take no part in a row, but both
weigh it by 0, and 0 * NaN = NaN in the weighted sum of the values, so padding that holds garbage makes every row
NaN. Status: new for flex_attention (SDPA's instance: pytorch #101967). Needs only torch.
"""
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

torch.manual_seed(0)
q, k, v = torch.randn(1, 1, 3, 16), torch.randn(1, 1, 3, 16), torch.randn(1, 1, 3, 16)  # (batch, heads, seq, dim)
k[0, 0, 2], v[0, 0, 2] = float("nan"), float("nan")  # key 2: padding nobody may see
block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx < 2, 1, 1, 3, 3, device="cpu")
expected = flex_attention(q, k.nan_to_num(), v.nan_to_num(), block_mask=block_mask)
flexes = {"eager": flex_attention, "compiled": torch.compile(flex_attention, dynamic=False)}
outs = {name: flex(q, k, v, block_mask=block_mask) for name, flex in flexes.items()}
print({name: out[0, 0, :, 0] for name, out in outs.items()}, " without the NaN:", expected[0, 0, :, 0])
assert all(torch.allclose(out, expected, atol=1e-6) for out in outs.values()), "a hidden key's NaN reached the output"
