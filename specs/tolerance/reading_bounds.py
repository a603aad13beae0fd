"""The readings' bounds: allowances of the quantities the interpretations compute from checked weights
(entropies, temperature limits, the softmax Jacobian, rotary inputs, unit vectors, underflow windows)."""

from __future__ import annotations

import math

import numpy as np

from specs.dtypes import finfo, numpy_dtype
from specs.tolerance.model import (
    SAFETY,
    Allowance,
    score_perturbation_allowance,
    unit_roundoff,
)


def entropy_allowance(n: int) -> Allowance:
    """Allowed error of the float64 entropy of a softmax over n entries.

    Each p_i carries relative error <= (n + 4) u, so |dH| <= sum_i |dp_i| (|log p_i| + 1)
    <= (n + 4) u (H + 1) <= (n + 4) u (log n + 1); SAFETY for the log's own rounding.
    """
    return Allowance(SAFETY * (n + 4) * unit_roundoff(np.float64) * (math.log(n) + 1),
                     f"float64 entropy over n={n}: 2(n+4)u(log n + 1)")


def unit_vector_allowance(d: int) -> Allowance:
    """Allowed error of a.b, |a - b|^2 or cos(a, b) for float64 unit vectors of length d.

    Normalising leaves |a| within (d + 2) u of 1, the dot product adds gamma_d, and
    the cosine's division 2u: SAFETY * (2 d + 6) u covers any of them.
    """
    return Allowance(SAFETY * (2 * d + 6) * unit_roundoff(np.float64),
                     f"float64 unit vectors of length d={d}: 2(2d+6)u")


def cosine_exponent_allowance(scale: float, d: int) -> Allowance:
    """Allowed error of s c, c = 2 |x_i| |x_m| or |x_i| |x_j| - |x_i|^2, with float64 norms of unit vectors of length d.

    A product of two such norms is within unit_vector_allowance(d) of exact (it is a.b of unit
    vectors, rounded no worse); c is twice one product, or the difference of two (difference_allowance):
    either way within 2 unit_vector_allowance(d), so s c within 2 |s| unit_vector_allowance(d).
    """
    unit = unit_vector_allowance(d)
    return Allowance(2 * abs(scale) * unit.bound, f"s x two products of unit-vector norms: 2|s| x ({unit.rule})")


def rope_score_allowance(q: np.ndarray, k: np.ndarray, max_position: int) -> Allowance:
    """Allowed error of one rotary score rot(q, m) . rot(k, n) with positions up to `max_position`.

    Each angle position * base^(-2i/d) <= max_position is rounded (product and pow,
    2u relative) and its sine and cosine carry 1 ulp: a rotated vector moves by at
    most (2 max_position + 3) u |x|. With the dot product's gamma_{d+1}:
    |error| <= (d + 7 + 4 max_position) u |q| |k|.
    """
    d = q.shape[-1]
    norms = float(np.linalg.norm(q) * np.linalg.norm(k))
    return Allowance((d + 7 + 4 * max_position) * unit_roundoff(np.float64) * norms,
                     f"rotary score, positions <= {max_position}: (d+7+4*{max_position})u |q| |k|")


def temperature_limit(scores: np.ndarray, limit: str) -> tuple[np.ndarray, Allowance]:
    """The weights softmax(S) tends to as the scale goes to infinity (limit="cold") or to 0 ("hot"), and an
    analytic bound on |softmax(S) - limit| for these finite scores S (-inf where masked; rows with a visible key).

    cold: with m_i the row's top score, t_i the number of keys that tie at it exactly and g_ij = m_i - S_ij,
      a tied key's weight is 1 / (t + x), x = sum_{j untied} e^-g_ij, within x / t^2 of 1/t (1/t - 1/(t + x)
      <= x / t^2), and an untied key's weight is at most e^-g_ij / t: the limit splits the row's weight
      equally among its ties (argmax attention) and gives every other key 0.
    hot: with r_i the spread of the row's visible scores, every visible weight lies in [e^-r / n, e^r / n],
      within (e^r - 1) / n of 1/n: the limit is uniform over the n visible keys, 0 on masked ones.
    """
    visible = np.isfinite(scores)
    n = visible.sum(axis=-1, keepdims=True)
    top = np.max(np.where(visible, scores, -np.inf), axis=-1, keepdims=True)
    if limit == "cold":
        gaps = np.where(visible, top - np.where(visible, scores, 0.0), np.inf)
        tied = gaps == 0
        t = tied.sum(axis=-1, keepdims=True)
        untied = np.sum(np.where(tied, 0.0, np.exp(-gaps)), axis=-1, keepdims=True)
        bound = np.where(tied, untied / t**2, np.exp(-gaps) / t)
        return tied / t, Allowance(bound, "cold limit: sum_untied e^-g_j / t^2 on the t tied keys, e^-g_j / t "
                                          "elsewhere")
    if limit == "hot":
        bottom = np.min(np.where(visible, scores, np.inf), axis=-1, keepdims=True)
        bound = np.where(visible, np.expm1(top - bottom) / n, 0.0)
        return visible / n, Allowance(bound, "hot limit: (e^r - 1) / n, r the spread of the row's visible scores")
    raise ValueError(f"limit is 'cold' or 'hot', not {limit!r}")


