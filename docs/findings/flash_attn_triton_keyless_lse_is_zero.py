"""flash-attn's Triton backend gives a row with no visible key the log-sum-exp 0 (the empty sum's log is -inf).

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under
triton 3.6.0's interpreter on the CPU. Under causal with more queries than keys, flash-attn aligns the mask
bottom-right: the first n_q - n_k rows see no key, their output is 0, and their softmax_lse is the log of an empty
sum. The backend's early exit for a block with no visible key stores 0 (flash-attn's CUDA kernels store +inf), so
an LSE merge (split-k, ring attention) gives such a row the weight of a row whose scores sum to 1. Status: new.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
from flash_attn import flash_attn_func, flash_attn_interface

flash_attn_interface._flash_attn_forward.register_kernel("cpu")(flash_attn_interface._flash_attn_forward._init_fn)
q, k = torch.randn(1, 2, 1, 16), torch.randn(1, 1, 1, 16)  # 2 queries, 1 key: query 0 sees no key
out, lse, _ = flash_attn_func(q, k, k, causal=True, return_attn_probs=True)
print("row 0: output", out[0, 0, 0, :2].tolist(), "lse", lse[0, 0, 0].item())
assert lse[0, 0, 0] == -torch.inf, "the log of an empty sum"
