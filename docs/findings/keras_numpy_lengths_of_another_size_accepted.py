"""keras.ops.dot_product_attention on the NumPy backend accepts k with one key beside v with two values (or a bias over
two keys), and returns an output: the sum of the two values (the key's weight, 1, broadcast against both), not
an attention output at all.

Peer: keras (checked: 3.15.1), KERAS_BACKEND=numpy. The documentation gives key and value the same shape (B, S, K,
H) and a bias "broadcastable to (B, N, T, S)"; the NumPy backend broadcasts a key axis of length 1 instead of
refusing the mismatch, so a wrongly sliced cache passes silently. Status: new. Needs keras, NumPy, SciPy and jax.
"""
import os

os.environ["KERAS_BACKEND"] = "numpy"
import keras
import numpy as np

rng = np.random.default_rng(0)
q, k = (rng.standard_normal((1, 1, 1, 4)).astype(np.float32) for _ in range(2))  # one key
v = rng.standard_normal((1, 2, 1, 4)).astype(np.float32)  # two values
try:
    out = keras.ops.dot_product_attention(q, k, v)
    print("accepted: output", np.asarray(out).shape, "from k with 1 key and v with 2 values; the values' sum:",
          np.allclose(np.asarray(out), v.sum(axis=1, keepdims=True), atol=1e-6))
except ValueError as error:
    out = None
    print("refused:", error)
assert out is None, "k and v of different lengths should be refused"
