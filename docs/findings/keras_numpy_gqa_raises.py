"""keras.ops.dot_product_attention on the NumPy backend raises a NumPy broadcasting error for grouped-query attention,
which its documentation promises.

Peer: keras (checked: 3.15.1), KERAS_BACKEND=numpy. The documentation: "When K equals N, multi-headed attention
(MHA) is performed. Otherwise, grouped query attention (GQA) is performed if N is a multiple of K". The NumPy
backend einsums q against k without repeating k's heads, and NumPy refuses the shapes. Status: new. Needs keras,
NumPy, SciPy and jax (the NumPy backend imports both).
"""
import os

os.environ["KERAS_BACKEND"] = "numpy"
import keras
import numpy as np

rng = np.random.default_rng(0)
q = rng.standard_normal((1, 5, 4, 8)).astype(np.float32)  # (batch, seq, heads N=4, dim)
k, v = (rng.standard_normal((1, 7, 2, 8)).astype(np.float32) for _ in range(2))  # K=2 key/value heads
try:
    out = np.asarray(keras.ops.dot_product_attention(q, k, v))
    print("GQA output", out.shape)
except ValueError as error:
    out = None
    print("raised:", str(error)[:120])
assert out is not None and out.shape == q.shape, "N a multiple of K: documented as grouped-query attention"