def _entropy_term(x: np.ndarray) -> np.ndarray:
    """phi(x) = -x log x, with phi(0) = 0."""
    safe = np.where(x > 0, x, 1.0)
    return np.where(x > 0, -x * np.log(safe), 0.0)


def weights_entropy_allowance(weights_allowance: Allowance, exact_weights: np.ndarray) -> Allowance:
    """Allowed |H(W_i) - H(P_i)| (shape (..., 1)) for weights W within `weights_allowance` of P, H(W) = -sum W log W
    evaluated in float64 on max(W, 0) (clipping at 0 only brings W closer to P >= 0).

    Per key, with a_j the weight's allowance and phi(x) = -x log x, the smaller of two bounds:
    - the mean value theorem: |phi(x) - phi(P_j)| <= a_j max |log t + 1| over t in [P_j - a_j, P_j + a_j] (an
      endpoint, log being monotone), finite when the interval stays above 0;
    - Fannes' inequality: |phi(x) - phi(y)| <= phi(|x - y|) for |x - y| <= 1/2 (phi concave, phi(0) = 0), so
      phi(min(a_j, 1/e)) (phi increases up to 1/e), and 1/e (phi's maximum on [0, 1]) for a_j > 1/2; where
      P_j + a_j > 1, phi's range on [0, P_j + a_j].
    Summed over the row, plus entropy_allowance(n_k) for the float64 evaluation's own rounding.
    """
    a = np.broadcast_to(np.asarray(weights_allowance.bound, dtype=np.float64), exact_weights.shape)
    low, high = exact_weights - a, exact_weights + a
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.maximum(np.abs(np.log(np.where(low > 0, low, 1.0)) + 1), np.abs(np.log(high) + 1))
    mean_value = np.where(low > 0, a * slope, np.inf)
    # Fannes inside [0, 1]; a weight that may exceed 1 (W is not yet known to be a distribution): phi's range on
    # [0, high], 1/e + high log high
    fannes = np.where(high <= 1.0, np.where(a <= 0.5, _entropy_term(np.minimum(a, 1 / math.e)), 1 / math.e),
                      1 / math.e + high * np.log(np.maximum(high, 1.0)))
    n = exact_weights.shape[-1]
    per_row = np.minimum(mean_value, fannes).sum(axis=-1, keepdims=True) + entropy_allowance(n).bound
    return Allowance(per_row, f"entropy of weights within ({weights_allowance.rule}): sum_j min(MVT, Fannes) "
                              f"+ ({entropy_allowance(n).rule})")


def normalised_weights_allowance(weights_allowance: Allowance, exact_weights: np.ndarray) -> Allowance:
    """Allowed |W~ - P| for W~ = max(W, 0) / sum_j max(W, 0), W within `weights_allowance` of P (rows summing to 1).

    Clipping at 0 only brings W closer to P >= 0; the row sum is within A = sum_j a_j of 1, so
    |W~_j - P_j| <= (|W_j - P_j| + P_j |sum W - 1|) / sum W <= (a_j + P_j A) / (1 - A) (infinite when A >= 1).
    """
    a = np.broadcast_to(np.asarray(weights_allowance.bound, dtype=np.float64), exact_weights.shape)
    total = a.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        bound = np.where(total < 1.0, (a + exact_weights * total) / np.maximum(1.0 - total, 0.0), np.inf)
    return Allowance(bound, f"renormalised weights within ({weights_allowance.rule}): (a_j + P_j A) / (1 - A)")


