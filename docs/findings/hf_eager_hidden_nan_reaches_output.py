"""transformers' eager and sdpa attention let a NaN in a key or value that the mask hides reach every query's output.

Peer: transformers (checked: 5.25.0, torch 2.13.0), llama's eager_attention_forward and the `sdpa` integration
(integrations.sdpa_attention.sdpa_attention_forward), with the masks masking_utils writes. A masked key gets weight
0, but 0 * NaN = NaN in the weighted sum of the values, and a NaN score plus the mask's finfo.min stays NaN: a KV
cache slot or padding token holding garbage makes every row NaN. Status: new for the eager path; the sdpa path's is
torch's (pytorch #101967). Needs only transformers, torch and NumPy.
"""
from types import SimpleNamespace

import numpy as np
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.llama.modeling_llama import eager_attention_forward

rng = np.random.default_rng(0)
q, k, v = (torch.from_numpy(rng.standard_normal((1, 1, 3, 4))) for _ in range(3))  # (batch, heads, seq, dim)
k[0, 0, 2], v[0, 0, 2] = float("nan"), float("nan")  # key 2: padding nobody may see
visible = torch.tensor([True, True, False]).expand(1, 1, 3, 3)
additive = torch.zeros(1, 1, 3, 3, dtype=q.dtype).masked_fill(~visible, torch.finfo(q.dtype).min)
module = SimpleNamespace(num_key_value_groups=1, training=False, is_causal=False)
eager, _ = eager_attention_forward(module, q, k, v, additive, scaling=0.5)
sdpa, _ = sdpa_attention_forward(module, q, k, v, visible, scaling=0.5)
print("eager:", eager[0, :, 0, 0].tolist(), " sdpa:", sdpa[0, :, 0, 0].tolist())
assert not (eager.isnan().any() or sdpa.isnan().any()), "a hidden key's NaN reached the output"
