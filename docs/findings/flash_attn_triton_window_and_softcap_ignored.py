"""flash-attn's Triton backend takes window_size and softcap and computes attention without them.

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under
triton 3.6.0's interpreter on the CPU (its ops are registered for CUDA only: the script registers the same functions
for the CPU). flash_attn_func documents a sliding window and a soft cap; the backend's fwd receives
window_size_left, window_size_right and softcap and passes none of them to its kernels, so a call with a window of
one key, or a cap of 1, returns plain attention, silently. Status: new (the backend's README lists neither feature).
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
from flash_attn import flash_attn_func, flash_attn_interface

for op in (flash_attn_interface._flash_attn_forward, flash_attn_interface._flash_attn_backward):
    op.register_kernel("cpu")(op._init_fn)
q, k, v = torch.randn(3, 1, 16, 2, 32, generator=torch.Generator().manual_seed(0))
plain = flash_attn_func(q, k, v)
windowed, capped = flash_attn_func(q, k, v, window_size=(0, 0)), flash_attn_func(q, k, v, softcap=1.0)
print("window (0, 0) changes:", (windowed - plain).abs().max().item(), " softcap 1 changes:",
      (capped - plain).abs().max().item())
assert torch.allclose(windowed, v, atol=1e-5), "a window of (0, 0) leaves each query its own key: out = v"
