"""An allowance keeps its terms as named arrays, and a failed comparison prints each term's value at the worst
element and names the dominant one (harness.api.assertions.allowance_line)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.assertions import allowance_line, compare
from specs import tolerance
from specs.problems import build
from specs.tolerance import Allowance
from tests.fixtures.every_allowance import every_allowance

DTYPES = ("float64", "float32", "float16", "bfloat16")


def terms_gap(allowance: Allowance) -> float:
    """Largest |sum of the terms - bound| / bound: 0 up to rounding when the terms are the bound's parts."""
    shape = np.shape(allowance.bound)
    total = sum(np.broadcast_to(value, shape) for _, value in allowance.parts())
    bound = np.broadcast_to(allowance.bound, shape)
    return float(np.max(np.abs(total - bound) / np.maximum(bound, np.finfo(float).tiny), initial=0.0))


def _received(dtype: str, **fields):
    p = build(**fields)
    return tuple(x.astype(dtype).astype(np.float64) for x in (p.q, p.k, p.v))


def _model_allowances() -> dict[str, Allowance]:
    """The model's allowances with terms of their own, per dtype."""
    found = {}
    for dtype in DTYPES:
        q, k, v = _received(dtype, n_q=5, n_k=9, d=8, d_v=4, seed=2, heads=2, heads_kv=1)
        result, allowance = tolerance.forward_allowance(q, k, v, dtype=dtype)
        own = tolerance.own_rounding_bound(result, q, k, v, np.abs(result.out), dtype=dtype)
        d_out = np.random.default_rng(0).standard_normal(result.out.shape)
        found |= {
            f"forward {dtype}": allowance,
            f"lse {dtype}": tolerance.lse_allowance(q, k, v, dtype=dtype, oracle=result),
            f"own rounding {dtype}": own,
            f"metamorphic {dtype}": tolerance.metamorphic_allowance(allowance, allowance, own, own),
            f"taken {dtype}": allowance.take((..., slice(1, 3), slice(None))),
            f"largest {dtype}": allowance.largest(),
            **{f"gradient {dtype} {name}": a for name, a in
               zip(("dQ", "dK", "dV"), tolerance.gradient_allowance(q, k, v, d_out, dtype=dtype).allowances,
                   strict=True)},
        }
        if dtype in ("float16", "bfloat16"):
            found[f"fused {dtype}"] = tolerance.fused_difference_allowance(result, q, k, v, dtype)
    return found


def test_the_model_s_allowances_are_sums_of_named_non_negative_terms():
    for name, allowance in _model_allowances().items():
        assert len(allowance.terms) >= 2, name
        assert all(np.all(np.asarray(value) >= 0) for _, value in allowance.terms), name
        assert terms_gap(allowance) < 1e-12, name


def test_every_allowance_s_parts_sum_to_its_bound():
    for name, allowance in every_allowance().items():
        assert terms_gap(allowance) < 1e-12, name


def test_a_term_left_out_is_seen():
    allowance = _model_allowances()["forward float16"]
    partial = Allowance(allowance.bound, allowance.rule, allowance.terms[1:])
    assert terms_gap(partial) > 1e-6


def test_the_naive_term_and_the_floor_s_terms_are_named():
    names = [name for name, _ in _model_allowances()["forward float16"].terms]
    assert names[0] == "2 x naive float16 error of the row"
    assert {"output rounding", "underflow", "log-sum-exp merge rounding"} <= set(names)


NAIVE = np.array([[0.0, 0.5], [2.0, 0.0]])
TWO_TERMS = Allowance(0.1 + NAIVE, "floor + naive", (("floor", 0.1), ("2 x naive float16 error", NAIVE)))


@pytest.mark.parametrize("bump, line", [
    ((1, 0), "allowed 2.1 at out[1, 0] = floor 0.1, 2 x naive float16 error 2 (dominant)"),
    ((1, 1), "allowed 0.1 at out[1, 1] = floor 0.1 (dominant), 2 x naive float16 error 0"),
])
def test_the_message_prints_each_term_at_the_worst_element_and_the_dominant_one(bump, line):
    got = np.zeros((2, 2))
    got[bump] = 3.0
    assert compare(got, np.zeros((2, 2)), TWO_TERMS).details[2] == line


def test_a_one_term_allowance_is_named_by_its_rule():
    assert allowance_line(Allowance(0.25, "a quarter"), (0, 1), (2, 2), what="weights") == (
        "allowed 0.25 at weights[0, 1]: a quarter")


def test_a_float16_failure_reads_the_model_s_terms_at_its_worst_element():
    q, k, v = _received("float16", n_q=4, n_k=6, d=8, d_v=8, seed=3)
    result, allowance = tolerance.forward_allowance(q, k, v, dtype="float16")
    got = result.out.copy()
    got[0, 0, 1, 2] += 1.0
    line = compare(got, result.out, allowance).details[2]
    values = {name: float(np.broadcast_to(value, got.shape)[0, 0, 1, 2]) for name, value in allowance.terms}
    allowed = float(np.broadcast_to(allowance.bound, got.shape)[0, 0, 1, 2])
    assert line.startswith(f"allowed {allowed:.3g} at out[0, 0, 1, 2] = ")
    dominant = max(values, key=values.get)
    for name, value in values.items():
        assert f"{name} {value:.3g}" + (" (dominant)" if name == dominant else ",") in line + ",", name


def test_carrying_an_allowance_carries_its_terms():
    carried = tolerance.product_allowance(TWO_TERMS, np.ones((2, 2)), np.ones((2, 1)))
    assert [name for name, _ in carried.terms] == ["floor", "2 x naive float16 error", "float64 product rounding"]
    assert np.array_equal(carried.terms[1][1], NAIVE @ np.ones((2, 1)))
    image = tolerance.affine_image_allowance(TWO_TERMS, -2.0, np.zeros((2, 2)), 0.0)
    assert np.array_equal(dict(image.terms)["|a| x 2 x naive float16 error"], 2 * NAIVE)
    assert dict(TWO_TERMS.largest().terms) == {"floor": 0.1, "2 x naive float16 error": 2.0}
    summed = TWO_TERMS + TWO_TERMS
    assert np.array_equal(dict(summed.terms)["2 x naive float16 error"], 2 * NAIVE)