def entropy_regularised_gap_allowance(weights_allowance: Allowance, weights: np.ndarray, exact_weights: np.ndarray,
                                      scores: np.ndarray) -> Allowance:
    """Allowed |logsumexp(s) - F(W~)|, F(p) = <p, s> + H(p), for W~ = W / sum W with W within `weights_allowance`
    of P = softmax(s) (unmasked rows, P > 0), per row (..., 1).

    Exactly, logsumexp(s) - F(p) = KL(p || P) >= 0 on the simplex (so P is the unique maximiser and lse the
    maximum). KL <= log(1 + chi^2) <= chi^2 = sum_j (p_j - P_j)^2 / P_j, and normalising moves each weight by
    at most |W~_j - P_j| <= (a_j + P_j A) / (1 - A), A = sum_j a_j the row sum's allowance. The float64
    evaluation of lse, <p, s> and H(p) adds SAFETY (n + 4) u (|lse| + sum_j p_j (|s_j| + |log p_j|) + 1).
    """
    moved = normalised_weights_allowance(weights_allowance, exact_weights).bound
    chi_square = np.sum(moved**2 / exact_weights, axis=-1, keepdims=True)
    n = exact_weights.shape[-1]
    u = unit_roundoff(np.float64)
    p = np.clip(weights, 0.0, None)
    p = p / p.sum(axis=-1, keepdims=True)
    log_p = np.log(np.where(p > 0, p, 1.0))
    lse = np.log(np.sum(np.exp(scores - scores.max(axis=-1, keepdims=True)), axis=-1, keepdims=True)) + scores.max(
        axis=-1, keepdims=True)
    size = np.abs(lse) + np.sum(p * (np.abs(scores) + np.abs(log_p)), axis=-1, keepdims=True) + 1.0
    return Allowance(chi_square + SAFETY * (n + 4) * u * size,
                     f"KL(W~ || P) <= chi^2 from ({weights_allowance.rule}), + the float64 evaluation 2(n+4)u(...)")


# SLSQP (scipy.optimize.minimize, ftol=1e-15) maximising <p, s> + H(p) over the simplex, n <= 6, |s| <= 5:
# the objective is strictly concave with curvature >= 1 / max_j p_j >= 1 (the Hessian is -diag(1 / p)), so a
# point within ~1e-5 of the maximiser (the solver's step tolerance, squared-root of ftol on its quadratic
# model, plus the bound constraints' clipping) loses at most ~1e-10 in value. 1e-8 leaves that a 100-fold
# margin. By Pinsker, a point within TAU of the maximum value lies within sqrt(2 TAU) in l1 of the maximiser.
SIMPLEX_OPTIMIZER_VALUE_TOLERANCE = 1e-8


def underflow_gap_window(dtype: np.dtype | str) -> tuple[float, float]:
    """The range of -log(P_ij) (P the exact weight) in which a correct implementation storing in `dtype` first
    returns a weight of exactly 0: (lowest, highest).

    Below `lowest` no step can flush the weight: it is at least twice the smallest normal number of both the
    output dtype and the arithmetic inside (float32 for float16/bfloat16 kernels, which keep S, exp and the
    accumulators in float32; the dtype itself otherwise), so neither exp's underflow nor a flush-to-zero of
    subnormals (FTZ/DAZ) nor the final rounding reaches it. Above `highest` the weight is below a quarter of the
    output dtype's smallest subnormal, so round-to-nearest gives 0 whatever the arithmetic did before (the
    factor 2 beyond the halfway point covers exp's and the normalisation's relative rounding). In between, a
    correct implementation may return 0 or not, depending on gradual underflow or FTZ.
    float64: (707.7, 745.8); float32: (86.6, 104.7); bfloat16: (86.6, 93.6); float16: (9.0, 18.0).
    """
    out = finfo(dtype)
    inner = finfo(np.float32) if unit_roundoff(dtype) > unit_roundoff(np.float32) else out
    lowest = -math.log(2 * max(float(out.tiny), float(inner.tiny)))
    highest = math.log(4) - math.log(float(out.smallest_subnormal))
    return lowest, highest


