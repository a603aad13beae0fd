"""The tolerance model: loose enough for every correct implementation, tight enough to tell precisions apart."""

from __future__ import annotations

import numpy as np
import pytest

from impls.numpy.numpy_tiled import tiled_attention
from specs import tolerance
from specs.dtypes import numpy_dtype
from specs.problems import SCORE_STYLES, VALUE_STYLES, build
from specs.reference import attention
from specs.tolerance import Allowance, ToleranceUndefined, forward_allowance
from tests.fixtures.every_allowance import every_allowance
from tests.fixtures.outside_impls import einsum_attention

torch = pytest.importorskip("torch")
F = torch.nn.functional

CASES = [dict(batch=2, heads=4, heads_kv=2, n_q=n_q, n_k=n_k, d=d, d_v=d, seed=seed, score_style=style,
              value_style=values)
         for seed, (n_q, n_k, d) in enumerate([(1, 1, 1), (17, 33, 5), (65, 64, 33), (129, 130, 80)])
         for style in SCORE_STYLES for values in VALUE_STYLES]


def _worst_ratio(got, result, allowance):
    """max |error| / allowed; an exact element counts 0 even where nothing is allowed."""
    error = np.abs(got - result.out)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.max(np.where(error == 0, 0.0, error / allowance.bound)))


def _torch_sdpa(q, k, v):
    group = q.shape[1] // k.shape[1]
    tensors = [torch.from_numpy(np.ascontiguousarray(x)) for x in (q, np.repeat(k, group, 1), np.repeat(v, group, 1))]
    return F.scaled_dot_product_attention(*tensors).numpy()


FLOAT64_CORRECT = {
    "einsum": einsum_attention,
    "online softmax, B_c = 1": lambda q, k, v: tiled_attention(q, k, v, block_rows=3, block_cols=1),
    "torch sdpa": _torch_sdpa,
}


@pytest.mark.parametrize("name", sorted(FLOAT64_CORRECT))
def test_float64_bound_holds_for_correct_float64_code(name):
    worst = 0.0
    for case in CASES:
        p = build(**case)
        result, allowance = forward_allowance(p.q, p.k, p.v, dtype="float64")
        worst = max(worst, _worst_ratio(FLOAT64_CORRECT[name](p.q, p.k, p.v), result, allowance))
    assert worst <= 1.0


def _float32_softmax(q, k, v):
    scores = attention(q, k, v).scores.astype(np.float32)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    group = q.shape[1] // k.shape[1]
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float64) @ np.repeat(v, group, axis=1)


def test_float64_bound_catches_a_float32_softmax_on_ordinary_inputs():
    caught = 0
    ordinary = [c for c in CASES if c["score_style"] == "normal" and c["n_k"] > 1]
    for case in ordinary:
        p = build(**case)
        result, allowance = forward_allowance(p.q, p.k, p.v, dtype="float64")
        caught += _worst_ratio(_float32_softmax(p.q, p.k, p.v), result, allowance) > 1.0
    assert caught == len(ordinary)


def test_float32_rule_accepts_correct_float32_code_and_rejects_float16_work():
    for case in CASES:
        p = build(**case)
        q, k, v = (x.astype(np.float32) for x in (p.q, p.k, p.v))
        exact = tuple(x.astype(np.float64) for x in (q, k, v))
        result, allowance = forward_allowance(*exact, dtype="float32")
        assert _worst_ratio(tiled_attention(q, k, v, block_rows=5, block_cols=1), result, allowance) <= 1.0
        assert _worst_ratio(_torch_sdpa(q, k, v), result, allowance) <= 1.0
        if case["score_style"] == "normal" and case["n_k"] > 1 and case["value_style"] != "large":
            half = attention(*(x.astype(np.float16) for x in (q, k, v))).out
            assert _worst_ratio(half.astype(np.float64), result, allowance) > 1.0


def test_low_precision_rule_is_undefined_where_the_naive_formula_overflows():
    p = build(n_q=4, n_k=4, d=8, score_style="huge", seed=1)
    with pytest.raises(ToleranceUndefined, match="overflows"):
        forward_allowance(p.q, p.k, p.v, dtype="float16")


