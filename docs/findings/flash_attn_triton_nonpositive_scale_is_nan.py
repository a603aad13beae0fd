"""flash-attn's Triton backend returns NaN for every row of a non-causal call at softmax_scale=0 (uniform weights over
the keys), at a positive scale float32 rounds to 0 (5e-324), or below 0 (the ranking reversed), values the protocol
accepts, unless n_k is a multiple of its key tile of 64.

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under triton
3.6.0's interpreter on the CPU. The forward kernel (fwd_prefill) gives the keys padding its last tile the score -inf,
then multiplies every score by the scale, a float32 argument: -inf x 0 is NaN; -inf x (-1) is +inf, the row's maximum,
and exp(inf - inf) NaN. Either way the row's weights, output and log-sum-exp are NaN. A causal call masks after scaling,
and its padding is hidden from every row, so it is right. Status: new.
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
for scale in (0.0, 5e-324, -1.0):
    for n_k, causal in ((63, False), (64, False), (65, False), (63, True)):
        q, k, v = (torch.randn(1, n_k, 1, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
        out = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
        nan[f"scale {scale:g}, n_k {n_k}{' causal' if causal else ''}"] = out.isnan().any().item()
print(nan)  # NaN at 63 and 65 keys at every scale, not at 64 nor causal
assert not any(nan.values()), "at any scale the weights are a softmax of finite scores, the output finite"
