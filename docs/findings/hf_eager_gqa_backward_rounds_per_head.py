"""transformers' eager attention with grouped kv heads rounds each query head's dK and dV to bfloat16 before summing
the group: a gradient of a bfloat16 model errs by the roundings of every head's part, not by one rounding of the sum.

Peer: transformers (checked: 5.25.0, torch 2.13.0), llama's eager_attention_forward (gemma2's does the same).
`repeat_kv` expands k and v to every head of the group; autograd sums the expanded heads' gradients, each already a
bfloat16 result of its own matmul (torch's CPU flash backward does the same: properties/test_gradients.py). Here
every score is 0, so each weight is 1/256 exactly and dV is (1/256) x the sum of d_out over the group's queries and
heads: with one rounding it is that sum rounded once. Status: new. Needs only transformers, torch and NumPy.
"""
from types import SimpleNamespace

import torch
from transformers.models.llama.modeling_llama import eager_attention_forward

torch.manual_seed(0)
q = torch.zeros(1, 8, 256, 64, dtype=torch.bfloat16)  # every score 0: uniform weights, exact in bfloat16
k, v = (torch.randn(1, 1, 256, 64).bfloat16().requires_grad_() for _ in range(2))
d_out = torch.randn(1, 256, 8, 64).bfloat16()
out, _ = eager_attention_forward(SimpleNamespace(num_key_value_groups=8, training=False), q, k, v, None, scaling=0.125)
out.backward(d_out)
per_head = (d_out.float().sum(dim=1) / 256).bfloat16()  # each head's dV row, rounded to bfloat16
print("dV is the sum of the heads' rounded parts:", torch.equal(v.grad[0, 0, 0], per_head[0].float().sum(0).bfloat16()))
once = (d_out.double().sum(dim=(1, 2)) / 256).bfloat16()[0]  # the group's sum, rounded once
print(f"columns off the once-rounded sum: {int((v.grad[0, 0, 0] != once).sum())} of 64")
assert torch.equal(v.grad[0, 0, 0], once), "a gradient rounded once"
