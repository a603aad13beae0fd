"""keras.ops.dot_product_attention on the NumPy backend returns float32 for float64 inputs, computed in float32.

Peer: keras (checked: 3.15.1), KERAS_BACKEND=numpy (its own port, keras.src.backend.numpy.nn). The inputs are
converted to Keras' floatx (float32) and the softmax runs in float32: the output is float32 with float32 accuracy
(~1e-7) where float64 gives ~1e-16. The documentation says nothing of a precision change. Status: new. Needs keras,
NumPy, and what Keras' NumPy backend imports (SciPy, and jax for its fft).
"""
import os

os.environ["KERAS_BACKEND"] = "numpy"
import keras
import numpy as np

rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 64, 1, 32)) for _ in range(3))  # (batch, seq, heads, dim), float64
out = np.asarray(keras.ops.dot_product_attention(q, k, v))
scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(32)
weights = np.exp(scores - scores.max(-1, keepdims=True))
expected = np.einsum("bhqk,bkhd->bqhd", weights / weights.sum(-1, keepdims=True), v)
error = np.abs(out - expected).max()
print(f"float64 in, {out.dtype} out, max |error| vs float64 = {error:.2e}")
assert out.dtype == np.float64 and error < 1e-12, "float64 inputs, a float32 output of float32 accuracy"
