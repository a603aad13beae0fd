"""transformers' sdpa attention returns 0, not NaN, for a query whose every score is NaN (one key, holding NaN).

Peer: transformers (checked: 5.25.0, torch 2.13.0), integrations.sdpa_attention.sdpa_attention_forward, which on the
CPU dispatches to torch's flash kernel. That kernel turns a row whose scores are all NaN into a zero row, as if it
were fully masked, so a NaN in the keys is silently replaced by a plausible output instead of propagating (torch's
MATH kernel and the eager path give NaN). Status: torch's behaviour, new upstream. Needs only transformers, torch
and NumPy.
"""
from types import SimpleNamespace

import numpy as np
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

rng = np.random.default_rng(0)
q = torch.from_numpy(rng.standard_normal((1, 1, 2, 4)))  # (batch, heads, seq, dim)
k, v = (torch.from_numpy(rng.standard_normal((1, 1, 1, 4))) for _ in range(2))  # one key
k[0, 0, 0] = float("nan")  # every score is NaN
module = SimpleNamespace(num_key_value_groups=1, training=False, is_causal=False)
out, _ = sdpa_attention_forward(module, q, k, v, None, scaling=0.5)
print("output of rows that see the NaN key:", out[0, :, 0].tolist())
assert out.isnan().all(), "a NaN the row sees should reach its output"
