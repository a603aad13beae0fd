"""The gradient model: the forward model carried through the backward's products (dQ, dK, dV), and the
float64 bound of a complex-step directional derivative."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specs.dtypes import finfo, numpy_dtype
from specs.gradients import attention_backward, reduce_to_shape, score_mod_gradients, sink_weights, sum_groups
from specs.memo import Memo
from specs.reference import AttentionResult, attention, repeat_kv
from specs.tolerance.model import (
    LAMBDA,
    SAFETY,
    SUPPORTED_DTYPES,
    Allowance,
    Model,
    ToleranceUndefined,
    _first_order_terms,
    _merge_magnitude,
    rounding_below_normal,
    unit_roundoff,
)

K_GRADIENT = 4.0  # FlashAttention's rule for gradients: k = 3-5 times the naive error (docs/design.md)


@dataclass(frozen=True)
class GradientOracle:
    """The float64 backward of one problem and the error allowed to each gradient."""

    grads: tuple[np.ndarray, np.ndarray, np.ndarray]  # dQ, dK, dV
    allowances: tuple[Allowance, Allowance, Allowance]
    # the modification arrays' gradients (specs.gradients.score_mod_gradients), each with its allowance:
    # "bias" and "sinks" where the problem has them
    mod_grads: dict[str, tuple[np.ndarray, Allowance]] = field(default_factory=dict)


def _backward_propagation(result: AttentionResult, q, k, v, d_out, *, u: float, gamma, relative,
                          stored: np.dtype | None = None, bias_shape: tuple[int, ...] | None = None) -> tuple:
    """First-order bounds on |error| of dQ, dK, dV, propagated through the backward's products, with their
    magnitudes; the same two for the modification arrays' gradients (dicts keyed "bias", "sinks"); and what
    storing W and dS in `stored` before their products adds below its smallest normal (keyed 0, 1, 2 as dQ, dK,
    dV, and "bias", "sinks"), where that rounding is absolute (rounding_below_normal):
      dQ: s r(dS) |K|,  dK: s r(dS)^T |Q|,  dV: r(W)^T |dO|,  dBias: r(dS) summed,  dSinks: none (it reads D)

    Each weight carries a relative error `relative` (..., n_q, 1); a length-n sum of products errs by
    gamma(n) times the sum of the magnitudes; every elementwise step by u. With W the applied weights
    (after dropout), z = W / P, D_i = sum_c dO_ic O_ic:
      dV = W^T dO            |e| <= (rel W)^T |dO| + gamma(n_q g) W^T |dO|
      dP = (dO V^T) z        |e| <= gamma(d_v) (|dO| |V|^T) z
      D                      |e| <= (gamma(d_v) + u_s) sum |dO| |O| + sum |dO| (rel + gamma(n_k)) W|V|
                             (u_s: the forward's output read back as stored, rounded to `stored`)
      dS = P (dP - D)        |e| <= (rel + 2u) P |dP - D| + P (|e_dP| + |e_D|)
      dQ = s dS K            |e| <= s (|e_dS| |K| + gamma(n_k) |dS| |K|)
      dK = s dS^T Q          |e| <= s (|e_dS|^T |Q| + gamma(n_q g) |dS|^T |Q|)   (g query heads per kv head)
      dBias = dS summed over the m entries each bias entry is broadcast to
                             |e| <= sum |e_dS| + gamma(m) sum |dS|
      dSinks_h = -sum_i pi_i D_i, pi_i = exp(sink_h - LSE_i), over batch and rows (m = batch n_q terms)
                             |e| <= sum pi_i (rel |D_i| + |e_D,i|) + gamma(m) sum pi_i |D_i|
    (softcap's derivative, at most 1 in size, multiplies dS before dQ and dK: the bounds of |dS| still hold.)
    """

    heads_kv = k.shape[1]
    group = q.shape[1] // heads_kv
    stored_u = 0.0 if stored is None else unit_roundoff(stored)
    k_all, v_all = repeat_kv(k, group), repeat_kv(v, group)
    n_q, n_k, d_v = q.shape[2], k.shape[2], v.shape[3]
    s = abs(result.scale)
    p, w = result.weights, result.applied_weights
    z = np.divide(w, p, out=np.zeros_like(p), where=p > 0)
    abs_do = np.abs(d_out)
    abs_v = np.abs(v_all)
    w_abs_v = w @ abs_v
    e_dv = (relative * w).swapaxes(-1, -2) @ abs_do + gamma(n_q * group) * (w.swapaxes(-1, -2) @ abs_do)
    d_p = (d_out @ v_all.swapaxes(-1, -2)) * z
    e_dp = gamma(d_v) * (abs_do @ abs_v.swapaxes(-1, -2)) * z
    row_dot = np.sum(d_out * result.out, axis=-1, keepdims=True)
    e_d = ((gamma(d_v) + stored_u) * np.sum(abs_do * np.abs(result.out), axis=-1, keepdims=True)
           + np.sum(abs_do * (relative + gamma(n_k)) * w_abs_v, axis=-1, keepdims=True))
    centred = np.abs(d_p - row_dot)
    if result.constant_rows is not None:  # a deviation's model: rows whose weights do not depend on the scores
        centred = np.where(result.constant_rows[..., None], 0.0, centred)
    d_s = p * centred
    e_ds = (relative + 2 * u) * d_s + p * (e_dp + e_d)
    abs_k, abs_q = np.abs(k_all), np.abs(q)
    e_dq = s * (e_ds @ abs_k + gamma(n_k) * (d_s @ abs_k))
    e_dk = s * (e_ds.swapaxes(-1, -2) @ abs_q + gamma(n_q * group) * (d_s.swapaxes(-1, -2) @ abs_q))
    magnitudes = (s * (d_s @ abs_k), sum_groups(s * (d_s.swapaxes(-1, -2) @ abs_q), heads_kv),
                  sum_groups(w.swapaxes(-1, -2) @ abs_do, heads_kv))
    mod_errors, mod_magnitudes = {}, {}
    if bias_shape is not None:
        summed = d_s.size // math.prod(bias_shape)
        mod_magnitudes["bias"] = reduce_to_shape(d_s, bias_shape)
        mod_errors["bias"] = reduce_to_shape(e_ds, bias_shape) + gamma(summed) * mod_magnitudes["bias"]
    if result.mods.sinks is not None:
        weight = sink_weights(result.mods.sinks, result.lse)  # pi_i
        sink_terms = weight * np.abs(row_dot[..., 0])
        mod_magnitudes["sinks"] = sink_terms.sum(axis=(0, 2))
        mod_errors["sinks"] = ((relative[..., 0] * sink_terms + weight * e_d[..., 0]).sum(axis=(0, 2))
                               + gamma(d_out.shape[0] * n_q) * mod_magnitudes["sinks"])
    below_normal: dict = dict.fromkeys((0, 1, 2, "bias", "sinks"), 0.0)
    if stored is not None:
        d_s_below = rounding_below_normal(d_s, e_ds, stored)
        w_below = rounding_below_normal(w, relative * w, stored)
        below_normal.update({0: s * (d_s_below @ abs_k),
                             1: sum_groups(s * (d_s_below.swapaxes(-1, -2) @ abs_q), heads_kv),
                             2: sum_groups(w_below.swapaxes(-1, -2) @ abs_do, heads_kv)})
        if bias_shape is not None:
            below_normal["bias"] = reduce_to_shape(d_s_below, bias_shape)
    return ((e_dq, sum_groups(e_dk, heads_kv), sum_groups(e_dv, heads_kv)), magnitudes, mod_errors,
            mod_magnitudes, below_normal)


def gradient_allowance(q, k, v, d_out, *, dtype: np.dtype | str, model: Model = attention,
                       **kwargs) -> GradientOracle:
    """The float64 gradients of <d_out, attention(q, k, v, **kwargs)> and the error allowed to an
    implementation computing them in `dtype` (q, k, v, d_out: the values it received, in float64).

    The same model as the forward, carried through the backward's products (_backward_propagation).
    float64: worst case, gamma(n) = n u, each weight's relative error (2(d+6) A_i + (n_k+4)(1+L_i)) u (the
    forward's score and normalisation terms; L_i covers weights recomputed as exp(S - LSE)), times SAFETY.
    float32 / float16 / bfloat16: K_GRADIENT times the naive backward's error in `dtype` (largest of the
    gradient row), plus a probabilistic floor: the propagation with float32 inside (u_a), gamma(n) =
    LAMBDA sqrt(n) u_a and relative error LAMBDA u_a (sqrt(d) A_i + 2 L_i + 2) and D_i computed from the output
    as stored in `dtype` (FlashAttention's backward reads O back: u sum |dO||O| each), plus storage rounding in
    `dtype`: u |grad| twice (the result and one rounded operand such as P or dS) and u times the gradient's
    magnitude |dS||K|, |dS|^T|Q|, W^T|dO| (FlashAttention rounds P and dS to `dtype` before the products), that
    rounding's absolute part where P or dS lies below `dtype`'s smallest normal (half a subnormal at most each,
    carried through the products: _backward_propagation), and the stored output's subnormal rounding carried
    through D (_stored_output_underflow).
    `model`: the forward whose backward is bounded, the oracle's by default (specs.tolerance.model.Model).
    """

    dtype = numpy_dtype(dtype)
    if dtype.name not in SUPPORTED_DTYPES:
        raise ValueError(f"no tolerance rule for dtype {dtype}; supported: {SUPPORTED_DTYPES}")
    # a pure function of the inputs: computed once per distinct problem (specs.memo)
    return _GRADIENT_MEMO(q, k, v, d_out, dtype.name, kwargs, model)


def _gradient_allowance(q, k, v, d_out, dtype_name: str, kwargs: dict, model: Model = attention) -> GradientOracle:
    dtype = numpy_dtype(dtype_name)
    result = model(q, k, v, **kwargs)
    grads = attention_backward(q, k, v, d_out, model=model, **kwargs)
    mod_grads = score_mod_gradients(q, k, v, d_out, model=model, **kwargs)
    bias_shape = np.shape(kwargs["bias"]) if "bias" in mod_grads else None
    n_k, d = k.shape[2], q.shape[3]
    row_magnitude, _, _ = _first_order_terms(result, q, k, v)
    merge = _merge_magnitude(result, n_k)
    if dtype == np.float64:
        u = unit_roundoff(np.float64)
        relative = (2 * (d + 6) * row_magnitude + (n_k + 4) * (1 + merge)) * u
        errors, _, mod_errors, _, _ = _backward_propagation(result, q, k, v, d_out, u=u, gamma=lambda n: n * u,
                                                         relative=relative, bias_shape=bias_shape)
        floor = n_k * np.finfo(np.float64).tiny * float(np.abs(d_out).max(initial=0.0))
        rule = "float64 a-priori backward bound 2*(propagation with gamma(n)=nu, rel=(2(d+6)A_i+(n_k+4)(1+L_i))u)"

        def bound(e):
            terms = (("propagated rounding", SAFETY * e), ("underflow floor", floor))
            return Allowance(SAFETY * e + floor, rule, terms)

        return GradientOracle(grads, tuple(bound(e) for e in errors),
                              {name: (g, bound(mod_errors[name])) for name, g in mod_grads.items()})
    largest = max(float(np.abs(g).max(initial=0.0)) for g in (*grads, *mod_grads.values()))
    if largest > float(finfo(dtype).max):  # its correctly rounded value is infinite: no error to bound
        raise ToleranceUndefined(f"the exact gradient ({largest:.6g}) is past {dtype}'s largest finite value "
                                 "on this input")
    low = tuple(x.astype(dtype) for x in (q, k, v, d_out))
    with np.errstate(all="ignore"):
        naive = attention_backward(*low, model=model, **kwargs)
        naive_mods = score_mod_gradients(*low, model=model, **kwargs) if mod_grads else {}
    if not all(np.all(np.isfinite(g)) for g in (*naive, *naive_mods.values())):
        raise ToleranceUndefined(f"the naive {dtype} backward overflows on this input")
    u = unit_roundoff(dtype)
    u_a = min(u, unit_roundoff(np.float32))
    relative = LAMBDA * u_a * (math.sqrt(d) * row_magnitude + 2 * merge + 2)
    errors, magnitudes, mod_errors, mod_magnitudes, below_normal = _backward_propagation(
        result, q, k, v, d_out, u=u_a, gamma=lambda n: LAMBDA * math.sqrt(n) * u_a, relative=relative, stored=dtype,
        bias_shape=bias_shape)
    tiny = n_k * float(finfo(np.float32).tiny) * float(np.abs(d_out).max(initial=0.0)) + float(
        finfo(dtype).smallest_subnormal)
    # A weight below float32's smallest normal may be flushed to 0 (the floor above allows it in dV = P^T dO); the
    # same flushed weight is gone from dS_ij = P_ij (dP_ij - D_i), |dP_ij - D_i| <= 2 d_v max|dO| max|v|, and dS's
    # own subnormals may be flushed too: each dS_ij off by up to tiny (1 + that), carried into dQ = s dS K and
    # dK = s dS^T Q by sums of n_k and n_q terms (XLA's CPU backend flushes them:
    # docs/findings/jax_cpu_flushes_subnormals.py)
    flushed_ds = float(finfo(np.float32).tiny) * (1 + 2 * v.shape[3] * float(np.abs(d_out).max(initial=0.0))
                                                  * float(np.abs(v).max(initial=0.0)))
    n_q = q.shape[2]
    through_ds = {0: abs(result.scale) * n_k * flushed_ds * float(np.abs(k).max(initial=0.0)),
                  1: abs(result.scale) * n_q * flushed_ds * float(np.abs(q).max(initial=0.0)), 2: 0.0}
    through_d = _stored_output_underflow(result, q, k, d_out, dtype, bias_shape)

    def bound(exact, approx, error, magnitude, below, flushed, stored):
        naive_error = np.max(np.abs(approx.astype(np.float64) - exact), axis=-1, keepdims=True)
        storage = u * (2 * np.abs(exact) + magnitude)
        floor = error + storage + below + tiny + flushed + stored
        scaled = K_GRADIENT * naive_error
        terms = ((f"{K_GRADIENT:g} x naive {dtype} backward error of the row", scaled),
                 (f"propagated rounding floor (float32 inside, LAMBDA={LAMBDA:g})", error),
                 (f"storage rounding in {dtype}", storage),
                 (OPERANDS_BELOW_NORMAL, below), ("underflow", tiny),
                 ("flushed weights through dS", flushed), (STORED_OUTPUT_UNDERFLOW, stored))
        return Allowance(
            scaled + floor,
            f"{dtype}: {K_GRADIENT:g} x the naive {dtype} backward's error of the row (largest "
            f"{float(naive_error.max()):.3g}) + probabilistic floor (float32 inside, LAMBDA={LAMBDA:g})", terms)

    per_entry = n_q * n_k * q.shape[0] * q.shape[1]  # dS entries a modification's gradient element sums at most
    return GradientOracle(grads, tuple(bound(*parts, below_normal[index], through_ds[index], through_d[index])
                                       for index, parts in enumerate(zip(grads, naive, errors, magnitudes,
                                                                         strict=True))),
                          {name: (g, bound(g, naive_mods[name], mod_errors[name], mod_magnitudes[name],
                                           below_normal[name], flushed_ds * per_entry / max(g.size, 1),
                                           through_d[name]))
                           for name, g in mod_grads.items()})


STORED_OUTPUT_UNDERFLOW = "stored output's underflow through D"
OPERANDS_BELOW_NORMAL = "P and dS rounded to the dtype below its smallest normal"


def _stored_output_underflow(result: AttentionResult, q, k, d_out, dtype: np.dtype,
                             bias_shape: tuple[int, ...] | None) -> dict:
    """The gradients' error from D_i = sum_c dO_ic O_ic read from the output as stored in `dtype` where O_ic is
    subnormal there (a float16 output below 6.1e-5): rounding to nearest errs by u |O_ic|, which the propagation
    has, and by up to half the smallest subnormal besides. D_i is off by that times sum_c |dO_ic|, dS_ij =
    P_ij (dP_ij - D_i) by P_ij times it, carried into dQ = s dS K, dK = s dS^T Q, the bias's sums of dS and the
    sinks' -sum_i pi_i D_i; dV = W^T dO does not read D. Keyed as the gradients are: 0, 1, 2, "bias", "sinks"."""
    off_d = 0.5 * float(finfo(dtype).smallest_subnormal) * np.sum(np.abs(d_out), axis=-1, keepdims=True)
    off_ds = result.weights * off_d
    heads_kv = k.shape[1]
    s = abs(result.scale)
    through = {0: s * (off_ds @ repeat_kv(np.abs(k), q.shape[1] // heads_kv)),
               1: sum_groups(s * (off_ds.swapaxes(-1, -2) @ np.abs(q)), heads_kv), 2: 0.0}
    if bias_shape is not None:
        through["bias"] = reduce_to_shape(off_ds, bias_shape)
    if result.mods.sinks is not None:
        through["sinks"] = (sink_weights(result.mods.sinks, result.lse) * off_d[..., 0]).sum(axis=(0, 2))
    return through


def directional_derivative_allowance(q, k, v, d_out, directions, *, scale: float | None = None,
                                     mask: np.ndarray | None = None) -> Allowance:
    """Allowed |<dO, J E>_complex-step - <grad, E>_analytic| in float64.

    With P the weights and |E_S| = |s| (|E_q| |K|^T + |Q| |E_k|^T) the size of the
    score perturbation, every term of either computation is bounded by
    G_ic = sum_j P_ij (|E_v,jc| + (|E_S,ij| + sum_l P_il |E_S,il|) |v_jc|), so both
    are within (n_k + d + d_v + 10) u M of the exact value, M = sum |dO| G.
    The bound allows SAFETY times the sum of the two.
    """
    e_q, e_k, e_v = directions
    result = attention(q, k, v, scale=scale, mask=mask)
    group = q.shape[1] // k.shape[1]
    k_all, v_all, ek_all, ev_all = (repeat_kv(x, group) for x in (k, v, e_k, e_v))
    s = abs(result.scale)
    e_s = s * (np.abs(e_q) @ np.abs(k_all).swapaxes(-1, -2) + np.abs(q) @ np.abs(ek_all).swapaxes(-1, -2))
    p = result.weights
    spread = p @ np.abs(ev_all) + (p * e_s) @ np.abs(v_all) + (p * e_s).sum(-1, keepdims=True) * (p @ np.abs(v_all))
    magnitude = float(np.sum(np.abs(d_out) * spread))
    n_k, d, d_v = k.shape[2], q.shape[3], v.shape[3]
    return Allowance(SAFETY * 2 * (n_k + d + d_v + 10) * unit_roundoff(np.float64) * magnitude,
                     "complex step against analytic <grad, E>: 2 * 2(n_k+d+d_v+10)u * sum |dO| G")


_GRADIENT_MEMO = Memo(_gradient_allowance, raised=(ToleranceUndefined,))
