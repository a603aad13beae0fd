"""jax on the CPU flushes subnormal float32 results to zero, so a float32 gradient of jax.nn.dot_product_attention
whose exact value is ~1e-36 (built from products below 1.2e-38) comes back 0.

Peer: jax (checked: 0.10.2, XLA's CPU backend). XLA runs CPU kernels with flush-to-zero, which NumPy and IEEE 754 do
not: 3e-20 * 3e-20 is 9e-40 in NumPy and 0 under jit. Status: known XLA behaviour, not specific to attention; it
shows in attention only where weights are tiny (sharp scores at large scale). Needs only jax and NumPy.
"""
import jax
import jax.numpy as jnp
import numpy as np

a = np.float32(3e-20)
in_numpy = a * a
in_jax = float(jax.jit(lambda x: x * x)(jnp.float32(a)))
print(f"3e-20 * 3e-20 in float32: NumPy {in_numpy:.3e}, jax {in_jax:.3e}")
assert in_jax == in_numpy, "a subnormal float32 result was flushed to zero"
