"""keras.ops.dot_product_attention on the NumPy backend gives a query whose mask hides every key the mean of all
the values, and NaN when a -inf bias hides them.

Peer: keras (checked: 3.15.1), KERAS_BACKEND=numpy. The mask is applied as a large finite negative logit (-0.7 x
3.4e38), so a row with no visible key gets uniform weights over keys it was told not to see; a bias of -inf on
every key gives 0/0 = NaN. The documentation says nothing of rows that see no key; FlashAttention, torch's SDPA and
flex_attention return 0. Status: new. Needs keras, NumPy, SciPy and jax (the NumPy backend imports both).
"""
import os

os.environ["KERAS_BACKEND"] = "numpy"
import keras
import numpy as np

rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 3, 1, 4)).astype(np.float32) for _ in range(3))  # (batch, seq, heads, dim)
mask = np.ones((1, 1, 3, 3), bool)
mask[..., 1, :] = False  # query 1 may attend to no key
out = np.asarray(keras.ops.dot_product_attention(q, k, v, mask=mask))
out_bias = np.asarray(keras.ops.dot_product_attention(q, k, v, bias=np.where(mask, 0, -np.inf).astype(np.float32)))
print("masked row:", out[0, 1, 0], " mean of v:", v[0, :, 0].mean(0), " with a -inf bias:", out_bias[0, 1, 0])
assert np.all(out[0, 1] == 0) and np.all(out_bias[0, 1] == 0), "a row that sees no key should give 0"
