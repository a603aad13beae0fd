"""The one tolerance model: how far an implementation's output may be from the oracle.

Both rules rest on one first-order error analysis of softmax(S) V. Write u for
the unit roundoff, s the scale, A_ij = |s| sum_l |q_il| |k_jl| and A_i = max_j A_ij
over the keys row i may see, O the exact output, P the exact weights, and
sigma_ic = sqrt(sum_j P_ij (v_jc - O_ic)^2), the spread of the values under P.
* Score errors. If the unnormalised weights carry relative errors e_ij (from the
  scores' rounding dS_ij, the maximum subtraction, exp), then exactly to first
  order dO_ic = sum_j P_ij (e_ij - e_i) (v_jc - O_ic) with e_i = sum_j P_ij e_ij, and
  since sum_j P_ij (v_jc - O_ic) = 0 the row-common part e_i drops out: score errors
  act on the spread of the values, never on their mean. Worst case,
  |dO_ic| <= 2 max_j |e_ij| sigma_ic (Cauchy-Schwarz).
* Value errors. The row sum l, the normalisation (or the online rescalings), the
  rounding of P before the product and the weighted sum act on the values
  themselves, not their spread: a sum of terms of size |v| rounds at |v|'s ulp,
  so with values 1e3 + N(0, 1) a correct float32 implementation errs by ~1e3 u
  sqrt(n_k) however well it computes the weights. Worst case (3 n_k + 4) u (P|V|)_ic.
* Partial results merged through their log-sum-exp (split-KV, flash-decoding,
  paged attention v2): w_b = exp(lse_b - lse) carries the rounding of lse_b, of
  lse and of their difference, u L_i each, with |lse_b| <= L_i = max_j |S_ij| +
  log n_k + 1. Combined as FlashAttention's combine step does (lse = m + log sum_b
  exp(lse_b - m), m = max_b lse_b) the merge adds at most 4 u L_i (P|V|)_ic: it grows
  with the score magnitude. A chain of pairwise logaddexp instead gathers u L_i per
  merge, (s + 4) u L_i over s splits: the float64 bound allows it for any s <= n_k.

float64: an a-priori worst-case bound. Each score is a length-d dot product plus
  the scale multiplication, the maximum subtraction and the rescaling exponent
  (arguments bounded by 2 A_i): |dS_ij| <= (d + 6) u A_i. So
    bound_ic = SAFETY * (2 (d + 6) u A_i sigma_ic + ((3 n_k + 4) + (n_k + 4) L_i) u (P|V|)_ic) + floor
  with SAFETY = 2 for the neglected second-order terms and floor =
  n_k * tiny * max|v| for weights in the subnormal range (an implementation may
  flush them to zero). Worst-case, so correct float64 code never exceeds it; yet
  ~1e8 times below float32 rounding, so a float64 implementation that computes
  any step in float32 is caught on ordinary inputs.

float32 / float16 (bfloat16 below): FlashAttention's rule, per element. The error may be
  K_FORWARD = 2 times the error of the naive formula (specs.reference.attention)
  run in the same precision on the same inputs, taken as the largest over the
  row's output elements (one naive run is one sample of the rounding: the row's
  largest is a stable estimate of its size, and a row's elements share weights),
  plus a floor: the rounding of an implementation that stores in `dtype` and
  computes inside in float32 (u_a = float32's unit roundoff; u_a = u for float32
  itself), which is what correct float16 attention means (FlashAttention keeps
  S, the maximum, exp and the accumulators in float32 and rounds P to float16
  before P V). Rounding errors are modelled as Higham & Mary do ("A new approach
  to probabilistic rounding error analysis", SISC 2019): independent, mean zero,
  |delta| <= u. First-order, the output error is then a sum of independent terms
  c_k delta_k, and Hoeffding's inequality bounds it by LAMBDA sqrt(sum_k c_k^2 u_k^2)
  except with probability 2 exp(-LAMBDA^2 / 2) = 7.5e-6 per element (LAMBDA = 5).
  The terms, per output element (i, c):
    scores   sum_j P_ij^2 (v_jc - O_ic)^2 (d u_a^2 A_ij^2 + u_a^2 B_ij + u_a^2 (2|S_ij| + |S_ij - m_i| + 2)^2),
             B_ij = s^2 sum_l q_il^2 k_jl^2 (the dot product's partial sums, the scaling
             of k, the scale, the maximum subtraction, exp: independent across keys);
    query    u_a^2 s^2 sum_l q_il^2 tau_il^2 sigma_ic^2, tau_il^2 = Var_P(k_l) (scaling q
             rounds once per query element, the same for every key: Cauchy-Schwarz);
    P        u^2 sum_j P_ij^2 v_jc^2 (P rounded to `dtype` before P V);
    sums     n_k u_a^2 ((P|V|)_ic^2 + O_ic^2) (the weighted sum and the row sum in any order);
  and, added worst-case, 2 u |O_ic| (the division and the output's own rounding), the
  merge term 4 u_a L_i (P|V|)_ic, and underflow: n_k tiny max|v| (weights below float32's
  smallest normal flushed to zero) plus `dtype`'s smallest subnormal (the output's spacing
  at 0). Implementations that round S or the softmax to `dtype` (the naive formula itself,
  PyTorch's math backend on a GPU) are what the K_FORWARD x naive term covers.
  Values 1e3 + N(0, 1) in float16 are below its resolution (the output's ulp near 1e3
  is 0.5), and in float32 the serial accumulation of such values errs by more than a
  1e-3 bias on one score moves the output: tests/test_power.py states which slightly
  wrong implementations the rule catches and which are below resolution, and why.

bfloat16: the same rule, from its own unit roundoff u = 2^-8 (8 significand bits, the implicit one
  included, against float16's 11: every storage term, and with them the naive formula's error, is 2^3 = 8
  times float16's) and float32 inside (u_a = 2^-24, as bfloat16 kernels keep S, exp and the accumulators
  in float32). Its exponent range is float32's (largest 3.4e38, smallest normal 1.2e-38, smallest
  subnormal 9.2e-41, from ml_dtypes.finfo: np.finfo does not know the type), so the naive formula
  overflows on none of the suite's styles: where float16's rule is undefined (scores of 3e4, values
  of 1e6) bfloat16's is defined, and specs.strategies draws every style for it. Resolution is coarse
  instead: an input moves by up to u |x| (values 1e3 + N(0, 1) land on 996, 1000 or 1004), a score of
  1e3 rounded to bfloat16 by up to 3.9, and the naive error (so the K_FORWARD term) grows with |S|.
  The naive bfloat16 formula accumulates its sums in float32 and rounds each to bfloat16 once, as NumPy
  does for float16 and PyTorch for both (specs.reference): NumPy's own bfloat16 sums accumulate in
  bfloat16 one element at a time, whose error grows without bound (10^4 x 0.1 sums to 32), and
  K_FORWARD times that would admit any output. At d = 64, n_q = n_k = 128, N(0, 1) inputs the median
  allowance is 6.8e-3 against float16's 8.5e-4 (8.0 times; 2.6e-3 against 3.4e-4 at n_k = 1024).

Every comparison in the suite asks this module for its allowance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specs.dtypes import finfo, numpy_dtype
from specs.reference import AttentionResult, attention, repeat_kv

SAFETY = 2.0
K_FORWARD = 2.0
LAMBDA = 5.0  # Hoeffding factor of the probabilistic floor: 2 exp(-LAMBDA^2 / 2) = 7.5e-6 per element
SUPPORTED_DTYPES = ("float64", "float32", "float16", "bfloat16")


class ToleranceUndefined(ValueError):
    """The naive low-precision baseline itself is not finite, so the rule has nothing to scale."""


@dataclass(frozen=True)
class Allowance:
    """Allowed |got - exact| per element, with the rule that produced it (a formula a reader can check)."""

    bound: np.ndarray | float  # shaped like (or broadcasting to) what it bounds; a float bounds every element
    rule: str

    def __add__(self, other: Allowance) -> Allowance:
        return Allowance(self.bound + other.bound, f"({self.rule}) + ({other.rule})")

    def take(self, index: tuple) -> Allowance:
        """The allowance of a sub-array (same indexing as applied to the output; an array bound)."""
        return Allowance(self.bound[index], self.rule)

    def largest(self) -> Allowance:
        """The largest element's bound, for every element."""
        return Allowance(float(np.max(self.bound)), f"largest of ({self.rule})")


