"""transformers' eager attention (llama family, gemma2, and every model that copies it) computes the softmax in float32
for float64 models.

Peer: transformers (checked: 5.25.0, with torch 2.13.0), models.llama.modeling_llama.eager_attention_forward, called
as LlamaAttention calls it. The line `softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)` is
commented "upcast attention to fp32" (gemma2): for a float64 model it is a downcast, and the float64 output has
float32 accuracy (~1e-7). The sdpa integration keeps float64. Status: new. Needs only transformers, torch and NumPy.
"""
from types import SimpleNamespace

import numpy as np
import torch
from transformers.models.llama.modeling_llama import eager_attention_forward

rng = np.random.default_rng(0)
q, k, v = (torch.from_numpy(rng.standard_normal((1, 1, 64, 32))) for _ in range(3))  # (batch, heads, seq, dim)
module = SimpleNamespace(num_key_value_groups=1, training=False)
out, _ = eager_attention_forward(module, q, k, v, None, scaling=32 ** -0.5)
expected = torch.softmax(q @ k.transpose(-1, -2) / 32 ** 0.5, dim=-1) @ v  # float64 throughout
error = (out.transpose(1, 2) - expected).abs().max().item()
print(f"output dtype {out.dtype}, max |error| vs float64 = {error:.2e}")
assert error < 1e-12, f"float64 inputs, float32-accurate output: max error {error:.2e}"