@pytest.mark.parametrize("d_out_value, defined", [(60000.0, False), (1000.0, True)])
def test_gradient_rule_is_undefined_where_the_exact_gradient_is_past_the_dtypes_range(d_out_value, defined):
    """Eight queries with equal scores over two keys: dV = 8 x 1/2 x dO. At dO = 60000 (a float16) the exact dV
    is 240000, past float16's largest 65504, where a correct float16 backward returns inf (found by the dev
    profile: dQ -inf against an exact -78464 on torch-flash-tiled-bottom-right[float16]); at 1000 the rule holds."""
    rng = np.random.default_rng(3)
    q = np.zeros((1, 1, 8, 4))
    k, v = rng.standard_normal((2, 1, 1, 2, 4))
    d_out = np.full((1, 1, 8, 4), d_out_value)
    if defined:
        oracle = tolerance.gradient_allowance(q, k, v, d_out, dtype="float16")
        assert np.allclose(oracle.grads[2], 4 * d_out_value) and np.all(np.isfinite(oracle.allowances[2].bound))
    else:
        with pytest.raises(ToleranceUndefined, match=r"exact gradient \(240000\) is past float16's largest"):
            tolerance.gradient_allowance(q, k, v, d_out, dtype="float16")


def test_unsupported_dtype_is_named():
    p = build()
    with pytest.raises(ValueError, match=r"no tolerance rule for dtype int32; supported: .*'bfloat16'"):
        forward_allowance(p.q, p.k, p.v, dtype="int32")


@pytest.mark.parametrize("dtype, significand_bits", [("float64", 53), ("float32", 24), ("float16", 11),
                                                     ("bfloat16", 8)])
def test_unit_roundoff_is_two_to_minus_the_significand_bits(dtype, significand_bits):
    assert tolerance.unit_roundoff(dtype) == 2.0**-significand_bits


@pytest.mark.parametrize("n_k", [128, 1024])
def test_bfloat16_allowance_is_float16s_scaled_by_their_unit_roundoffs(n_k):
    """On inputs both dtypes hold exactly (rounded to bfloat16, inside float16's range), every term of the rule
    that is not float32's inside scales with u: the allowances differ by u_bf16 / u_f16 = 2^3, per element."""
    p = build(batch=1, heads=2, heads_kv=2, n_q=128, n_k=n_k, d=64, d_v=64, seed=7)
    rounded = (x.astype(numpy_dtype("bfloat16")).astype(np.float64) for x in (p.q, p.k, p.v))
    tiny = float(np.finfo(np.float16).tiny)  # below it float16 keeps fewer than bfloat16's 8 bits
    exact = tuple(np.where(np.abs(x) < tiny, 0.0, x) for x in rounded)
    assert all(np.array_equal(x.astype(np.float16).astype(np.float64), x) for x in exact)
    bounds = {dtype: forward_allowance(*exact, dtype=dtype)[1].bound for dtype in ("float16", "bfloat16")}
    expected = tolerance.unit_roundoff("bfloat16") / tolerance.unit_roundoff("float16")
    ratio = np.median(bounds["bfloat16"] / bounds["float16"])
    assert abs(np.log2(ratio / expected)) < 0.25, f"median ratio {ratio:.3g}, expected {expected:g}"


def test_bfloat16_rule_is_defined_where_float16_overflows_and_still_tells_weights_apart():
    """float32's exponent range: huge scores leave float16's naive formula without a rule, not bfloat16's;
    the allowance stays far below the outputs' spread, so the mean of the values (uniform weights) fails."""
    p = build(batch=1, heads=2, heads_kv=2, n_q=16, n_k=33, d=8, d_v=8, score_style="huge", seed=1)
    with pytest.raises(ToleranceUndefined):
        forward_allowance(p.q, p.k, p.v, dtype="float16")
    exact = tuple(x.astype(numpy_dtype("bfloat16")).astype(np.float64) for x in (p.q, p.k, p.v))
    result, allowance = forward_allowance(*exact, dtype="bfloat16")
    assert np.all(np.isfinite(allowance.bound))
    uniform = np.broadcast_to(exact[2].mean(axis=-2, keepdims=True), result.out.shape)
    assert _worst_ratio(uniform, result, allowance) > 1.0