def unit_roundoff(dtype: np.dtype | str) -> float:
    """u = eps / 2 = 2^-p for p significand bits (the implicit one included): 2^-53, 2^-24, 2^-11, 2^-8."""
    return float(finfo(dtype).eps) / 2


def _first_order_terms(result: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray):
    """A_i (..., n_q, 1), sigma (..., n_q, d_v) and P|V| (..., n_q, d_v) of the analysis above."""
    u = unit_roundoff(np.float64)
    group = q.shape[1] // k.shape[1]
    v_all = repeat_kv(v, group)
    magnitudes = abs(result.scale) * (np.abs(q) @ np.abs(repeat_kv(k, group)).swapaxes(-1, -2))
    if result.allowed is not None:
        magnitudes = np.where(result.allowed, magnitudes, 0.0)
    row_magnitude = magnitudes.max(axis=-1, keepdims=True)
    abs_weighted = result.applied_weights @ np.abs(v_all)
    if result.dropped is not None:
        # after dropout a row's weights no longer sum to 1: the row-common error e_i does not cancel, and
        # sum_j W_ij |e_ij - e_i| |v_jc| <= 2 max|e| (W|V|)_ic stands where the spread did
        return row_magnitude, abs_weighted, abs_weighted
    second_moment = result.weights @ (v_all * v_all)
    # sum_j P_ij v_j^2 - O_i^2 loses up to (n_k + 2) u * second_moment to cancellation: add it back.
    variance = np.maximum(second_moment - result.out ** 2, 0.0) + (k.shape[2] + 2) * u * second_moment
    return row_magnitude, np.sqrt(variance), abs_weighted


