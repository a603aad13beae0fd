"""The propagation algebra: allowances carried through the float64 computations a property makes from
checked results (products, sums, differences, affine images, merges of partial results, rescalings)."""

from __future__ import annotations

import numpy as np

from specs.tolerance.model import (
    SAFETY,
    Allowance,
    merged_terms,
    unit_roundoff,
)


def product_allowance(left_allowance: Allowance, left: np.ndarray, right: np.ndarray) -> Allowance:
    """Allowance for left @ right (computed in float64) when `left` is known to within `left_allowance`.

    |L R - L* R| <= |L - L*| |R| + gamma_n |L| |R|, the second term being the
    float64 product's own rounding (n = the contracted length, counted twice).
    """
    n = right.shape[-2]
    u = unit_roundoff(np.float64)
    abs_right = np.abs(right)
    rounding = 2 * n * u * (np.abs(left) @ abs_right)
    rule = f"({left_allowance.rule}) carried through a product"
    carried = left_allowance.carried(lambda bound: bound @ abs_right, rule)
    return carried.plus(rounding, rule, (("float64 product rounding", rounding),))


def row_sum_allowance(weights_allowance: Allowance, weights: np.ndarray) -> Allowance:
    """Allowance for the row sums of weights known to within `weights_allowance` (shape (..., 1))."""
    return product_allowance(weights_allowance, weights, np.ones((weights.shape[-1], 1)))


def dot_product_allowance(a: np.ndarray, b: np.ndarray) -> Allowance:
    """Allowed error of the float64 products a @ b.T: gamma_{d+1} |a| |b|^T (Higham § 3.1)."""
    d = a.shape[-1]
    return Allowance((d + 1) * unit_roundoff(np.float64) * (np.abs(a) @ np.abs(b).swapaxes(-1, -2)),
                     "float64 dot products a @ b^T: (d+1)u |a| |b|^T (gamma_{d+1})")


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
    return first.plus(second.bound, f"difference of two results: ({first.rule}) + ({second.rule})", second.parts())


def affine_image_allowance(allowance: Allowance, a: float, x: np.ndarray, b: np.ndarray | float) -> Allowance:
    """Allowed error of a x + b, computed in float64, when x is known to within `allowance` (a scalar, b exact).

    The error carried through is |a| times x's; the float64 product and sum round once each,
    fl(fl(a x) + b) = (a x (1 + d1) + b)(1 + d2), |d| <= u: at most u |a x| + u |a x + b| <= u (2 |a x| + |b|)
    to first order, doubled (SAFETY) for the second-order terms.
    """
    image_rounding = SAFETY * unit_roundoff(np.float64) * (2 * abs(a) * np.abs(x) + np.abs(b))
    rule = f"|a| ({allowance.rule}) + 2u(2|a x| + |b|) for the float64 a x + b, a = {a:g}"
    carried = allowance.carried(lambda bound: abs(a) * bound, rule, prefix="|a| x ")
    return carried.plus(image_rounding, rule, (("float64 a x + b rounding", image_rounding),))


def elementwise_product_allowance(a: np.ndarray, a_allowance: Allowance, b: np.ndarray,
                                  b_allowance: Allowance) -> Allowance:
    """Allowance for a * b (element by element) when a and b are known to within their allowances.

    a b - a* b* = a (b - b*) + b (a - a*) - (a - a*)(b - b*): to first order
    |a| b_allowance + |b| a_allowance (the product of the two allowances is second order).
    """
    rule = f"product of two results: |a| ({b_allowance.rule}) + |b| ({a_allowance.rule})"
    first = b_allowance.carried(lambda bound: np.abs(a) * bound, rule, prefix="|a| x ")
    second = a_allowance.carried(lambda bound: np.abs(b) * bound, rule, prefix="|b| x ")
    return first.plus(second.bound, rule, second.terms)


def dropout_survivor_allowance(weights_allowance: Allowance, exact_weights: np.ndarray, p: float,
                               dtype: np.dtype | str) -> Allowance:
    """Allowed |W_ij / (1 - p) - P_ij / (1 - p)| for a weight that survives dropout with rate p.

    W is within `weights_allowance` of P; dividing by 1 - p divides that error by 1 - p, and the
    rescaling rounds once in `dtype`: u P_ij / (1 - p) to first order.
    """
    rescaling = unit_roundoff(dtype) * exact_weights
    bound = (weights_allowance.bound + rescaling) / (1 - p)
    rule = (f"(({weights_allowance.rule}) + u P) / (1 - p), p={p:g}: the weights' allowance rescaled, plus 1 ulp "
            "of the rescaling")
    terms = merged_terms(weights_allowance.carried(lambda b: b / (1 - p), rule).terms,
                         (("rescaling rounding", rescaling / (1 - p)),))
    return Allowance(bound, rule, terms)


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
    rounding = SAFETY * u * magnitude
    bound = changed.bound + base.bound + abs(shift) * row_sums.bound + rounding
    rule = (f"out(V + c) and out(V) within ({changed.rule}) and ({base.rule}), plus |c| x the row sums' "
            f"({row_sums.rule}), c = {shift:.4g}")
    scaled = row_sums.carried(lambda b: abs(shift) * b, rule, prefix="|c| x row sums' ")
    terms = merged_terms(changed.parts(), base.parts(), scaled.terms, (("float64 subtraction rounding", rounding),))
    return Allowance(bound, rule, terms)
