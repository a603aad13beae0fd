"""jax.nn.dot_product_attention (XLA) and flax linen's dot_product_attention, on NumPy inputs.

jax.nn's documented semantics: q (batch, n_q, heads, d), k and v (batch, n_k, heads_kv, d) (the protocol's layout
with heads and positions swapped), heads a multiple of heads_kv (GQA), d_v equal to d; `scale` None means 1/sqrt(d);
`mask` True = may attend and `bias` added to the scaled scores, each broadcast to (batch, heads, n_q, n_k);
`is_causal` and `local_window_size=(left, right)` both aligned top-left (query i sees keys i - left .. i + right;
the protocol's unbounded side, a negative one, becomes n_k); `return_residual=True` gives the LSE as (batch, n_q,
heads), natural log. Run op by op, XLA compiles each operation for each new shape (compiles_per_shape: the shapes
are drawn from a fixed set). Its backward is jax.vjp of the same call. Float64 needs `jax_enable_x64`, set before
the first call. Flax linen's dot_product_attention (flax.linen.attention) is flax's own code, not a call into
jax.nn: q (batch, n, heads, d) with the same number of heads for q, k, v; it scales by 1/sqrt(d) itself (no scale
keyword) and has no causal keyword: models pass its `make_attention_mask` of the positions under `>=` (top-left), as
the adapter does. Keras' jax backend and flax nnx call jax.nn and are not records of their own. Both promote an
integer bias and propagate a NaN one, which the protocol refuses: the adapters refuse them by the protocol's rule
(specs.score_mods.check_bias_values).
"""

from __future__ import annotations

import numpy as np

from impls.peers.availability import installed
from impls.score_mod_checks import checked_mods
from protocol.registry import attention_impl
from specs.score_mods import check_bias_values


def _jax():
    import jax

    jax.config.update("jax_enable_x64", True)  # float64 inputs stay float64 (jax's default makes them float32)
    return jax


def _bthd(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, 1, 2)


def _window(window_size, n_k: int):
    if window_size is None:
        return None
    left, right = window_size
    return (left if left >= 0 else n_k, right if right >= 0 else n_k)


def _jax_nn_call(q, k, v, *, scale=None, causal=False, mask=None, bias=None, window_size=None, residual=False):
    """jax.nn.dot_product_attention on protocol-layout arrays (jax arrays in, jax arrays out: vjp traces it)."""
    jax = _jax()
    jnp = jax.numpy
    return jax.nn.dot_product_attention(
        jnp.swapaxes(q, 1, 2), jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2), bias=bias,
        mask=None if mask is None else jnp.asarray(mask), scale=scale, is_causal=causal,
        local_window_size=_window(window_size, k.shape[2]), implementation="xla", return_residual=residual)


@attention_impl(name="jax-nn", backend="peers", dtypes=("float64", "float32"), causal_alignment="top_left",
                value_dim=False, lse=True, compiles_per_shape=True, probe=installed("jax"))
def jax_dot_product_attention(q, k, v, *, scale=None, causal=False, mask=None, bias=None, window_size=None,
                              return_lse=False):
    jnp = _jax().numpy
    checked_mods(q, k, v, window_size=window_size)  # the adapter turns an unbounded side into n_k
    result = _jax_nn_call(*(jnp.asarray(x) for x in (q, k, v)), scale=scale, causal=causal, mask=mask,
                          bias=None if bias is None else jnp.asarray(check_bias_values(bias)), window_size=window_size,
                          residual=return_lse)
    if not return_lse:
        return np.asarray(_bthd(np.asarray(result)))
    out, lse = result
    return np.asarray(_bthd(np.asarray(out))), np.asarray(_bthd(np.asarray(lse)))


def _jax_nn_backward(q, k, v, d_out, *, scale=None, causal=False, mask=None, bias=None, window_size=None):
    """dQ, dK, dV through jax.vjp of the forward call (the bias a constant)."""
    jax = _jax()
    jnp = jax.numpy
    bias = None if bias is None else jnp.asarray(bias)

    def forward(q_, k_, v_):
        return _jax_nn_call(q_, k_, v_, scale=scale, causal=causal, mask=mask, bias=bias, window_size=window_size)

    _, pullback = jax.vjp(forward, *(jnp.asarray(x) for x in (q, k, v)))
    return tuple(np.asarray(g) for g in pullback(jnp.swapaxes(jnp.asarray(d_out), 1, 2)))


jax_dot_product_attention.attention_backward = _jax_nn_backward


@attention_impl(name="flax-linen", backend="peers", dtypes=("float64", "float32"), causal_alignment="top_left",
                gqa=False, compiles_per_shape=True, probe=installed("flax"))
def flax_linen_attention(q, k, v, *, causal=False, mask=None, bias=None):
    jnp = _jax().numpy
    from flax import linen

    if causal:
        positions_q, positions_k = jnp.arange(q.shape[2])[None], jnp.arange(k.shape[2])[None]
        causal_mask = linen.make_attention_mask(positions_q, positions_k, jnp.greater_equal)
        mask = causal_mask if mask is None else linen.combine_masks(causal_mask, jnp.asarray(mask))
    out = linen.dot_product_attention(*(jnp.asarray(_bthd(x)) for x in (q, k, v)),
                                      bias=None if bias is None else jnp.asarray(check_bias_values(bias)),
                                      mask=None if mask is None else jnp.asarray(mask))
    return np.asarray(_bthd(np.asarray(out)))
