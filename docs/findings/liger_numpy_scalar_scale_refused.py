"""liger-kernel's neighbourhood attention refuses a NumPy scalar as its scale under Triton's interpreter.

Peer: liger-kernel 0.8.5, `liger_fused_neighborhood_attention`, checked under triton 3.6.0's interpreter on the CPU.
A scale of `np.float32(0.25)` (what a NumPy-configured model hands over) reaches the kernel as it is, and the
interpreter raises `InterpreterError: TypeError("cannot convert 0.25 of type <class 'numpy.float32'> to tensor")`;
a Python float works. Not checked on a GPU, where Triton's JIT types the argument itself. Status: new.
"""
import os

import numpy as np
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
from liger_kernel.transformers.functional import liger_fused_neighborhood_attention

q = torch.randn(1, 1, 8, 16)
expected = liger_fused_neighborhood_attention(q, q, q, kernel_size=3, scale=0.25)
try:
    got = liger_fused_neighborhood_attention(q, q, q, kernel_size=3, scale=np.float32(0.25))
except Exception as error:  # the interpreter's refusal
    got = error
print("scale=np.float32(0.25):", got if isinstance(got, Exception) else "accepted")
assert isinstance(got, torch.Tensor) and torch.equal(got, expected), "a NumPy scalar scale equals the float's"
