"""jax.nn.dot_product_attention (XLA) and flax linen's dot_product_attention, on NumPy inputs.

jax.nn's documented semantics: q (batch, n_q, heads, d), k and v (batch, n_k, heads_kv, d) (the protocol's layout
with heads and positions swapped), heads a multiple of heads_kv (GQA), d_v equal to d; `scale` None means 1/sqrt(d);
`mask` True = may attend and `bias` added to the scaled scores, each broadcast to (batch, heads, n_q, n_k);
`is_causal` and `local_window_size=(left, right)` both aligned top-left (query i sees keys i - left .. i + right; the
protocol's unbounded side, a negative one, becomes n_q + n_k, past every distance between a query and a key);
`return_residual=True` gives the LSE as (batch, n_q, heads), natural log. Run op by op, XLA compiles each operation
for each new shape (compiles_per_shape: the shapes are drawn from a fixed set). Its backward is jax.vjp of the same
call. Float64 needs `jax_enable_x64`, set before the first call. Its varlen face (protocol.faces) maps the packed
sequences to `query_seq_lengths` and `key_value_seq_lengths`: each sequence's rows (and its first seqused_k keys)
padded with zeros to (sequences, longest, heads, d), the padding masked by those lengths, the output gathered back to
the packed rows (rows in no sequence 0, their LSE -inf); causal and the window are then per sequence, top-left.

Flax linen's dot_product_attention (flax.linen.attention) is flax's own code, not a call into jax.nn: q (batch, n,
heads, d) with the same number of heads for q, k, v; it scales by 1/sqrt(d) itself (no scale keyword) and has no
causal keyword: models pass its `make_attention_mask` of the positions under `>=` (top-left), as the adapter does.
Keras' jax backend and flax nnx call jax.nn and are not records of their own. Both promote an integer bias and
propagate a NaN one, which the protocol refuses: the adapters refuse them by the protocol's rule
(specs.score_mods.check_bias_values).
"""

from __future__ import annotations

import numpy as np

from impls.peers.availability import installed
from impls.score_mod_checks import checked_mods
from protocol.registry import attention_impl
from specs.score_mods import check_bias_values
from specs.varlen import Packing, packing_of


def _jax():
    import jax

    jax.config.update("jax_enable_x64", True)  # float64 inputs stay float64 (jax's default makes them float32)
    return jax


def _bthd(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, 1, 2)


def _window(window_size, n_q: int, n_k: int):
    """local_window_size for the protocol's window: an unbounded (negative) side becomes n_q + n_k, past every
    distance between a query and a key (top-left, query i and key j are i - j apart: up to n_q - 1 on the left and
    n_k - 1 on the right)."""
    if window_size is None:
        return None
    left, right = window_size
    return (left if left >= 0 else n_q + n_k, right if right >= 0 else n_q + n_k)


def _jax_nn_call(q, k, v, *, scale=None, causal=False, mask=None, bias=None, window_size=None, residual=False):
    """jax.nn.dot_product_attention on protocol-layout arrays (jax arrays in, jax arrays out: vjp traces it)."""
    jax = _jax()
    jnp = jax.numpy
    return jax.nn.dot_product_attention(
        jnp.swapaxes(q, 1, 2), jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2), bias=bias,
        mask=None if mask is None else jnp.asarray(mask), scale=scale, is_causal=causal,
        local_window_size=_window(window_size, q.shape[2], k.shape[2]), implementation="xla",
        return_residual=residual)


@attention_impl(name="jax-nn", backend="peers", dtypes=("float64", "float32"), causal_alignment="top_left",
                value_dim=False, lse=True, compiles_per_shape=True, faces=("dense", "varlen"),
                probe=installed("jax"))
def jax_dot_product_attention(q, k, v, *, scale=None, causal=False, mask=None, bias=None, window_size=None,
                              return_lse=False):
    jnp = _jax().numpy
    checked_mods(q, k, v, window_size=window_size)  # the adapter turns an unbounded side into n_q + n_k
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