def test_naive_bfloat16_formula_sums_in_float32():
    """The baseline of the bfloat16 rule: NumPy sums bfloat16 in bfloat16 (4096 ones give 256), the naive
    formula in float32, so 4096 equal scores get weights 2^-12 that sum to exactly 1."""
    bfloat16 = numpy_dtype("bfloat16")
    ones = np.ones((1, 1, 1, 4096), bfloat16)
    assert float(ones.sum()) == 256.0
    q, k = np.zeros((1, 1, 2, 4), bfloat16), np.zeros((1, 1, 4096, 4), bfloat16)
    result = attention(q, k, np.ones((1, 1, 4096, 3), bfloat16))
    assert result.out.dtype == bfloat16 and result.weights.dtype == bfloat16
    assert np.all(result.weights.astype(np.float64) == 2.0**-12) and np.all(result.out.astype(np.float64) == 1.0)


def test_allowances_add_and_slice():
    a = Allowance(np.ones((2, 3)), "a")
    b = Allowance(2 * np.ones((2, 3)), "b")
    total = a + b
    assert np.all(total.bound == 3) and total.rule == "(a) + (b)"
    assert total.take((slice(None), 0)).bound.shape == (2,)


def test_every_allowed_error_is_an_allowance_naming_its_rule():
    found = every_allowance()
    public = {name for name in dir(tolerance) if name.endswith(("_allowance", "_bound")) and not name.startswith("_")}
    assert public <= set(found), f"not covered here: {sorted(public - set(found))}"
    for name, allowance in found.items():
        assert isinstance(allowance, Allowance), f"{name} returned a {type(allowance).__name__}"
        assert allowance.rule and np.all(np.asarray(allowance.bound) >= 0), name


def test_named_rules_give_the_numbers_of_the_factors_they_name():
    """The rules that replaced inline factors in the properties allow exactly what those factors allowed."""
    a = Allowance(np.array([[1.0, 3.0]]), "a")
    assert np.array_equal(tolerance.difference_allowance(a, a).bound, 2 * a.bound)
    assert tolerance.difference_allowance(a.largest(), a.largest()).bound == 2 * a.bound.max()
    assert tolerance.cosine_exponent_allowance(0.5, 4).bound == 2 * 0.5 * tolerance.unit_vector_allowance(4).bound
    shifted = tolerance.value_shift_allowance(10.0, a, a, a, np.array([[4.0, 0.0]]))
    assert np.array_equal(shifted.bound, 12 * a.bound + 2 * tolerance.unit_roundoff("float64") * np.array([[4.0, 0]]))
    exact = np.array([[0.25, 0.75]])
    assert np.array_equal(tolerance.dropout_survivor_allowance(a, exact, 0.1, "float32").bound,
                          (a.bound + tolerance.unit_roundoff("float32") * exact) / 0.9)


