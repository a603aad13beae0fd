"""The oracle's backward pass, and complex-step derivatives to check it.

Seed 002 § 3.1.1 (可微性: 保持端到端的梯度传播). With P = softmax(S), O = P V:
  dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dO * O)),
(with dropout, W = P * keep / (1 - p) replaces P in O and dV, and dP is multiplied by keep / (1 - p)),
  dQ = scale dS K,  dK = scale dS^T Q,
summed over the query heads of a group for dK, dV.
Beyond the seeds (specs.score_mods): ALiBi and a bias add constants to the scores and a window hides keys as a
mask does, so dS is unchanged; a sink joins the normaliser and P excludes it, so dS = P * (dP - rowsum(dO * O))
still holds; softcap multiplies dS by its derivative 1 - tanh^2(scale q.k / softcap) before dQ and dK.
The bias is added after the cap, so dBias is dS before that derivative, summed over the axes the bias is broadcast
along; a sink s_h enters only through each row's normaliser, so dO_i/ds_h = -pi_i O_i with pi_i = exp(s_h - LSE_i)
its weight, and dSinks_h = -sum over batch and rows of pi_i rowsum(dO * O)_i (a sink of +inf: pi_i = 1 and
O_i = 0, the derivative's limit; of -inf: pi_i = 0).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specs.reference import AttentionResult, attention, matmul, repeat_kv


def drawn_cotangent(out_shape: tuple[int, ...], seed: int, dtype) -> np.ndarray:
    """The d_out a gradient property draws for an output of `out_shape`: standard normal from `seed`, in `dtype`
    (what a failure records as its cotangent seed, so its figure draws the same)."""
    return np.random.default_rng(seed).standard_normal(out_shape).astype(dtype)


def sum_groups(x: np.ndarray, heads_kv: int) -> np.ndarray:
    b, h, n, d = x.shape
    return x.reshape(b, heads_kv, h // heads_kv, n, d).sum(axis=2)


def attention_backward(q, k, v, d_out, *, model: Callable[..., AttentionResult] = attention,
                       **kwargs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dQ, dK, dV of <d_out, attention(q, k, v, **kwargs)> in the inputs' precision (dropout through
    kwargs keep= and dropout_p=, as specs.reference.attention takes them); `model`: the forward whose weights and
    output the backward's formulas take (a documented deviation's, specs.deviations; the oracle's by default)."""
    result = model(q, k, v, **kwargs)
    heads_kv = k.shape[1]
    group = q.shape[1] // heads_kv
    k_all, v_all = repeat_kv(k, group), repeat_kv(v, group)
    # matmul: np.matmul's bits, float16 products too (the naive float16 baseline of the gradient rule)
    d_v = sum_groups(matmul(result.applied_weights.swapaxes(-1, -2), d_out), heads_kv)
    d_s = score_gradient(result, v_all, d_out, kwargs)
    if result.mods.softcap > 0:
        cap = result.scores.dtype.type(result.mods.softcap)
        capped = np.tanh(matmul(q, k_all.swapaxes(-1, -2)) * result.scores.dtype.type(result.scale) / cap)
        d_s = d_s * (1 - capped * capped)
    d_q = result.scale * matmul(d_s, k_all)
    d_k = sum_groups(result.scale * matmul(d_s.swapaxes(-1, -2), q), heads_kv)
    return d_q, d_k, d_v


def score_gradient(result, v_all: np.ndarray, d_out: np.ndarray, kwargs: dict) -> np.ndarray:
    """dL/dS of the scores after the cap, where ALiBi and the bias are added: P * (dP - rowsum(dO * O))."""
    d_p = matmul(d_out, v_all.swapaxes(-1, -2))
    if result.dropped is not None:  # W = P * keep / (1 - p): dL/dP = dL/dW * keep / (1 - p)
        d_p = d_p * np.where(kwargs["keep"], 1 / (1 - kwargs["dropout_p"]), 0.0)
    d_s = result.weights * (d_p - np.sum(d_out * result.out, axis=-1, keepdims=True))
    if result.constant_rows is not None:  # weights a deviation's model holds constant: no path to the scores
        d_s = np.where(result.constant_rows[..., None], d_s.dtype.type(0), d_s)
    return d_s


def reduce_to_shape(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """x summed over the axes an array of `shape` is broadcast along to reach x's shape (leading ones, and the
    size-1 ones): the gradient of a broadcast array."""
    x = x.sum(axis=tuple(range(x.ndim - len(shape)))) if x.ndim > len(shape) else x
    return x.sum(axis=tuple(axis for axis, size in enumerate(shape) if size == 1 and x.shape[axis] != 1),
                 keepdims=True)


def score_mod_gradients(q, k, v, d_out, *, model: Callable[..., AttentionResult] = attention,
                        **kwargs) -> dict[str, np.ndarray]:
    """The gradients of <d_out, attention(q, k, v, **kwargs)> with respect to the modification arrays kwargs holds:
    "bias" in the bias's own shape (summed over the axes it is broadcast along), "sinks" (heads,); in the inputs'
    precision; `model` as attention_backward's."""
    result = model(q, k, v, **kwargs)
    grads = {}
    if kwargs.get("bias") is not None:
        v_all = repeat_kv(v, q.shape[1] // k.shape[1])
        grads["bias"] = reduce_to_shape(score_gradient(result, v_all, d_out, kwargs),
                                        np.shape(kwargs["bias"]))
    if kwargs.get("sinks") is not None:
        sinks = result.mods.sinks.astype(result.lse.dtype)
        grads["sinks"] = -(sink_weights(sinks, result.lse) * np.sum(d_out * result.out, axis=-1)).sum(axis=(0, 2))
    return grads


def sink_weights(sinks: np.ndarray, lse: np.ndarray) -> np.ndarray:
    """Each row's sink weight pi_i = exp(s_h - LSE_i), (batch, heads, n_q), for sinks (heads,) and the LSE
    (batch, heads, n_q): a finite sink makes its rows' LSE finite; a sink of +inf takes every weight (pi_i = 1,
    the limit, where LSE_i is +inf too), one of -inf none (pi_i = 0, also where LSE_i is -inf)."""
    sink = sinks[None, :, None]
    with np.errstate(invalid="ignore"):  # inf - inf, where the limit replaces it
        return np.where(np.isinf(sink), (sink > 0).astype(lse.dtype), np.exp(sink - lse))


def complex_step_derivative(q, k, v, directions, *, step: float = 1e-30, scale: float | None = None,
                            mask: np.ndarray | None = None) -> np.ndarray:
    """d/dt attention(q + t E_q, k + t E_k, v + t E_v) at t = 0, as Im f(x + i h E) / h.

    No subtraction happens between nearby numbers, so the derivative is exact to
    rounding for any tiny step. The row maximum is shifted off the real part only.
    """
    e_q, e_k, e_v = directions
    group = q.shape[1] // k.shape[1]
    qc, kc, vc = q + 1j * step * e_q, k + 1j * step * e_k, v + 1j * step * e_v
    s = attention(q, k, v, scale=scale, mask=mask).scale
    scores = (qc @ repeat_kv(kc, group).swapaxes(-1, -2)) * s
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    scores = scores - scores.real.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return (weights @ repeat_kv(vc, group)).imag / step
