"""flash-attn's Triton backend takes a paged cache's block_table and never reads it: pages are read in storage order.

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under
triton 3.6.0's interpreter on the CPU. flash_attn_with_kvcache documents block_table (batch, pages): sequence b's
keys are in pages block_table[b]. The backend's fwd_kvcache accepts block_table (and cache_leftpad, num_splits),
never passes it to the decode kernel, and reads k_cache (num_blocks, page_size, ...) as (batch, seqlen, ...): with
the pages stored in reverse, the output is attention over the wrong keys. Status: new.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
from flash_attn import flash_attn_with_kvcache

g = torch.Generator().manual_seed(0)
q, k, v = torch.randn(1, 1, 2, 32, generator=g), torch.randn(1, 512, 2, 32, generator=g), torch.randn(1, 512, 2, 32)
lengths = torch.tensor([512], dtype=torch.int32)
contiguous = flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths)
pages = torch.tensor([[1, 0]], dtype=torch.int32)  # two pages of 256 keys, stored second page first
paged_k, paged_v = (x.view(2, 256, 2, 32)[[1, 0]].contiguous() for x in (k, v))
paged = flash_attn_with_kvcache(q, paged_k, paged_v, cache_seqlens=lengths, block_table=pages)
print("paged vs contiguous:", (paged - contiguous).abs().max().item())
assert torch.allclose(paged, contiguous, atol=1e-5), "the pages block_table names hold the same keys in order"