def _float32_backward(q, k, v, d_out, scale, *, flush=None, with_d: bool = True, stored=None, operands=None):
    """dQ, dK, dV in float32 (`flush`: a dtype, weights and dS below its smallest normal flushed to 0: float32's as
    XLA's CPU backend does); `with_d` False: dS = P dP, the row term D_i dropped (a wrong backward). `stored`: a
    dtype the output is stored in, D_i read from it as FlashAttention's backward does (sum_c dO_ic O_ic).
    `operands`: a dtype P and dS are rounded to before their products, as FlashAttention's backward does."""
    q, k, v, d_out = (x.astype(np.float32) for x in (q, k, v, d_out))
    tiny = np.finfo(flush or np.float32).tiny
    s = q @ k.swapaxes(-1, -2) * np.float32(scale)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    if flush is not None:
        p = np.where(np.abs(p) < tiny, np.float32(0), p)
    d_p = d_out @ v.swapaxes(-1, -2)
    row_dot = (p * d_p).sum(axis=-1, keepdims=True)
    if stored is not None:
        row_dot = (d_out * (p @ v).astype(stored).astype(np.float32)).sum(axis=-1, keepdims=True)
    d_s = p * (d_p - row_dot if with_d else d_p)
    if flush is not None:
        d_s = np.where(np.abs(d_s) < tiny, np.float32(0), d_s)
    if operands is not None:
        p, d_s = (x.astype(operands).astype(np.float32) for x in (p, d_s))
    heads_kv = k.shape[1]  # grouped heads: dK and dV summed over each group
    d_k = (d_s.swapaxes(-1, -2) @ q * np.float32(scale)).reshape(q.shape[0], heads_kv, -1, *k.shape[2:]).sum(axis=2)
    d_v = (p.swapaxes(-1, -2) @ d_out).reshape(q.shape[0], heads_kv, -1, *v.shape[2:]).sum(axis=2)
    return d_s @ k * np.float32(scale), d_k, d_v


def test_a_float32_backward_that_flushes_subnormals_is_within_the_allowance_and_a_wrong_one_is_not():
    """Sharp scores at scale 10 leave weights below 1.2e-38: flushed, they and the dS they make are off by up to
    float32's smallest normal each, which dQ = s dS K and dK = s dS^T Q carry (the allowance's "flushed weights
    through dS" term, without which dK fails here); dropping D_i from dS is still refused."""
    p = build(batch=2, heads=2, n_q=17, n_k=17, d=16, d_v=16, score_style="spiky", value_style="integers",
              scale=10.0)
    d_out = np.random.default_rng(0).standard_normal(p.q.shape[:3] + (p.v.shape[-1],)).astype(np.float32)
    exact = [x.astype(np.float32).astype(np.float64) for x in (p.q, p.k, p.v)]
    oracle = tolerance.gradient_allowance(*exact, d_out.astype(np.float64), dtype="float32", scale=10.0)
    flushed = _float32_backward(*exact, d_out, 10.0, flush=np.float32)
    errors = [np.abs(g.astype(np.float64) - exact_g) for g, exact_g in zip(flushed, oracle.grads, strict=True)]
    assert all(np.all(e <= a.bound) for e, a in zip(errors, oracle.allowances, strict=True))
    without = [a.bound - dict(a.parts())["flushed weights through dS"] for a in oracle.allowances]
    assert any(np.any(e > w) for e, w in zip(errors, without, strict=True)), "the flush never mattered here"
    wrong = _float32_backward(*exact, d_out, 10.0, flush=np.float32, with_d=False)
    assert any(np.any(np.abs(g.astype(np.float64) - exact_g) > a.bound)
               for g, exact_g, a in zip(wrong, oracle.grads, oracle.allowances, strict=True))


