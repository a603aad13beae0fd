"""The forward model: how far an implementation's output (and its log-sum-exp) may be from the oracle.

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
  1e-3 bias on one score moves the output: tests/unit/test_power.py states which slightly
  wrong implementations the rule catches and which are below resolution, and why.

Score modifications beyond the seeds (specs.score_mods) change what a score's error is made of, not how it
  reaches the output. tanh's derivative is at most 1, so a cap never amplifies the dot product's error, but
  evaluating c tanh(s / c) costs up to a few u of c absolutely (through the identity 1 - 2 / (exp(2x) + 1) it
  cancels to u around 0), and adding ALiBi and the bias rounds at u of the partial sums, at most |S| + |ALiBi|
  + |bias|. So each score carries M_i = 4c + max_j |S_ij| + max_j |ALiBi_ij| + max_j |bias_ij| units of u more
  (row i's visible keys, finite entries): the float64 bound adds SAFETY 2 M_i u sigma_ic, and the floor's score
  term adds M_i inside its square. The naive formula in float16 computes the cap, ALiBi and the bias in
  float16 like everything else (specs.reference), so its error, and the K_FORWARD term with it, grows with the
  cap's and the biases' magnitudes as it does with the scores'. A sink adds one logit to the row's maximum and
  sum, errors the sum and normalisation terms already count.

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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specs.dtypes import finfo, numpy_dtype
from specs.memo import Memo
from specs.reference import AttentionResult, attention, repeat_kv

SAFETY = 2.0
K_FORWARD = 2.0
LAMBDA = 5.0  # Hoeffding factor of the probabilistic floor: 2 exp(-LAMBDA^2 / 2) = 7.5e-6 per element
SUPPORTED_DTYPES = ("float64", "float32", "float16", "bfloat16")


class ToleranceUndefined(ValueError):
    """The naive low-precision baseline itself is not finite, so the rule has nothing to scale."""


Term = tuple[str, "np.ndarray | float"]  # a named part of an allowance, shaped like (or broadcasting to) its bound
Model = Callable[..., AttentionResult]  # attention(q, k, v, **kwargs) or a documented deviation's model of it


def merged_terms(*groups: tuple[Term, ...]) -> tuple[Term, ...]:
    """The terms of a sum of allowances: terms of the same name added, in order of first appearance."""
    merged: dict[str, np.ndarray | float] = {}
    for group in groups:
        for name, value in group:
            merged[name] = merged[name] + value if name in merged else value
    return tuple(merged.items())


@dataclass(frozen=True)
class Allowance:
    """Allowed |got - exact| per element, with the rule that produced it (a formula a reader can check) and
    the named terms the bound adds up (empty: the bound is one term, named by the rule), so a failure can say
    which term dominated at its worst element."""

    bound: np.ndarray | float  # shaped like (or broadcasting to) what it bounds; a float bounds every element
    rule: str
    terms: tuple[Term, ...] = ()  # each shaped like (or broadcasting to) the bound; they sum to it

    def parts(self) -> tuple[Term, ...]:
        """The named terms, or the bound itself named by the rule."""
        return self.terms or ((self.rule, self.bound),)

    def __add__(self, other: Allowance) -> Allowance:
        return Allowance(self.bound + other.bound, f"({self.rule}) + ({other.rule})",
                         merged_terms(self.parts(), other.parts()))

    def take(self, index: tuple) -> Allowance:
        """The allowance of a sub-array (same indexing as applied to the output; an array bound)."""
        shape = np.shape(self.bound)
        return Allowance(self.bound[index], self.rule,
                         tuple((name, np.broadcast_to(value, shape)[index]) for name, value in self.terms))

    def largest(self) -> Allowance:
        """The largest element's bound (and its terms there), for every element."""
        position = np.unravel_index(int(np.argmax(self.bound)), np.shape(self.bound))
        terms = self.at(position, np.shape(self.bound)) if self.terms else ()
        return Allowance(float(np.max(self.bound)), f"largest of ({self.rule})", terms)

    def carried(self, transform: Callable[[np.ndarray | float], np.ndarray | float], rule: str, *,
                prefix: str = "") -> Allowance:
        """This allowance through a linear map with non-negative coefficients (a product with |R|, a scaling):
        the bound and each term (named `prefix` + its name) mapped alike."""
        shape = np.shape(self.bound)
        return Allowance(transform(self.bound), rule, tuple((prefix + name, transform(np.broadcast_to(value, shape)))
                                                            for name, value in self.parts()))

    def plus(self, bound: np.ndarray | float, rule: str, terms: tuple[Term, ...]) -> Allowance:
        """This allowance plus `bound` (made of `terms`), under the rule of the sum."""
        return Allowance(self.bound + bound, rule, merged_terms(self.parts(), terms))

    def at(self, position: tuple, shape: tuple[int, ...]) -> tuple[tuple[str, float], ...]:
        """Each term's value at `position` of an array of `shape` (which the bound broadcasts to)."""
        return tuple((name, float(np.broadcast_to(value, shape)[position])) for name, value in self.parts())


