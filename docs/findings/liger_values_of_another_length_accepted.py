"""liger-kernel's neighbourhood attention accepts values of another length than its keys and ignores the extra ones.

Peer: liger-kernel 0.8.5, `liger_fused_neighborhood_attention`, checked under Triton's interpreter on the CPU. Each
key needs its value; with k of 1 key and v of 2 values the call returns an output instead of refusing the shapes
(the kernel reads values by the keys' length). Status: new.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
from liger_kernel.transformers.functional import liger_fused_neighborhood_attention

q, k, v = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16), torch.randn(1, 1, 2, 16)
try:
    out = liger_fused_neighborhood_attention(q, k, v, kernel_size=3)
except (ValueError, RuntimeError, AssertionError) as error:
    out = error
print("1 key, 2 values:", out if isinstance(out, Exception) else f"accepted, output {tuple(out.shape)}")
assert isinstance(out, Exception), "one value per key: a v of another length is refused"
