"""liger-kernel's neighbourhood attention has only symmetric windows: a one-sided or asymmetric window (a causal
sliding window among them) cannot be asked of it.

Peer: liger-kernel 0.8.5, `liger_fused_neighborhood_attention`, checked under Triton's interpreter on the CPU (triton
3.6.0 and 3.9.0). Its window is `kernel_size` (odd): query i sees the keys within kernel_size // 2 of i on both
sides, so the protocol's window (left, right) is expressible only with left == right >= 0; the adapter refuses the
others by name (declared `rejects`). Status: documented by liger (kernel_size, dilation).
"""
import inspect
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
from liger_kernel.transformers.functional import liger_fused_neighborhood_attention

keywords = set(inspect.signature(liger_fused_neighborhood_attention).parameters)
print("liger's keywords:", sorted(keywords - {"query", "key", "value"}))
assert {"window_size"} & keywords or {"left", "right"} <= keywords, "a window of unequal sides, as (0, 4)"
