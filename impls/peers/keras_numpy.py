"""keras.ops.dot_product_attention on Keras 3's NumPy backend: Keras' own port of the operation
(keras.src.backend.numpy.nn), on NumPy arrays; its jax and torch backends call jax.nn and SDPA, which are records
already.

Keras' documented semantics: q (batch, n_q, heads, d), k and v (batch, n_k, heads, d) (the protocol's layout with
heads and positions swapped); `scale` None means 1/sqrt(d); `mask` True = may attend and `bias` added to the scaled
scores, broadcast to (batch, heads, n_q, n_k); `is_causal` a lower-triangular mask over (n_q, n_k), top-left; v the
shape of k; GQA where heads is a multiple of heads_kv (its documentation: "grouped query attention (GQA) is
performed if N is a multiple of K"). Its soft cap is "only supported in JAX TPU backend" (the public op refuses it
elsewhere), so the record has none. Keras picks its backend when first imported: the record sets KERAS_BACKEND=numpy
unless the environment chose already (tox -e peers sets it). Keras promotes an integer bias and propagates a NaN
one, which the protocol refuses: the adapter refuses them by the protocol's rule
(specs.score_mods.check_bias_values).
"""

from __future__ import annotations

import os

import numpy as np

from impls.peers.availability import installed
from protocol.registry import attention_impl
from specs.score_mods import check_bias_values


@attention_impl(name="keras-numpy", backend="peers", dtypes=("float64", "float32"), causal_alignment="top_left",
                value_dim=False, probe=installed("keras"))
def keras_numpy_attention(q, k, v, *, scale=None, causal=False, mask=None, bias=None):
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    import keras

    if bias is not None:
        check_bias_values(bias)
    q, k, v = (np.swapaxes(x, 1, 2) for x in (q, k, v))
    out = keras.ops.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=scale, is_causal=causal)
    return np.swapaxes(np.asarray(out), 1, 2)
