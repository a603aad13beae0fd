"""flash-attn's Triton backend: a kv-cache sequence with no key gives NaN, not 0.

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under
triton 3.6.0's interpreter on the CPU. flash_attn_with_kvcache with cache_seqlens 0 and no new keys: the query sees
no key, and flash-attn's kernels give such a row the output 0 (as its dense and varlen paths do here). The backend's
decode kernel divides the row's accumulated values by its sum of weights, which is 0: NaN. Status: new.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
from flash_attn import flash_attn_with_kvcache

q, cache = torch.randn(1, 1, 1, 16), torch.randn(1, 8, 1, 16)
out = flash_attn_with_kvcache(q, cache, cache, cache_seqlens=torch.tensor([0], dtype=torch.int32))
print("a query that sees no key:", out[0, 0, 0, :3].tolist())
assert torch.equal(out, torch.zeros_like(out)), "no key: output 0"
