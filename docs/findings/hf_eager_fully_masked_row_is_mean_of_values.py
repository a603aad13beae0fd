"""transformers' eager attention gives a query that sees no key the mean of all the values in float32 and
bfloat16 models, and NaN in float64 models or when a -inf bias hides the keys.

Peer: transformers (checked: 5.25.0, torch 2.13.0), models.llama.modeling_llama.eager_attention_forward with the
additive mask masking_utils.eager_mask writes (0 where visible, torch.finfo(dtype).min elsewhere). A row whose every
key is masked gets uniform weights over keys it was told not to see; in float64 the mask's finfo(float64).min
becomes -inf in the float32 softmax and the row is 0/0 = NaN. Rows with no key arise in every left-padded batch and
in a prefill longer than its keys. torch's SDPA (its CPU kernels) and flex_attention return 0. Status: new. Needs
only transformers, torch and NumPy.
"""
from types import SimpleNamespace

import numpy as np
import torch
from transformers.models.llama.modeling_llama import eager_attention_forward

rng = np.random.default_rng(0)
module = SimpleNamespace(num_key_value_groups=1, training=False)
rows = []
for dtype in (torch.float32, torch.float64):
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 1, 3, 4))).to(dtype) for _ in range(3))
    mask = torch.zeros(1, 1, 3, 3, dtype=dtype)
    mask[..., 1, :] = torch.finfo(dtype).min  # query 1 may attend to no key, as eager_mask writes it
    out, _ = eager_attention_forward(module, q, k, v, mask, scaling=0.5)
    print(dtype, "row with no key:", out[0, 1, 0].tolist(), " mean of v:", v[0, 0].mean(0).tolist())
    rows.append(out[0, 1])
assert all(torch.all(row == 0) for row in rows), "a row that sees no key should give 0"
