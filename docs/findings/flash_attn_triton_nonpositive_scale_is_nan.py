"""flash-attn's Triton backend returns NaN for every row of a non-causal call at softmax_scale=0 (uniform weights over
the keys, a value the protocol accepts), unless n_k is a multiple of its key tile of 64.

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under
triton 3.6.0's interpreter on the CPU. The forward kernel (fwd_prefill) gives the keys padding its last tile the
score -inf, then multiplies every score by the scale: -inf x 0 is NaN, the row's maximum is NaN, and so are its
weights, output and log-sum-exp. A causal call masks after scaling, and its padding is hidden from every row, so it
is right. Status: new.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
from flash_attn import flash_attn_func, flash_attn_interface

for op in (flash_attn_interface._flash_attn_forward, flash_attn_interface._flash_attn_backward):
    op.register_kernel("cpu")(op._init_fn)
nan = {}
for n_k, causal in ((63, False), (64, False), (65, False), (63, True)):
    q, k, v = (torch.randn(1, n_k, 1, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
    out = flash_attn_func(q, k, v, softmax_scale=0.0, causal=causal)
    nan[f"n_k {n_k}{' causal' if causal else ''}"] = out.isnan().any().item()
print(nan)  # NaN at 63 and 65 keys, not at 64 nor causal
assert not any(nan.values()), "at scale 0 every weight is 1 / (keys seen) and the output the mean of their values"