def _entropy_term_bound(p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """max |eta(w) - eta(p)| over |w - p| <= a, w in [0, 1], for eta(x) = -x log x (elementwise)."""
    a = np.broadcast_to(a, p.shape)
    low, high = p - a, np.minimum(p + a, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.maximum(np.abs(1 + np.log(np.where(low > 0, low, 1.0))), np.abs(1 + np.log(high)))
        inside = a * slope
        near_zero = np.where(2 * a < 1 / math.e, -2 * a * np.log(np.maximum(2 * a, np.finfo(float).tiny)), 1 / math.e)
    return np.where(low > 0, inside, near_zero)


def row_entropy_allowance(exact_weights: np.ndarray, weights_allowance: Allowance) -> Allowance:
    """Allowed |H(w) - H(p)| per row (..., 1) when |w_j - p_j| <= a_j, H(p) = -sum_j p_j log p_j in float64.

    eta(x) = -x log x has eta'(x) = -(1 + log x), monotone, so on [p - a, p + a] inside (0, 1] the mean value
    theorem gives |eta(w) - eta(p)| <= a max(|1 + log(p - a)|, |1 + log(p + a)|). Where p <= a, both w and p
    lie in [0, 2a] and eta is increasing on [0, 1/e]: |eta(w) - eta(p)| <= eta(min(2a, 1/e)). Summed over the
    row, plus entropy_allowance(n) for evaluating H in float64.
    """
    terms = _entropy_term_bound(exact_weights, np.asarray(weights_allowance.bound, dtype=np.float64))
    n = exact_weights.shape[-1]
    return Allowance(terms.sum(axis=-1, keepdims=True) + entropy_allowance(n).bound,
                     "row entropy of weights within their allowance a: sum_j a_j max|1 + log x| on [p-a, p+a] "
                     "(or eta(2a) where p <= a) + float64 entropy")


def jacobian_norm_allowance(exact_weights: np.ndarray, weights_allowance: Allowance) -> Allowance:
    """Allowed |J(w) - J(p)| per row (..., 1), J(p) = ||diag(p) - p p^T||_F, when |w_j - p_j| <= a_j.

    |J(w) - J(p)| <= ||diag(D) - (D p^T + p D^T + D D^T)||_F <= |D| (1 + 2 |p| + |D|) with D = w - p and
    |D| <= |a| (Euclidean norms of the row); evaluating J in float64 from the n x n matrix adds at most
    SAFETY (n + 4) u per row (each entry p_i p_j or p_i - p_i^2 to 2u relative, the sum of n^2 squares
    gamma_{n^2}, and J <= 1/2).
    """
    a = np.linalg.norm(np.broadcast_to(np.asarray(weights_allowance.bound, dtype=np.float64),
                                       exact_weights.shape), axis=-1, keepdims=True)
    p = np.linalg.norm(exact_weights, axis=-1, keepdims=True)
    n = exact_weights.shape[-1]
    rounding = SAFETY * (n * n + 4) * unit_roundoff(np.float64)
    return Allowance(a * (1 + 2 * p + a) + rounding,
                     "softmax Jacobian norm of weights within their allowance a: |a| (1 + 2|p| + |a|) "
                     "+ float64 evaluation 2(n^2+4)u")


def rotated_inputs_allowance(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, dtype: np.dtype | str,
                             max_position: int, **kwargs) -> Allowance:
    """Allowed |oracle(q~, k~, v) - oracle(q*, k*, v)| where q*, k* are rotary-encoded inputs in exact arithmetic,
    q, k their float64 evaluation (rotations by positions <= max_position, possibly composed or followed by a
    d x d projection) and q~, k~ those cast to `dtype`, as an implementation receives them.

    Per score: the cast moves q.k by at most (2u + u^2) (|q| |k|^T)_ij; the float64 rotations by at most
    (4 max_position + d + 7) u64 |q| |k| (rope_score_allowance), a projection by gamma_d on each side, so
    2 (d + 1) u64 |q| |k| more. The worst score error of each row, times |scale|, through the first-order bound
    of score_perturbation_allowance (float64 softmax(S + E) V).
    """
    d = q.shape[-1]
    u, u64 = unit_roundoff(dtype), unit_roundoff(np.float64)
    magnitude = np.abs(q) @ np.abs(k).swapaxes(-1, -2)
    norms = np.linalg.norm(q, axis=-1)[..., :, None] * np.linalg.norm(k, axis=-1)[..., None, :]
    scale = kwargs.get("scale")
    scale = 1 / math.sqrt(d) if scale is None else scale
    error = abs(scale) * ((2 * u + u * u) * magnitude + (4 * max_position + 3 * d + 9) * u64 * norms)
    received = tuple(x.astype(numpy_dtype(dtype)).astype(np.float64) for x in (q, k, v))
    bound = score_perturbation_allowance(*received, error.max(axis=-1, keepdims=True), **kwargs)
    return Allowance(bound.bound, f"rotary inputs rounded (positions <= {max_position}) and cast to {dtype}")
