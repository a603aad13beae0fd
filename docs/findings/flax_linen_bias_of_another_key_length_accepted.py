"""flax.linen.dot_product_attention accepts a bias over more keys than k has when k has one key, and returns attention
over keys that do not exist.

Peer: flax (checked: 0.12.8), flax's own code. The documentation asks for a bias "broadcastable to [batch...,
num_heads, q_length, kv_length]"; a bias over kv_length + 1 keys for kv_length = 1 is not, yet it is taken (the
single key is broadcast to two). A shape mismatch passes silently. Status: new. Needs only flax and NumPy.
"""
import numpy as np
from flax import linen

rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 1, 1, 4)).astype(np.float32) for _ in range(3))  # one key
bias = np.array([0.0, 5.0], np.float32).reshape(1, 1, 1, 2)  # a bias over two keys
try:
    out = linen.dot_product_attention(q, k, v, bias=bias)
    print("accepted: output", np.asarray(out).shape, "from a bias over 2 keys for k with 1 key")
except (ValueError, TypeError) as error:
    out = None
    print("refused:", error)
assert out is None, "a bias over another number of keys than k should be refused"
