"""torch's flex_attention, eager on the CPU, lets a NaN in a key or value that a block_mask hides reach every query's
output.

Peer: torch (checked: 2.13.0), torch.nn.attention.flex_attention without torch.compile (the unfused path: it
materialises the scores). A key the mask_mod excludes gets weight 0, but 0 * NaN = NaN in the weighted sum of the
values, so padding that holds garbage makes every row NaN. Status: new for flex_attention's eager path (SDPA:
pytorch #101967). Needs only torch and NumPy.
"""
import numpy as np
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

rng = np.random.default_rng(0)
q, k, v = (torch.from_numpy(rng.standard_normal((1, 1, 3, 4))) for _ in range(3))  # (batch, heads, seq, dim)
k[0, 0, 2], v[0, 0, 2] = float("nan"), float("nan")  # key 2: padding nobody may see
block_mask = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx < 2, 1, 1, 3, 3, device="cpu")
out = flex_attention(q, k, v, block_mask=block_mask)
expected = flex_attention(q, k.nan_to_num(), v.nan_to_num(), block_mask=block_mask)
print("output with NaN only in a hidden key:", out[0, 0, :, 0], " without it:", expected[0, 0, :, 0])
assert torch.allclose(out, expected), "a hidden key's NaN reached the output"
