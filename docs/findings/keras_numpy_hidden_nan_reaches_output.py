"""keras.ops.dot_product_attention on the NumPy backend lets a NaN in a key or value that no query may see reach every
query's output.

Peer: keras (checked: 3.15.1), KERAS_BACKEND=numpy. Masked keys get weight 0, but 0 * NaN = NaN in the weighted sum
of the values: padding that holds garbage makes every row NaN. Status: new for Keras (torch's SDPA: pytorch
#101967). Needs keras, NumPy, SciPy and jax (the NumPy backend imports both).
"""
import os

os.environ["KERAS_BACKEND"] = "numpy"
import keras
import numpy as np

rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 3, 1, 4)).astype(np.float32) for _ in range(3))  # (batch, seq, heads, dim)
k[0, 2], v[0, 2] = np.nan, np.nan  # key 2: padding nobody may see
mask = np.ones((1, 1, 3, 3), bool)
mask[..., 2] = False
out = np.asarray(keras.ops.dot_product_attention(q, k, v, mask=mask))
expected = np.asarray(keras.ops.dot_product_attention(q, np.nan_to_num(k), np.nan_to_num(v), mask=mask))
print("output with NaN only in a hidden key:", out[0, :, 0, 0], " without it:", expected[0, :, 0, 0])
assert np.allclose(out, expected), "a hidden key's NaN reached the output"
