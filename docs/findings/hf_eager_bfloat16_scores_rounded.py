"""transformers' eager attention in a bfloat16 model rounds the scores to bfloat16 before the softmax: its output is
tens of times less accurate than the same bfloat16 inputs through torch's SDPA.

Peer: transformers (checked: 5.25.0, torch 2.13.0), llama's eager_attention_forward (gemma2's and gpt-oss' do the
same). `torch.matmul(query, key.T) * scaling` is computed and stored in bfloat16, so a score near 100 carries a
rounding step of 0.5, e^0.5 in its weight; the softmax is float32 but too late, and the weights are cast back to
bfloat16 before P V. SDPA and FlashAttention keep the scores in float32. The documentation says nothing of it.
Status: new. Needs only transformers, torch and NumPy.
"""
from types import SimpleNamespace

import numpy as np
import torch
from transformers.models.llama.modeling_llama import eager_attention_forward

rng = np.random.default_rng(0)
q, k = (torch.from_numpy(2 * rng.standard_normal((1, 1, 64, 64))).bfloat16() for _ in range(2))
v = torch.from_numpy(rng.standard_normal((1, 1, 64, 64))).bfloat16()
module = SimpleNamespace(num_key_value_groups=1, training=False)
eager, _ = eager_attention_forward(module, q, k, v, None, scaling=1.0)
exact = torch.softmax(q.double() @ k.double().transpose(-1, -2), dim=-1) @ v.double()
sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0)
eager_error, sdpa_error = ((x.double() - exact).abs().max().item() for x in (eager.transpose(1, 2), sdpa))
print(f"max |error| of bfloat16 attention: eager {eager_error:.3f}, SDPA {sdpa_error:.4f}")
assert eager_error < 2 ** -7 * v.abs().max().item(), "beyond a few bfloat16 roundings of the output"
