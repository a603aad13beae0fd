"""flash-attn's Triton backend returns the varlen and kv-cache LSE in layouts other than the documented ones.

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under
triton 3.6.0's interpreter on the CPU. flash_attn_varlen_func documents softmax_lse as (nheads, total_q_seqlen) and
flash_attn_with_kvcache as (batch_size, nheads, seqlen); the backend returns (total_q, nheads) and
(batch_size * nheads, seqlen). The values are right once reshaped; code written for the CUDA build reads the wrong
rows. Status: new.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
from flash_attn import flash_attn_interface, flash_attn_varlen_func, flash_attn_with_kvcache

flash_attn_interface._flash_attn_varlen_forward.register_kernel("cpu")(
    flash_attn_interface._flash_attn_varlen_forward._init_fn)
q, k = torch.randn(5, 2, 16), torch.randn(5, 2, 16)  # one sequence of 5 queries and keys, 2 heads
lengths, cached = torch.tensor([0, 5], dtype=torch.int32), torch.tensor([5], dtype=torch.int32)
_, varlen_lse, _ = flash_attn_varlen_func(q, k, k, lengths, lengths, 5, 5, return_attn_probs=True)
_, cache_lse = flash_attn_with_kvcache(q[None, :1], k[None], k[None], cache_seqlens=cached, return_softmax_lse=True)
print("varlen lse", tuple(varlen_lse.shape), "(documented (2, 5));  kv-cache lse", tuple(cache_lse.shape),
      "(documented (1, 2, 1))")
assert varlen_lse.shape == (2, 5) and cache_lse.shape == (1, 2, 1), "the documented LSE layouts"
