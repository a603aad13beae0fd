"""liger-kernel's neighbourhood attention rounds its scaled scores to float16 before the softmax.

Peer: liger-kernel 0.8.5, `liger_fused_neighborhood_attention`, checked under triton 3.6.0's interpreter on the CPU.
Its forward writes q k^T * scale into a `qk_scores` tensor of the inputs' dtype and runs the softmax on it: in
float16 a score of 60 is kept to a step of 2^-5 (e^(2^-6) in its weight), and a score past 65504 is inf (the row NaN).
SDPA and FlashAttention keep the scores in float32. The documentation says nothing of it. Status: new.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
from liger_kernel.transformers.functional import liger_fused_neighborhood_attention

g = torch.Generator().manual_seed(0)
q, k, v = ((torch.randn(1, 1, 32, 16, generator=g) * s).half() for s in (4.0, 4.0, 1.0))  # scores of order 60
exact = torch.softmax(q.double() @ k.double().transpose(-1, -2), dim=-1) @ v.double()  # of the float16 inputs
liger = liger_fused_neighborhood_attention(q, k, v, kernel_size=65, scale=1.0)  # every key in the neighbourhood
sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0)
liger_error, sdpa_error = ((x.double() - exact).abs().max().item() for x in (liger, sdpa))
print(f"max |error| of float16 attention: liger {liger_error:.4f}, SDPA {sdpa_error:.4f}")
assert liger_error < 4 * sdpa_error, "within a few float16 roundings of the output, as SDPA"
