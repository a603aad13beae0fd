"""flash-attn's Triton backward gives wrong dQ and dK when the output's gradient is laid out unlike the output: its
preprocessing reads dO at the strides of O.

Peer: flash-attn 2.8.3.post2 with its Triton backend (FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE), checked under
triton 3.6.0's interpreter on the CPU. The split backward's _bwd_preprocess computes Delta = rowsum(O * dO), which
every dQ and dK element uses, from pointers into dO offset by O's batch, head, row and column strides: dO is
never read at its own. Any dO with other strides than O (a transposed view, such as the gradient of
out.transpose(1, 2), or an O the backward copied contiguous while dO stayed a view) takes its elements from the wrong
heads and rows. dV does not use Delta and is right. ring-flash-attn meets it with a head dim of 1: its merged output
strides that size-1 dim, flash-attn copies O contiguous, dO stays a view (deviation
dq-accumulator-aliases-step-buffer re-enacts the misread). Status: new.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
from flash_attn import flash_attn_func, flash_attn_interface

for op in (flash_attn_interface._flash_attn_forward, flash_attn_interface._flash_attn_backward):
    op.register_kernel("cpu")(op._init_fn)
q, k, v = (torch.randn(1, 16, 2, 8, generator=torch.Generator().manual_seed(i)).requires_grad_() for i in range(3))
d_out = torch.randn(1, 2, 16, 8, generator=torch.Generator().manual_seed(3)).transpose(1, 2)  # (b, n, h, d), a view
grads = {}
for layout, g in (("view", d_out), ("contiguous", d_out.contiguous())):  # the same values
    grads[layout] = torch.autograd.grad(flash_attn_func(q, k, v), (q, k, v), g)
errors = [(a - b).abs().max().item() for a, b in zip(grads["view"], grads["contiguous"], strict=True)]
print("dQ, dK, dV differ by", errors)  # dQ and dK by the size of the gradient, dV not at all
assert max(errors) < 1e-5, "the gradient depends on the strides of dO, not only on its values"