def unit_roundoff(dtype: np.dtype | str) -> float:
    """u = eps / 2 = 2^-p for p significand bits (the implicit one included): 2^-53, 2^-24, 2^-11, 2^-8."""
    return float(finfo(dtype).eps) / 2


def rounding_below_normal(magnitude: np.ndarray, error: np.ndarray | float, dtype: np.dtype | str) -> np.ndarray:
    """The absolute part of rounding to `dtype` a value of size `magnitude` computed with up to `error`: where it
    may lie below the smallest normal, rounding to nearest errs by up to half the smallest subnormal, and by no more
    than the value itself (under half it rounds to 0); elsewhere 0 (the relative u |x| bounds it there)."""
    limits = finfo(dtype)
    may_be_subnormal = magnitude - error < float(limits.tiny)
    return np.where(may_be_subnormal, np.minimum(magnitude + error, float(limits.smallest_subnormal) / 2), 0.0)


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


def _modification_magnitude(result: AttentionResult) -> np.ndarray | float:
    """M_i of the module docstring (..., n_q, 1): what the score modifications' own rounding is proportional to;
    0 without any."""
    mods = result.mods
    if not mods.any:
        return 0.0
    visible = np.isfinite(result.scores)

    def largest(x: np.ndarray) -> np.ndarray:
        return np.max(np.where(visible, np.abs(x), 0.0), axis=-1, keepdims=True)

    magnitude = 4 * mods.softcap + largest(result.scores)
    if mods.alibi_slopes is not None:  # |i + offset - j| <= |i - j| + |n_k - n_q| in either alignment
        n_q, n_k = result.scores.shape[-2:]
        distance = np.abs(np.arange(n_k)[None, :] - np.arange(n_q)[:, None]) + abs(n_k - n_q)
        magnitude = magnitude + largest(mods.alibi_slopes[:, :, None, None] * distance)
    if mods.bias is not None:
        magnitude = magnitude + largest(np.where(np.isfinite(mods.bias), mods.bias, 0.0))
    return magnitude


def _merge_magnitude(result: AttentionResult, n_k: int) -> np.ndarray:
    """L_i = max_j |S_ij| + log n_k + 1 over visible keys (..., n_q, 1): bounds |lse| of any key split."""
    visible = np.isfinite(result.scores)
    largest = np.max(np.where(visible, np.abs(result.scores), 0.0), axis=-1, keepdims=True)
    return largest + math.log(n_k) + 1.0


