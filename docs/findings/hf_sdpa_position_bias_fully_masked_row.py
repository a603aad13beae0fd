"""transformers' sdpa attention with a position_bias gives a query whose mask hides every key the mean of all the
values (without a bias it gives 0).

Peer: transformers (checked: 5.25.0, torch 2.13.0), integrations.sdpa_attention.sdpa_attention_forward. With a
`position_bias` (T5's relative bias goes there), create_position_bias_mask folds the boolean mask into the bias as
torch.finfo(dtype).min, not -inf, so a row with no visible key gets uniform weights over keys it was told not to
see; the same call without a bias leaves the boolean mask to SDPA, which returns 0. Status: new. Needs only
transformers, torch and NumPy.
"""
from types import SimpleNamespace

import numpy as np
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

rng = np.random.default_rng(0)
q, k, v = (torch.from_numpy(rng.standard_normal((1, 1, 3, 4))) for _ in range(3))  # (batch, heads, seq, dim)
visible = torch.ones(1, 1, 3, 3, dtype=torch.bool)
visible[..., 1, :] = False  # query 1 may attend to no key
module = SimpleNamespace(num_key_value_groups=1, training=False, is_causal=False)
plain, _ = sdpa_attention_forward(module, q, k, v, visible, scaling=0.5)
biased, _ = sdpa_attention_forward(module, q, k, v, visible, scaling=0.5, position_bias=torch.zeros(1, 1, 3, 3))
print("row with no key: without a bias", plain[0, 1, 0].tolist(), " with a zero bias", biased[0, 1, 0].tolist())
assert torch.equal(plain, biased), "a zero position_bias changed the output"
