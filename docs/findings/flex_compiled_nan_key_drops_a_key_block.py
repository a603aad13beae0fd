"""torch.compile(flex_attention) on the CPU, with a block mask, gives a query past the first 128 rows a finite output
that ignores the first 128 keys when one of them holds NaN: the NaN becomes a silently wrong number.

Peer: torch (checked: 2.13.0), flex_attention under torch.compile, inductor's fused C++ kernel for the CPU, with a
block mask whose mask_mod reads a tensor (every key visible). With key 0 NaN and 129 queries, rows 0-127 are NaN (as
the specification and flex's eager path say), but row 128, in the second block of queries, comes back as the
attention over key 128 alone: the whole first block of keys is dropped. Without the block mask every row is NaN;
with one NaN score per row the kernel may return zeros (flex_compiled_nan_key_gives_zero_row.py). Status: new.
"""
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

flex = torch.compile(flex_attention, dynamic=False)
torch.manual_seed(0)
q, k, v = (torch.randn(1, 1, 129, 16) for _ in range(3))
k[0, 0, 0] = float("nan")  # every row sees key 0
visible = torch.ones(1, 1, 129, 129, dtype=torch.bool)
blocks = create_block_mask(lambda b, h, i, j: visible[b, h, i, j], 1, 1, 129, 129, device="cpu")
out = flex(q, k, v, block_mask=blocks)
alone = v[0, 0, 128]  # the attention over key 128 alone
print("rows NaN:", int(out[0, 0].isnan().all(-1).sum()), "of 129; row 128 is key 128's value alone:",
      torch.allclose(out[0, 0, 128], alone, atol=1e-5))
assert out.isnan().all(), "a NaN every row sees should reach every row"
