"""flax.linen.dot_product_attention lets a NaN in a key or value that no query may see reach every query's output.

Peer: flax (checked: 0.12.8), flax's own code. Masked keys get weight 0, but 0 * NaN = NaN in the weighted sum of
the values: padding that holds garbage makes every row NaN. Status: new for flax (torch's SDPA: pytorch #101967).
Needs only flax and NumPy.
"""
import numpy as np
from flax import linen

rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 3, 1, 4)).astype(np.float32) for _ in range(3))  # (batch, seq, heads, dim)
k[0, 2], v[0, 2] = np.nan, np.nan  # key 2: padding nobody may see
mask = np.ones((1, 1, 3, 3), bool)
mask[..., 2] = False
out = np.asarray(linen.dot_product_attention(q, k, v, mask=mask))
clean_k, clean_v = np.where(np.isnan(k), 0, k), np.where(np.isnan(v), 0, v)
expected = np.asarray(linen.dot_product_attention(q, clean_k, clean_v, mask=mask))
print("output with NaN only in a hidden key:", out[0, :, 0, 0], " without it:", expected[0, :, 0, 0])
assert np.allclose(out, expected), "a hidden key's NaN reached the output"
