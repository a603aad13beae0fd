"""flax.linen.dot_product_attention gives a query whose mask hides every key the mean of all the values, and NaN when a
-inf bias hides them.

Peer: flax (checked: 0.12.8), flax.linen.attention.dot_product_attention, flax's own code (it does not call jax.nn).
The mask is applied as the dtype's most negative finite logit, so a row with no visible key gets uniform weights
over keys it was told not to see; a bias of -inf on every key gives 0/0 = NaN. The documentation says nothing of
rows that see no key; FlashAttention, torch's SDPA and flex_attention return 0. Status: new. Needs only flax and
NumPy.
"""
import numpy as np
from flax import linen

rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 3, 1, 4)).astype(np.float32) for _ in range(3))  # (batch, seq, heads, dim)
mask = np.ones((1, 1, 3, 3), bool)
mask[..., 1, :] = False  # query 1 may attend to no key
out = np.asarray(linen.dot_product_attention(q, k, v, mask=mask))
bias = np.where(mask, 0.0, -np.inf).astype(np.float32)
out_bias = np.asarray(linen.dot_product_attention(q, k, v, bias=bias))
print("masked row:", out[0, 1, 0], " mean of v:", v[0, :, 0].mean(0), " with a -inf bias:", out_bias[0, 1, 0])
assert np.all(out[0, 1] == 0) and np.all(out_bias[0, 1] == 0), "a row that sees no key should give 0"
