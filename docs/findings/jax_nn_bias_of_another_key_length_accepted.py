"""jax.nn.dot_product_attention accepts a bias over more keys than k has when k has one key: it broadcasts the key and
returns attention over keys that do not exist.

Peer: jax (checked: 0.10.2), implementation="xla". The documentation asks for a bias "4D and broadcastable to
(BNTS|NTS)", S the keys' length; a bias over S + 1 keys for S = 1 is not, yet it is taken: the single key's logit is
broadcast to two keys, and the output is computed as if the value were there twice. A shape mismatch passes
silently. Status: new. Needs only jax and NumPy.
"""
import jax
import numpy as np

rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 1, 1, 4)) for _ in range(3))  # (batch, seq, heads, dim): one key
bias = np.array([0.0, 5.0]).reshape(1, 1, 1, 2)  # a bias over two keys
try:
    out = jax.nn.dot_product_attention(q, k, v, bias=bias)
    print("accepted: output", np.asarray(out).shape, "from a bias over 2 keys for k with 1 key")
except (ValueError, TypeError) as error:
    out = None
    print("refused:", error)
assert out is None, "a bias over another number of keys than k should be refused"
