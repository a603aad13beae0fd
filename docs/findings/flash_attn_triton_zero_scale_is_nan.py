"""flash-attn's Triton backend returns NaN for softmax_scale=0 (the scores of keys past the sequence are -inf x 0).

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under
triton 3.6.0's interpreter on the CPU. A scale of 0 makes every score 0, so each row's weights are uniform over the
keys it sees and its output the mean of their values. fwd_prefill.py masks the keys past the sequence with -inf
before it multiplies the scores by the scale (`qk_scaled = qk * SM_SCALE`): -inf x 0 is NaN, and every row whose key
block reaches past the sequence is NaN. Status: new.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
from flash_attn import flash_attn_func, flash_attn_interface

flash_attn_interface._flash_attn_forward.register_kernel("cpu")(flash_attn_interface._flash_attn_forward._init_fn)
q, k, v = torch.randn(3, 1, 5, 2, 16, generator=torch.Generator().manual_seed(0))  # 5 keys: a block reaches past
out = flash_attn_func(q, k, v, softmax_scale=0.0)
print("NaN elements:", out.isnan().sum().item(), "of", out.numel())
assert torch.allclose(out, v.mean(dim=1, keepdim=True).expand_as(out), atol=1e-6), "uniform weights: the mean"
