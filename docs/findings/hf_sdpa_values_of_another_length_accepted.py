"""transformers' sdpa attention accepts k with one key beside v with two values and returns an output.

Peer: transformers (checked: 5.25.0, torch 2.13.0), integrations.sdpa_attention.sdpa_attention_forward, which hands
the tensors to torch's scaled_dot_product_attention; torch 2.13's CPU flash kernel, which it dispatches to here,
does not check that v has as many rows as k has keys (torch's documentation gives both length S). A KV cache sliced
one way for keys and another for values passes silently. Status: torch's behaviour, new upstream. Needs only
transformers, torch and NumPy.
"""
from types import SimpleNamespace

import numpy as np
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

rng = np.random.default_rng(0)
q, k = (torch.from_numpy(rng.standard_normal((1, 1, 1, 4))) for _ in range(2))  # (batch, heads, seq, dim): one key
v = torch.from_numpy(rng.standard_normal((1, 1, 2, 4)))  # two values
module = SimpleNamespace(num_key_value_groups=1, training=False, is_causal=False)
try:
    out, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.5)
    print("accepted: output", tuple(out.shape), "from k with 1 key and v with 2 values")
except RuntimeError as error:
    out = None
    print("refused:", error)
assert out is None, "k and v of different lengths should be refused"
