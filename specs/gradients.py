"""The oracle's backward pass, and complex-step derivatives to check it.

Seed 002 § 3.1.1 (可微性: 保持端到端的梯度传播). With P = softmax(S), O = P V:
  dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dO * O)),
(with dropout, W = P * keep / (1 - p) replaces P in O and dV, and dP is multiplied by keep / (1 - p)),
  dQ = scale dS K,  dK = scale dS^T Q,
summed over the query heads of a group for dK, dV.
Beyond the seeds (specs.score_mods): ALiBi and a bias add constants to the scores and a window hides keys as a
mask does, so dS is unchanged; a sink joins the normaliser and P excludes it, so dS = P * (dP - rowsum(dO * O))
still holds; softcap multiplies dS by its derivative 1 - tanh^2(scale q.k / softcap) before dQ and dK.
"""

from __future__ import annotations

import numpy as np

from specs.reference import attention, matmul, repeat_kv


def sum_groups(x: np.ndarray, heads_kv: int) -> np.ndarray:
    b, h, n, d = x.shape
    return x.reshape(b, heads_kv, h // heads_kv, n, d).sum(axis=2)


def attention_backward(q, k, v, d_out, **kwargs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dQ, dK, dV of <d_out, attention(q, k, v, **kwargs)> in the inputs' precision (dropout through
    kwargs keep= and dropout_p=, as specs.reference.attention takes them)."""
    result = attention(q, k, v, **kwargs)
    heads_kv = k.shape[1]
    group = q.shape[1] // heads_kv
    k_all, v_all = repeat_kv(k, group), repeat_kv(v, group)
    p = result.weights
    # matmul: np.matmul's bits, float16 products too (the naive float16 baseline of the gradient rule)
    d_v = sum_groups(matmul(result.applied_weights.swapaxes(-1, -2), d_out), heads_kv)
    d_p = matmul(d_out, v_all.swapaxes(-1, -2))
    if result.dropped is not None:  # W = P * keep / (1 - p): dL/dP = dL/dW * keep / (1 - p)
        d_p = d_p * np.where(kwargs["keep"], 1 / (1 - kwargs["dropout_p"]), 0.0)
    d_s = p * (d_p - np.sum(d_out * result.out, axis=-1, keepdims=True))
    if result.mods.softcap > 0:
        cap = result.scores.dtype.type(result.mods.softcap)
        capped = np.tanh(matmul(q, k_all.swapaxes(-1, -2)) * result.scores.dtype.type(result.scale) / cap)
        d_s = d_s * (1 - capped * capped)
    d_q = result.scale * matmul(d_s, k_all)
    d_k = sum_groups(result.scale * matmul(d_s.swapaxes(-1, -2), q), heads_kv)
    return d_q, d_k, d_v


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