def _merge_magnitude(result: AttentionResult, n_k: int) -> np.ndarray:
    """L_i = max_j |S_ij| + log n_k + 1 over visible keys (..., n_q, 1): bounds |lse| of any key split."""
    visible = np.isfinite(result.scores)
    largest = np.max(np.where(visible, np.abs(result.scores), 0.0), axis=-1, keepdims=True)
    return largest + math.log(n_k) + 1.0


def _a_priori_bound(result: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                    inside: np.dtype | str = np.float64) -> np.ndarray:
    """The worst-case bound of the module docstring for a computation carried out in `inside`."""
    u = unit_roundoff(inside)
    n_k, d = k.shape[2], q.shape[3]
    row_magnitude, spread, abs_weighted = _first_order_terms(result, q, k, v)
    merge = (n_k + 4) * _merge_magnitude(result, n_k)
    floor = n_k * float(finfo(inside).tiny) * float(np.abs(v).max())
    return SAFETY * (2 * (d + 6) * u * row_magnitude * spread + (3 * n_k + 4 + merge) * u * abs_weighted) + floor


def _float64_bound(result: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> Allowance:
    return Allowance(_a_priori_bound(result, q, k, v),
                     "float64 a-priori bound 2*(2(d+6)u*A_i*sigma + (3n_k+4+(n_k+4)L_i)u*P|V|)")


def fused_difference_allowance(result: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                               dtype: np.dtype | str) -> Allowance:
    """Allowed |F - U| between a fused kernel F storing in `dtype` (float16, bfloat16) and the unfused sequence U
    run with float32 inside on the same inputs (seed 000 § Fused Attention: the same function, one kernel).

    Both evaluate the formula in float32: each within the float32 a-priori bound of the exact output (the
    float64 rule's worst case at u_32, online rescalings and merges included). F may round P to `dtype` once
    before P V (FlashAttention feeds P to the second MatMul in half precision): sum_j |dP_ij| |v_jc| <=
    u (P|V|)_ic. Each result rounds once to `dtype`: u |O_ic| each. So
        |F - U| <= 2 a-priori_32 + SAFETY u ((P|V|) + 2 |O|) + 2 * dtype's smallest subnormal.
    Far below the naive rule's 2 x 2 K_FORWARD x naive error where scores are large: a kernel that rounds
    S to `dtype` errs by u |S| sigma, and one that accumulates P V in `dtype` by up to n_k u (P|V|).
    """
    u = unit_roundoff(dtype)
    float32_terms = 2 * _a_priori_bound(result, q, k, v, inside=np.float32)
    storage_terms = SAFETY * u * (result.applied_weights @ np.abs(repeat_kv(v, q.shape[1] // v.shape[1]))
                                  + 2 * np.abs(result.out))
    subnormal = 2 * float(finfo(dtype).smallest_subnormal)
    return Allowance(float32_terms + storage_terms + subnormal,
                     f"both in float32 inside (2 x the float32 a-priori bound) + {SAFETY:g}u(P|V| + 2|O|) for P "
                     f"and the output rounded to {numpy_dtype(dtype).name}")


def _rounding_floor(result: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                    dtype: np.dtype) -> np.ndarray:
    """The probabilistic floor of the module docstring: storage in `dtype`, float32 inside."""
    u = unit_roundoff(dtype)
    u_a = min(u, unit_roundoff(np.float32))
    group = q.shape[1] // k.shape[1]
    k_all, v_all = repeat_kv(k, group), repeat_kv(v, group)
    n_k, d, s = k.shape[2], q.shape[3], abs(result.scale)
    weights, out = result.applied_weights, result.out
    centre = out if result.dropped is None else 0.0  # dropped weights do not sum to 1: no cancellation
    visible = np.isfinite(result.scores)
    scores = np.where(visible, result.scores, 0.0)
    a = np.where(visible, s * (np.abs(q) @ np.abs(k_all).swapaxes(-1, -2)), 0.0)
    b = np.where(visible, s * s * ((q * q) @ (k_all * k_all).swapaxes(-1, -2)), 0.0)
    row_max = np.max(np.where(visible, scores, -np.inf), axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    per_key = d * a**2 + b + (2 * np.abs(scores) + np.abs(scores - row_max) + 2) ** 2
    w = weights**2 * per_key * u_a**2
    # sum_j w_ij (v_jc - O_ic)^2, expanded into three products
    score_terms = w @ (v_all * v_all) - 2 * centre * (w @ v_all) + centre**2 * w.sum(axis=-1, keepdims=True)
    spread = np.maximum(weights @ (v_all * v_all) - centre**2, 0.0)
    key_centre = weights @ k_all if result.dropped is None else 0.0
    key_spread = np.maximum(weights @ (k_all * k_all) - key_centre**2, 0.0)
    query_terms = (u_a * s) ** 2 * np.sum(q * q * key_spread, axis=-1, keepdims=True) * spread
    weight_terms = u**2 * ((weights**2) @ (v_all * v_all))
    abs_weighted = weights @ np.abs(v_all)
    sum_terms = n_k * u_a**2 * (abs_weighted**2 + out**2)
    variance = np.maximum(score_terms, 0.0) + query_terms + weight_terms + sum_terms
    inner = np.float32 if u_a < u else dtype
    # underflow: weights below float32's smallest normal may be flushed (n_k tiny max|v|), and the output
    # rounds to `dtype`'s subnormal spacing near 0, where the relative 2 u |O| says nothing
    underflow = n_k * float(finfo(inner).tiny) * float(np.abs(v).max(initial=0.0)) + float(
        finfo(dtype).smallest_subnormal)
    worst_case = 2 * u * np.abs(out) + 4 * u_a * _merge_magnitude(result, n_k) * abs_weighted + underflow
    return LAMBDA * np.sqrt(variance) + worst_case


def _low_precision_bound(
    result: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray, dtype: np.dtype, kwargs: dict,
    past_range: bool = False,
) -> Allowance:
    with np.errstate(all="ignore"):
        naive = attention(q.astype(dtype), k.astype(dtype), v.astype(dtype), **kwargs).out
    baseline = f"naive {dtype}"
    if not np.all(np.isfinite(naive)) and past_range:
        # the scores leave the dtype's range: no same-precision formula is finite, but a kernel that stores in
        # `dtype` and computes in float32 (FlashAttention's design, the floor's model) is: it is the baseline
        with np.errstate(all="ignore"):
            inside = attention(*(x.astype(dtype).astype(np.float32) for x in (q, k, v)), **kwargs).out
            naive = inside.astype(dtype)
        baseline = f"{dtype} storage, float32 inside (the naive {dtype} formula overflows here)"
    if not np.all(np.isfinite(naive)):
        raise ToleranceUndefined(f"the naive {dtype} formula overflows on this input")
    naive_error = np.max(np.abs(naive.astype(np.float64) - result.out), axis=-1, keepdims=True)
    return Allowance(
        K_FORWARD * naive_error + _rounding_floor(result, q, k, v, dtype),
        f"{dtype}: {K_FORWARD:g} x the {baseline} error of the row (largest {float(naive_error.max()):.3g}) "
        f"+ probabilistic floor (storage {dtype}, float32 inside, LAMBDA={LAMBDA:g})",
    )


def forward_allowance(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    dtype: np.dtype | str,
    oracle: AttentionResult | None = None,
    past_range: bool = False,
    **kwargs,
) -> tuple[AttentionResult, Allowance]:
    """The float64 oracle for these inputs and the error allowed to an impl computing in `dtype`.

    q, k, v are the values the implementation received, held in float64
    (inputs already rounded to `dtype` and back), so input rounding is not
    charged to the implementation. Where the naive `dtype` formula overflows the rule has no baseline
    (ToleranceUndefined), unless past_range: then the baseline is the formula with `dtype` storage and
    float32 inside, the bound a kernel that keeps its scores in float32 must meet past `dtype`'s range.
    """
    dtype = numpy_dtype(dtype)
    if dtype.name not in SUPPORTED_DTYPES:
        raise ValueError(f"no tolerance rule for dtype {dtype}; supported: {SUPPORTED_DTYPES}")
    result = oracle if oracle is not None else attention(q, k, v, **kwargs)
    if dtype == np.float64:
        return result, _float64_bound(result, q, k, v)
    return result, _low_precision_bound(result, q, k, v, dtype, kwargs, past_range)


def product_allowance(left_allowance: Allowance, left: np.ndarray, right: np.ndarray) -> Allowance:
    """Allowance for left @ right (computed in float64) when `left` is known to within `left_allowance`.

    |L R - L* R| <= |L - L*| |R| + gamma_n |L| |R|, the second term being the
    float64 product's own rounding (n = the contracted length, counted twice).
    """
    n = right.shape[-2]
    u = unit_roundoff(np.float64)
    abs_right = np.abs(right)
    bound = left_allowance.bound @ abs_right + 2 * n * u * (np.abs(left) @ abs_right)
    return Allowance(bound, f"({left_allowance.rule}) carried through a product")


def row_sum_allowance(weights_allowance: Allowance, weights: np.ndarray) -> Allowance:
    """Allowance for the row sums of weights known to within `weights_allowance` (shape (..., 1))."""
    return product_allowance(weights_allowance, weights, np.ones((weights.shape[-1], 1)))


def dot_product_allowance(a: np.ndarray, b: np.ndarray) -> Allowance:
    """Allowed error of the float64 products a @ b.T: gamma_{d+1} |a| |b|^T (Higham § 3.1)."""
    d = a.shape[-1]
    return Allowance((d + 1) * unit_roundoff(np.float64) * (np.abs(a) @ np.abs(b).swapaxes(-1, -2)),
                     "float64 dot products a @ b^T: (d+1)u |a| |b|^T (gamma_{d+1})")


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


def lse_allowance(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, dtype: np.dtype | str, oracle: AttentionResult, **kwargs
) -> Allowance:
    """Allowed |lse_i - oracle lse_i| (shape (..., n_q)) for an implementation computing in `dtype`.

    lse = m + log(l): the row maximum carries the score error, log(l) the row
    sum's relative error (n_k u, plus 1 ulp of exp and log), the final sum 1 ulp
    of |lse|. float64: SAFETY * ((d + 6) u A_i + (n_k + 4) u + u |lse_i|).
    Lower precisions: K_FORWARD x the naive formula's largest lse error plus
    sqrt(d) u A_i + (n_k + 4) u + u |lse_i|, as for the output.
    """
    dtype = numpy_dtype(dtype)
    u = unit_roundoff(dtype)
    n_k, d = k.shape[2], q.shape[3]
    row_magnitude = _first_order_terms(oracle, q, k, v)[0][..., 0]
    finite = np.isfinite(oracle.lse)
    magnitude = np.where(finite, np.abs(oracle.lse), 0.0)
    if dtype == np.float64:
        return Allowance(SAFETY * ((d + 6) * u * row_magnitude + (n_k + 4) * u + u * magnitude),
                         "float64 lse: 2*((d+6)u*A_i + (n_k+4)u + u|lse_i|)")
    with np.errstate(all="ignore"):
        naive = attention(q.astype(dtype), k.astype(dtype), v.astype(dtype), **kwargs).lse.astype(np.float64)
    if not np.all(np.isfinite(naive) == finite):
        raise ToleranceUndefined(f"the naive {dtype} log-sum-exp overflows on this input")
    naive_error = float(np.max(np.abs(np.where(finite, naive - oracle.lse, 0.0)), initial=0.0))
    return Allowance(K_FORWARD * naive_error + math.sqrt(d) * u * row_magnitude + (n_k + 4) * u + u * magnitude,
                     f"{dtype} lse: {K_FORWARD:g} x the naive {dtype} lse error ({naive_error:.3g}) "
                     "+ sqrt(d)u*A_i + (n_k+4)u + u|lse_i|")


def merge_allowance(
    shares: list[np.ndarray], outs: list[np.ndarray], out_allowances: list[Allowance], lse_allowances: list[Allowance]
) -> Allowance:
    """Allowance for O = sum_b w_b O_b with w_b = exp(lse_b - lse), from parts known to within allowances.

    A lse error e_b moves w_b by w_b (e_b + max_c e_c) to first order, so
    |dO| <= sum_b w_b |dO_b| + 2 max_b e_b sum_b w_b |O_b| + the float64 merge's own
    rounding (8u relative).
    """
    u = unit_roundoff(np.float64)
    worst_lse = np.max(np.stack([a.bound for a in lse_allowances]), axis=0)[..., None]
    magnitude = sum(w[..., None] * np.abs(o) for w, o in zip(shares, outs, strict=True))
    bound = sum(w[..., None] * a.bound for w, a in zip(shares, out_allowances, strict=True))
    bound = bound + (2 * worst_lse + 8 * u) * magnitude
    return Allowance(bound, "merge of partial attentions: sum_b w_b a_b + 2 max_b e_b sum_b w_b |O_b|")


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


def score_perturbation_allowance(q: np.ndarray, k: np.ndarray, v: np.ndarray, score_error: np.ndarray,
                                 **kwargs) -> Allowance:
    """Allowance for float64 softmax(S + E) V against the oracle when |E_ij| <= score_error_i (..., n_q, 1).

    The first-order analysis above with a given score error instead of the
    dot product's: SAFETY * (2 score_error_i sigma_ic + (3 n_k + 4) u (P|V|)_ic).
    """
    result = attention(q, k, v, **kwargs)
    _, spread, abs_weighted = _first_order_terms(result, q, k, v)
    u = unit_roundoff(np.float64)
    bound = SAFETY * (2 * score_error * spread + (3 * k.shape[2] + 4) * u * abs_weighted)
    return Allowance(bound, "first-order bound for a given score error")


def own_rounding_bound(oracle: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                       out_on_abs_values: np.ndarray, *, dtype: np.dtype | str) -> Allowance:
    """The a-priori bound with the implementation's own weights W in place of the oracle's.

    Whatever weights an implementation applies, rounding its scores and sums moves its output by at
    most (2 (d + 6) u A_i + (3 n_k + 4) u) (|W| |V|)_ic. For an implementation linear in V with
    non-negative weights, |W| |V| is its own output on |V|, `out_on_abs_values`.
    """
    u = unit_roundoff(dtype)
    row_magnitude = _first_order_terms(oracle, q, k, v)[0]
    return Allowance((2 * (q.shape[3] + 6) * u * row_magnitude + (3 * k.shape[2] + 4) * u) * out_on_abs_values,
                     "own rounding with the implementation's weights W: (2(d+6)u*A_i + (3n_k+4)u) |W||V|")


def metamorphic_allowance(first: Allowance, second: Allowance, own_first: Allowance,
                          own_second: Allowance) -> Allowance:
    """Allowance for |out_first - out_second|, two outputs of one implementation that should agree.

    If the implementation is correct, each output is within its oracle allowance
    and the oracles agree: first + second bounds the gap (triangle inequality).
    own_first + own_second (own_rounding_bound) bound the rounding of whatever the
    implementation computes, so a metamorphic property never blames an
    implementation whose output is not attention (another claim's failure) for the
    rounding of that output.
    """
    return difference_allowance(first + own_first, second + own_second)


def difference_allowance(first: Allowance, second: Allowance) -> Allowance:
    """Allowed error of a - b, for a computed within `first` of x and b within `second` of y.

    |(a - b) - (x - y)| <= |a - x| + |b - y| (triangle inequality): the sum. So two results of
    one exact value (x = y) may differ by first + second; a result that must not exceed another
    (x <= y) may exceed it by as much; and results of different exact values are told apart only
    where they differ by more.
    """
    return Allowance(first.bound + second.bound, f"difference of two results: ({first.rule}) + ({second.rule})")


def affine_image_allowance(allowance: Allowance, a: float, x: np.ndarray, b: np.ndarray | float) -> Allowance:
    """Allowed error of a x + b, computed in float64, when x is known to within `allowance` (a scalar, b exact).

    The error carried through is |a| times x's; the float64 product and sum round once each,
    fl(fl(a x) + b) = (a x (1 + d1) + b)(1 + d2), |d| <= u: at most u |a x| + u |a x + b| <= u (2 |a x| + |b|)
    to first order, doubled (SAFETY) for the second-order terms.
    """
    image_rounding = SAFETY * unit_roundoff(np.float64) * (2 * abs(a) * np.abs(x) + np.abs(b))
    return Allowance(abs(a) * allowance.bound + image_rounding,
                     f"|a| ({allowance.rule}) + 2u(2|a x| + |b|) for the float64 a x + b, a = {a:g}")


def cosine_exponent_allowance(scale: float, d: int) -> Allowance:
    """Allowed error of s c, c = 2 |x_i| |x_m| or |x_i| |x_j| - |x_i|^2, with float64 norms of unit vectors of length d.

    A product of two such norms is within unit_vector_allowance(d) of exact (it is a.b of unit
    vectors, rounded no worse); c is twice one product, or the difference of two (difference_allowance):
    either way within 2 unit_vector_allowance(d), so s c within 2 |s| unit_vector_allowance(d).
    """
    unit = unit_vector_allowance(d)
    return Allowance(2 * abs(scale) * unit.bound, f"s x two products of unit-vector norms: 2|s| x ({unit.rule})")


def elementwise_product_allowance(a: np.ndarray, a_allowance: Allowance, b: np.ndarray,
                                  b_allowance: Allowance) -> Allowance:
    """Allowance for a * b (element by element) when a and b are known to within their allowances.

    a b - a* b* = a (b - b*) + b (a - a*) - (a - a*)(b - b*): to first order
    |a| b_allowance + |b| a_allowance (the product of the two allowances is second order).
    """
    return Allowance(np.abs(a) * b_allowance.bound + np.abs(b) * a_allowance.bound,
                     f"product of two results: |a| ({b_allowance.rule}) + |b| ({a_allowance.rule})")


def dropout_survivor_allowance(weights_allowance: Allowance, exact_weights: np.ndarray, p: float,
                               dtype: np.dtype | str) -> Allowance:
    """Allowed |W_ij / (1 - p) - P_ij / (1 - p)| for a weight that survives dropout with rate p.

    W is within `weights_allowance` of P; dividing by 1 - p divides that error by 1 - p, and the
    rescaling rounds once in `dtype`: u P_ij / (1 - p) to first order.
    """
    bound = (weights_allowance.bound + unit_roundoff(dtype) * exact_weights) / (1 - p)
    return Allowance(bound, f"(({weights_allowance.rule}) + u P) / (1 - p), p={p:g}: the weights' allowance "
                            "rescaled, plus 1 ulp of the rescaling")


def value_shift_allowance(shift: float, changed: Allowance, base: Allowance, row_sums: Allowance,
                          magnitude: np.ndarray) -> Allowance:
    """Allowed error of out(V + c) - out(V) against c x rs when the values of one kv head move by c, rs being
    the implementation's own row sums (its output on values all ones).

    Each of the three outputs is within its allowance of what the implementation's own weights W give on
    exact arithmetic (`changed`, `base`, `row_sums`: each the oracle allowance plus own_rounding_bound, as
    metamorphic_allowance takes them, so an implementation whose weights are not softmax's is judged here on
    its structure alone). With the same W in both calls, W(V + c e_g) - W V - c W e_g = 0 exactly, so the
    difference is off by at most changed + base + |c| row_sums; the float64 subtraction and the product c rs
    round once each, u (|out(V + c)| + |out(V)| + |c rs|) = u * magnitude, doubled (SAFETY). A query head that
    reads a fraction f of another kv head moves by f c where the bound is of order n_k u_dtype c: in float16
    at n_k = 40, 0.15 c at most (a-priori), so a leak of 20 % is told from rounding in every dtype.
    """
    u = unit_roundoff(np.float64)
    bound = changed.bound + base.bound + abs(shift) * row_sums.bound + SAFETY * u * magnitude
    return Allowance(bound, f"out(V + c) and out(V) within ({changed.rule}) and ({base.rule}), plus |c| x the "
                            f"row sums' ({row_sums.rule}), c = {shift:.4g}")


def exponent_range(dtype: np.dtype | str, n_k: int) -> float:
    """Largest spread of a row's scores for which every softmax weight is a normal number in `dtype`:
    e^-spread / n_k > tiny. Properties that need strictly positive weights keep scores inside it."""
    return -math.log(float(finfo(dtype).tiny)) - math.log(n_k) - 1.0


K_GRADIENT = 4.0  # FlashAttention's rule for gradients: k = 3-5 times the naive error (DESIGN.md)


@dataclass(frozen=True)
class GradientOracle:
    """The float64 backward of one problem and the error allowed to each gradient."""

    grads: tuple[np.ndarray, np.ndarray, np.ndarray]  # dQ, dK, dV
    allowances: tuple[Allowance, Allowance, Allowance]


def _backward_propagation(result: AttentionResult, q, k, v, d_out, *, u: float, gamma, relative,
                          stored_u: float = 0.0) -> tuple:
    """First-order bounds on |error| of dQ, dK, dV, propagated through the backward's products.

    Each weight carries a relative error `relative` (..., n_q, 1); a length-n sum of products errs by
    gamma(n) times the sum of the magnitudes; every elementwise step by u. With W the applied weights
    (after dropout), z = W / P, D_i = sum_c dO_ic O_ic:
      dV = W^T dO            |e| <= (rel W)^T |dO| + gamma(n_q g) W^T |dO|
      dP = (dO V^T) z        |e| <= gamma(d_v) (|dO| |V|^T) z
      D                      |e| <= (gamma(d_v) + stored_u) sum |dO| |O| + sum |dO| (rel + gamma(n_k)) W|V|
                             (stored_u: the forward's output read back as stored, rounded to its dtype)
      dS = P (dP - D)        |e| <= (rel + 2u) P |dP - D| + P (|e_dP| + |e_D|)
      dQ = s dS K            |e| <= s (|e_dS| |K| + gamma(n_k) |dS| |K|)
      dK = s dS^T Q          |e| <= s (|e_dS|^T |Q| + gamma(n_q g) |dS|^T |Q|)   (g query heads per kv head)
    """
    from specs.gradients import sum_groups  # specs.gradients imports this module's neighbours only

    heads_kv = k.shape[1]
    group = q.shape[1] // heads_kv
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
    d_s = p * centred
    e_ds = (relative + 2 * u) * d_s + p * (e_dp + e_d)
    abs_k, abs_q = np.abs(k_all), np.abs(q)
    e_dq = s * (e_ds @ abs_k + gamma(n_k) * (d_s @ abs_k))
    e_dk = s * (e_ds.swapaxes(-1, -2) @ abs_q + gamma(n_q * group) * (d_s.swapaxes(-1, -2) @ abs_q))
    magnitudes = (s * (d_s @ abs_k), sum_groups(s * (d_s.swapaxes(-1, -2) @ abs_q), heads_kv),
                  sum_groups(w.swapaxes(-1, -2) @ abs_do, heads_kv))
    return (e_dq, sum_groups(e_dk, heads_kv), sum_groups(e_dv, heads_kv)), magnitudes


def gradient_allowance(q, k, v, d_out, *, dtype: np.dtype | str, **kwargs) -> GradientOracle:
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
    magnitude |dS||K|, |dS|^T|Q|, W^T|dO| (FlashAttention rounds P and dS to `dtype` before the products).
    """
    from specs.gradients import attention_backward

    dtype = numpy_dtype(dtype)
    if dtype.name not in SUPPORTED_DTYPES:
        raise ValueError(f"no tolerance rule for dtype {dtype}; supported: {SUPPORTED_DTYPES}")
    result = attention(q, k, v, **kwargs)
    grads = attention_backward(q, k, v, d_out, **kwargs)
    n_k, d = k.shape[2], q.shape[3]
    row_magnitude, _, _ = _first_order_terms(result, q, k, v)
    merge = _merge_magnitude(result, n_k)
    if dtype == np.float64:
        u = unit_roundoff(np.float64)
        relative = (2 * (d + 6) * row_magnitude + (n_k + 4) * (1 + merge)) * u
        errors, _ = _backward_propagation(result, q, k, v, d_out, u=u, gamma=lambda n: n * u, relative=relative)
        floor = n_k * np.finfo(np.float64).tiny * float(np.abs(d_out).max(initial=0.0))
        rule = "float64 a-priori backward bound 2*(propagation with gamma(n)=nu, rel=(2(d+6)A_i+(n_k+4)(1+L_i))u)"
        return GradientOracle(grads, tuple(Allowance(SAFETY * e + floor, rule) for e in errors))
    with np.errstate(all="ignore"):
        naive = attention_backward(*(x.astype(dtype) for x in (q, k, v, d_out)), **kwargs)
    if not all(np.all(np.isfinite(g)) for g in naive):
        raise ToleranceUndefined(f"the naive {dtype} backward overflows on this input")
    u = unit_roundoff(dtype)
    u_a = min(u, unit_roundoff(np.float32))
    relative = LAMBDA * u_a * (math.sqrt(d) * row_magnitude + 2 * merge + 2)
    errors, magnitudes = _backward_propagation(result, q, k, v, d_out, u=u_a,
                                               gamma=lambda n: LAMBDA * math.sqrt(n) * u_a, relative=relative,
                                               stored_u=u)
    tiny = n_k * float(finfo(np.float32).tiny) * float(np.abs(d_out).max(initial=0.0)) + float(
        finfo(dtype).smallest_subnormal)
    allowances = []
    for exact, approx, error, magnitude in zip(grads, naive, errors, magnitudes, strict=True):
        naive_error = np.max(np.abs(approx.astype(np.float64) - exact), axis=-1, keepdims=True)
        floor = error + u * (2 * np.abs(exact) + magnitude) + tiny
        allowances.append(Allowance(
            K_GRADIENT * naive_error + floor,
            f"{dtype}: {K_GRADIENT:g} x the naive {dtype} backward's error of the row (largest "
            f"{float(naive_error.max()):.3g}) + probabilistic floor (float32 inside, LAMBDA={LAMBDA:g})"))
    return GradientOracle(grads, tuple(allowances))


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