def test_a_backward_reading_a_subnormal_float16_output_is_within_the_allowance_and_a_wrong_one_is_not():
    """Sharp scores whose row weights sit on a zero value leave outputs below float16's smallest normal (6.1e-5):
    stored in float16 they are off by up to half its smallest subnormal (3e-8) absolutely, over a hundred times their
    u |O|, and D_i = sum_c dO_ic O_ic read from them carries that into dQ and dK (the allowance's "stored output's
    underflow through D" term, without which dQ fails here: the Triton record's float16 backward met it under
    softcap; dO of size 16 takes D's error past the half subnormal each subnormal dS entry's own rounding is
    allowed); dropping D_i is still refused."""
    p = build(n_q=26, n_k=26, seed=74657, score_style="spiky", value_style="integers", scale=5.0)
    exact = [x.astype(np.float16).astype(np.float64) for x in (p.q, p.k, p.v)]
    d_out = (16 * np.random.default_rng(74657).standard_normal(p.q.shape[:3] + (p.v.shape[-1],))).astype(np.float16)
    oracle = tolerance.gradient_allowance(*exact, d_out.astype(np.float64), dtype="float16", scale=5.0)
    assert np.any(np.abs(attention(*exact, scale=5.0).out) < np.finfo(np.float16).tiny)
    correct = [g.astype(np.float16).astype(np.float64)
               for g in _float32_backward(*exact, d_out, 5.0, stored=np.float16)]
    errors = [np.abs(g - exact_g) for g, exact_g in zip(correct, oracle.grads, strict=True)]
    assert all(np.all(e <= a.bound) for e, a in zip(errors, oracle.allowances, strict=True))
    without = [a.bound - dict(a.parts())[tolerance.STORED_OUTPUT_UNDERFLOW] for a in oracle.allowances]
    assert any(np.any(e > w) for e, w in zip(errors, without, strict=True)), "the stored output never mattered here"
    wrong = _float32_backward(*exact, d_out, 5.0, stored=np.float16, with_d=False)
    assert any(np.any(np.abs(g.astype(np.float16).astype(np.float64) - exact_g) > a.bound)
               for g, exact_g, a in zip(wrong, oracle.grads, oracle.allowances, strict=True))


def test_a_float16_backward_rounding_subnormal_ds_is_within_the_allowance_and_one_flushing_it_is_not():
    """Queries of size 16 make most weights tiny and their dS below float16's smallest normal (6.1e-5), where
    FlashAttention's rounding of P and dS to float16 before the products errs absolutely (up to half the smallest
    subnormal, 3e-8, each; u |dS| is relative): dK = s dS^T Q sums that over the queries (the allowance's "P and dS
    rounded to the dtype below its smallest normal" term, without which dK fails here). A kernel that flushes those
    subnormals to 0 is refused, as is one dropping D_i."""
    rng = np.random.default_rng(143)
    q = (16 * rng.standard_normal((1, 1, 16, 2))).astype(np.float16).astype(np.float64)
    k, v, d_out = (rng.standard_normal((1, 1, 16, 2)).astype(np.float16).astype(np.float64) for _ in range(3))
    oracle = tolerance.gradient_allowance(q, k, v, d_out, dtype="float16", scale=1.0)

    def errors(**wrong):
        grads = _float32_backward(q, k, v, d_out, 1.0, stored=np.float16, operands=np.float16, **wrong)
        return [np.abs(g.astype(np.float64) - exact) for g, exact in zip(grads, oracle.grads, strict=True)]

    def beyond(errs, allowances):
        return [bool(np.any(e > a)) for e, a in zip(errs, allowances, strict=True)]

    bounds = [a.bound for a in oracle.allowances]
    assert beyond(errors(), bounds) == [False, False, False]
    without = [a.bound - dict(a.parts())[tolerance.OPERANDS_BELOW_NORMAL] for a in oracle.allowances]
    assert beyond(errors(), without)[1], "dK's subnormal dS never mattered here"
    assert beyond(errors(flush=np.float16), bounds)[1:] == [True, True]
    assert beyond(errors(with_d=False), bounds)[:2] == [True, True]


def test_rounding_below_normal_is_at_most_half_a_subnormal_and_never_more_than_the_value():
    """specs.tolerance.rounding_below_normal bounds what rounding to nearest does below the smallest normal: every
    float16 value (and one a rounding error may take below it) rounds within it; above it, the relative part does."""
    values = np.concatenate([np.linspace(0, 7e-5, 20001), [2.0**-25, 3 * 2.0**-26, 2.0**-14 * (1 - 2.0**-12)]])
    bound = tolerance.rounding_below_normal(values, 0.0, "float16")
    assert np.all(np.abs(values.astype(np.float16).astype(np.float64) - values) <= bound + (values >= 2.0**-14)
                  * tolerance.unit_roundoff("float16") * values)
    assert np.all(bound <= np.minimum(values, 2.0**-25)) and np.all(bound[values >= 2.0**-14] == 0)
    assert tolerance.rounding_below_normal(np.array([2.0**-14]), 2.0**-20, "float16")[0] == 2.0**-25