def _a_priori_bound(result: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                    inside: np.dtype | str = np.float64) -> Allowance:
    """The worst-case bound of the module docstring for a computation carried out in `inside`, with its terms."""
    u = unit_roundoff(inside)
    n_k, d = k.shape[2], q.shape[3]
    row_magnitude, spread, abs_weighted = _first_order_terms(result, q, k, v)
    merge = (n_k + 4) * _merge_magnitude(result, n_k)
    floor = n_k * float(finfo(inside).tiny) * float(np.abs(v).max())
    modification = SAFETY * 2 * u * _modification_magnitude(result) * spread
    bound = (SAFETY * (2 * (d + 6) * u * row_magnitude * spread + (3 * n_k + 4 + merge) * u * abs_weighted)
             + modification + floor)
    terms = (("score rounding", SAFETY * 2 * (d + 6) * u * row_magnitude * spread),
             *((("score modification rounding", modification),) if result.mods.any else ()),
             ("sum and normalisation rounding", SAFETY * (3 * n_k + 4) * u * abs_weighted),
             ("log-sum-exp merge rounding", SAFETY * merge * u * abs_weighted),
             ("flushed subnormal weights", floor))
    return Allowance(bound, f"{numpy_dtype(inside).name} a-priori bound "
                            "2*(2(d+6)u*A_i*sigma + (3n_k+4+(n_k+4)L_i)u*P|V|)", terms)


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
    float32 = _a_priori_bound(result, q, k, v, inside=np.float32)
    float32_terms = 2 * float32.bound
    storage_terms = SAFETY * u * (result.applied_weights @ np.abs(repeat_kv(v, q.shape[1] // v.shape[1]))
                                  + 2 * np.abs(result.out))
    subnormal = 2 * float(finfo(dtype).smallest_subnormal)
    name = numpy_dtype(dtype).name
    terms = (*((f"2 x float32 {term}", 2 * value) for term, value in float32.terms),
             (f"P and the output rounded to {name}", storage_terms), (f"2 x {name}'s smallest subnormal", subnormal))
    return Allowance(float32_terms + storage_terms + subnormal,
                     f"both in float32 inside (2 x the float32 a-priori bound) + {SAFETY:g}u(P|V| + 2|O|) for P "
                     f"and the output rounded to {name}", terms)


def merge_order_allowance(result: AttentionResult, v: np.ndarray, dtype: np.dtype | str, merges: int) -> Allowance:
    """Allowed |O_1 - O_2| between two merges of the same `merges` partial results (out_b, lse_b) in two orders:
    ring attention on keys whose shards were exchanged among the ranks, each block's partial result the same bits.

    The exact merge of given partial results does not depend on their order, and each chain of pairwise logaddexp
    merges is within (s + 4) u_a L_i (P|V|)_ic of it (the module docstring's merge term, s = `merges`), so the two
    chains are within twice that; each output then rounds once to `dtype` (2 u |O_ic| together); a block's weight
    below the accumulator's smallest normal may be flushed in one order and not the other (s tiny max|v|), and the
    output's spacing at 0 is `dtype`'s smallest subnormal. No score or sum term: the blocks' own results are equal,
    so only the merge's rounding may differ."""
    dtype = numpy_dtype(dtype)
    u = unit_roundoff(dtype)
    u_a = min(u, unit_roundoff(np.float32))
    weights = result.applied_weights
    abs_weighted = weights @ np.abs(repeat_kv(v, weights.shape[1] // v.shape[1]))
    chains = SAFETY * 2 * (merges + 4) * u_a * _merge_magnitude(result, v.shape[2]) * abs_weighted
    output = 2 * u * np.abs(result.out)
    inner = np.float32 if u_a < u else dtype
    underflow = merges * float(finfo(inner).tiny) * float(np.abs(v).max(initial=0.0)) + float(
        finfo(dtype).smallest_subnormal)
    return Allowance(chains + output + underflow, "two merge orders: SAFETY*2(s+4)u_a*L_i*P|V| + 2u|O| + s tiny max|v|",
                     (("log-sum-exp merge rounding, both orders", chains), ("output rounding", output),
                      ("underflow", underflow)))


def _rounding_floor(result: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                    dtype: np.dtype) -> tuple[np.ndarray, tuple]:
    """The probabilistic floor of the module docstring (storage in `dtype`, float32 inside), and its terms."""
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
    per_key = d * a**2 + b + (2 * np.abs(scores) + np.abs(scores - row_max) + 2 + _modification_magnitude(result)) ** 2
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
    output = 2 * u * np.abs(out)
    merge = 4 * u_a * _merge_magnitude(result, n_k) * abs_weighted
    probabilistic = LAMBDA * np.sqrt(variance)
    terms = ((f"probabilistic rounding floor (LAMBDA={LAMBDA:g})", probabilistic), ("output rounding", output),
             ("log-sum-exp merge rounding", merge), ("underflow", underflow))
    return probabilistic + (output + merge + underflow), terms


def _low_precision_bound(
    result: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray, dtype: np.dtype, kwargs: dict,
    past_range: bool = False, model: Model = attention,
) -> Allowance:
    with np.errstate(all="ignore"):
        naive = model(q.astype(dtype), k.astype(dtype), v.astype(dtype), **kwargs).out
    baseline = term = f"naive {dtype}"
    if not np.all(np.isfinite(naive)) and past_range:
        # the scores leave the dtype's range: no same-precision formula is finite, but a kernel that stores in
        # `dtype` and computes in float32 (FlashAttention's design, the floor's model) is: it is the baseline
        with np.errstate(all="ignore"):
            inside = model(*(x.astype(dtype).astype(np.float32) for x in (q, k, v)), **kwargs).out
            naive = inside.astype(dtype)
        baseline = f"{dtype} storage, float32 inside (the naive {dtype} formula overflows here)"
        term = f"{dtype}-storage float32-inside"
    if not np.all(np.isfinite(naive)):
        raise ToleranceUndefined(f"the naive {dtype} formula overflows on this input")
    naive_error = np.max(np.abs(naive.astype(np.float64) - result.out), axis=-1, keepdims=True)
    floor, floor_terms = _rounding_floor(result, q, k, v, dtype)
    scaled = K_FORWARD * naive_error
    return Allowance(
        scaled + floor,
        f"{dtype}: {K_FORWARD:g} x the {baseline} error of the row (largest {float(naive_error.max()):.3g}) "
        f"+ probabilistic floor (storage {dtype}, float32 inside, LAMBDA={LAMBDA:g})",
        ((f"{K_FORWARD:g} x {term} error of the row", scaled), *floor_terms),
    )


def forward_allowance(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    dtype: np.dtype | str,
    oracle: AttentionResult | None = None,
    past_range: bool = False,
    model: Model = attention,
    **kwargs,
) -> tuple[AttentionResult, Allowance]:
    """The float64 oracle for these inputs and the error allowed to an impl computing in `dtype`.

    q, k, v are the values the implementation received, held in float64
    (inputs already rounded to `dtype` and back), so input rounding is not
    charged to the implementation. Where the naive `dtype` formula overflows the rule has no baseline
    (ToleranceUndefined), unless past_range: then the baseline is the formula with `dtype` storage and
    float32 inside, the bound a kernel that keeps its scores in float32 must meet past `dtype`'s range.
    `model`: the formula the rule is applied to, the oracle's by default; a documented deviation's model
    (specs.deviations) is judged by the same rule, its float64 result in place of the oracle's and its naive
    `dtype` run in place of the naive formula's.
    """
    dtype = numpy_dtype(dtype)
    if dtype.name not in SUPPORTED_DTYPES:
        raise ValueError(f"no tolerance rule for dtype {dtype}; supported: {SUPPORTED_DTYPES}")
    if oracle is None:  # a pure function of the inputs: computed once per distinct problem (specs.memo)
        return _FORWARD_MEMO(q, k, v, dtype.name, past_range, kwargs, model)
    return _forward_allowance(q, k, v, dtype.name, past_range, kwargs, model, oracle)


def _forward_allowance(q: np.ndarray, k: np.ndarray, v: np.ndarray, dtype_name: str, past_range: bool, kwargs: dict,
                       model: Model = attention,
                       oracle: AttentionResult | None = None) -> tuple[AttentionResult, Allowance]:
    dtype = numpy_dtype(dtype_name)
    result = oracle if oracle is not None else model(q, k, v, **kwargs)
    if dtype == np.float64:
        return result, _a_priori_bound(result, q, k, v)
    return result, _low_precision_bound(result, q, k, v, dtype, kwargs, past_range, model)


_FORWARD_MEMO = Memo(_forward_allowance, raised=(ToleranceUndefined,))


def lse_allowance(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, dtype: np.dtype | str, oracle: AttentionResult,
    model: Model = attention, **kwargs
) -> Allowance:
    """Allowed |lse_i - oracle lse_i| (shape (..., n_q)) for an implementation computing in `dtype`.

    lse = m + log(l): the row maximum carries the score error, log(l) the row
    sum's relative error (n_k u, plus 1 ulp of exp and log), the final sum 1 ulp
    of |lse|. float64: SAFETY * ((d + 6) u A_i + (n_k + 4) u + u |lse_i|).
    Lower precisions: K_FORWARD x the naive formula's largest lse error plus
    sqrt(d) u A_i + (n_k + 4) u + u |lse_i|, as for the output. `model` as forward_allowance's, `oracle` its result.
    """
    dtype = numpy_dtype(dtype)
    u = unit_roundoff(dtype)
    n_k, d = k.shape[2], q.shape[3]
    row_magnitude = _first_order_terms(oracle, q, k, v)[0][..., 0]
    finite = np.isfinite(oracle.lse)
    magnitude = np.where(finite, np.abs(oracle.lse), 0.0)
    # The score modifications round each score by a few u of M_i (module docstring); d lse / d S_ij = P_ij sums to
    # at most 1, so the lse moves by at most that much: 2 u M_i, as in the output's bound.
    modification = 2 * u * np.asarray(_modification_magnitude(oracle))[..., 0] if oracle.mods.any else 0.0
    modification_terms = (("score modification rounding", SAFETY * modification),) if oracle.mods.any else ()
    if dtype == np.float64:
        terms = (("score rounding", SAFETY * (d + 6) * u * row_magnitude), *modification_terms,
                 ("row sum rounding", SAFETY * (n_k + 4) * u), ("lse's own rounding", SAFETY * u * magnitude))
        return Allowance(SAFETY * ((d + 6) * u * row_magnitude + modification + (n_k + 4) * u + u * magnitude),
                         "float64 lse: 2*((d+6)u*A_i + (n_k+4)u + u|lse_i|)", terms)
    with np.errstate(all="ignore"):
        naive = model(q.astype(dtype), k.astype(dtype), v.astype(dtype), **kwargs).lse.astype(np.float64)
    if not np.all(np.isfinite(naive) == finite):
        raise ToleranceUndefined(f"the naive {dtype} log-sum-exp overflows on this input")
    naive_error = float(np.max(np.abs(np.where(finite, naive - oracle.lse, 0.0)), initial=0.0))
    terms = ((f"{K_FORWARD:g} x naive {dtype} lse error", K_FORWARD * naive_error),
             ("score rounding", math.sqrt(d) * u * row_magnitude), *modification_terms,
             ("row sum rounding", (n_k + 4) * u), ("lse's own rounding", u * magnitude))
    return Allowance(K_FORWARD * naive_error + math.sqrt(d) * u * row_magnitude + SAFETY * modification
                     + (n_k + 4) * u + u * magnitude,
                     f"{dtype} lse: {K_FORWARD:g} x the naive {dtype} lse error ({naive_error:.3g}) "
                     "+ sqrt(d)u*A_i + (n_k+4)u + u|lse_i|", terms)


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
    scores, sums = 2 * (q.shape[3] + 6) * u * row_magnitude, (3 * k.shape[2] + 4) * u
    return Allowance((scores + sums) * out_on_abs_values,
                     "own rounding with the implementation's weights W: (2(d+6)u*A_i + (3n_k+4)u) |W||V|",
                     (("own score rounding", scores * out_on_abs_values),
                      ("own sum rounding", sums * out_on_abs_values)))


def exponent_range(dtype: np.dtype | str, n_k: int) -> float:
    """Largest spread of a row's scores for which every softmax weight is a normal number in `dtype`:
    e^-spread / n_k > tiny. Properties that need strictly positive weights keep scores inside it."""
    return -math.log(float(finfo(dtype).tiny)) - math.log(n_k) - 1.0