def _used(places: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(packed row, sequence, position in it) of every row a sequence uses (Packing.places)."""
    sequence, position = places
    rows = np.flatnonzero(sequence >= 0)
    return rows, sequence[rows], position[rows]


def _jax_varlen_call(q, k, v, packing: Packing, *, scale=None, causal=False, window_size=None, residual=False):
    """Packed jax arrays -> the packed output (and the LSE, (heads, total_q)): each sequence padded with zeros to
    (sequences, longest, heads, d) and masked by jax.nn's `query_seq_lengths` / `key_value_seq_lengths`."""
    jnp = _jax().numpy
    lengths_q, lengths_k = np.diff(packing.cu_q), packing.used_k
    rows_q, seq_q, pos_q = _used(packing.places(q.shape[0]))
    rows_k, seq_k, pos_k = _used(packing.places(k.shape[0], keys=True))
    longest_q, longest_k = max(int(lengths_q.max(initial=0)), 1), max(int(lengths_k.max(initial=0)), 1)

    def padded(x, rows, seq, pos, longest):
        return jnp.zeros((packing.batch, longest) + x.shape[1:], x.dtype).at[seq, pos].set(x[rows])

    result = _jax().nn.dot_product_attention(
        padded(q, rows_q, seq_q, pos_q, longest_q), padded(k, rows_k, seq_k, pos_k, longest_k),
        padded(v, rows_k, seq_k, pos_k, longest_k), scale=scale, is_causal=causal,
        query_seq_lengths=jnp.asarray(lengths_q, jnp.int32), key_value_seq_lengths=jnp.asarray(lengths_k, jnp.int32),
        local_window_size=_window(window_size, longest_q, longest_k), implementation="xla", return_residual=residual)
    out, lse = result if residual else (result, None)
    packed = jnp.zeros((q.shape[0],) + out.shape[2:], out.dtype).at[rows_q].set(out[seq_q, pos_q])
    if not residual:
        return packed
    packed_lse = jnp.full((q.shape[0], lse.shape[2]), -jnp.inf, lse.dtype).at[rows_q].set(lse[seq_q, pos_q])
    return packed, packed_lse.T


def jax_nn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, scale=None, causal=False,
                  window_size=None, seqused_k=None, return_lse=False):
    """The varlen face (protocol.faces) through jax.nn's sequence lengths."""
    jnp = _jax().numpy
    packing = packing_of(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
    checked_mods(q[None].swapaxes(1, 2), k[None].swapaxes(1, 2), v[None].swapaxes(1, 2), window_size=window_size)
    result = _jax_varlen_call(*(jnp.asarray(x) for x in (q, k, v)), packing, scale=scale, causal=causal,
                              window_size=window_size, residual=return_lse)
    return tuple(np.asarray(x) for x in result) if return_lse else np.asarray(result)


def _jax_nn_varlen_backward(q, k, v, d_out, *, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale=None,
                            causal=False, window_size=None, seqused_k=None):
    """dQ, dK, dV of the packed call through jax.vjp (rows no sequence uses get exactly 0: they are not read)."""
    jax = _jax()
    packing = packing_of(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)

    def forward(q_, k_, v_):
        return _jax_varlen_call(q_, k_, v_, packing, scale=scale, causal=causal, window_size=window_size)

    _, pullback = jax.vjp(forward, *(jax.numpy.asarray(x) for x in (q, k, v)))
    return tuple(np.asarray(g) for g in pullback(jax.numpy.asarray(d_out)))


jax_nn_varlen.attention_backward = _jax_nn_varlen_backward
jax_dot_product_attention.attention_varlen = jax_nn_varlen


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
    return np.swapaxes(np.asarray(out), -3, -2)  # [batch..., q, heads, d]: the batch axes a bias adds stay in front
