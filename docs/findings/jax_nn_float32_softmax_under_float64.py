"""jax.nn.dot_product_attention computes the softmax in float32 when q, k, v are float64 (jax_enable_x64).

Peer: jax (checked: 0.10.2), implementation="xla". The docstring promises nothing about an internal precision and
returns float64; the source casts the logits to float32 before the softmax ("Softmax is always computed in float32",
jax/_src/nn/functions.py). The float64 result is then only as accurate as float32: errors near 1e-7 where float64
gives 1e-16. Status: not found upstream; new. Needs only jax and NumPy.
"""
import jax
import numpy as np

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 64, 1, 32)) for _ in range(3))  # (batch, seq, heads, dim), float64
out = np.asarray(jax.nn.dot_product_attention(q, k, v, implementation="xla"))
scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(32)
weights = np.exp(scores - scores.max(-1, keepdims=True))
expected = np.einsum("bhqk,bkhd->bqhd", weights / weights.sum(-1, keepdims=True), v)
error = np.abs(out - expected).max()
print(f"output dtype {out.dtype}, max |error| vs float64 = {error:.2e}")
assert error < 1e-12, f"float64 inputs, float32-accurate output: max error {error:.2e}"
