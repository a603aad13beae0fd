"""The tolerance model's power, as a table that is a test (issue: tolerances with measured power).

At d = 64, n_q = 128 and n_k = 128 and 1024 (fixed seeds), in float32, float16 and bfloat16, every
slightly wrong implementation of
tests/fixtures/precision_variants.py is either caught by the allowance of specs.tolerance (its largest
error / allowed > 1) or declared below resolution with the reason, which is itself checked: its
largest error is less than RESOLUTION times the largest error of a correct implementation on the
same input, so no per-element rule that passes correct code could catch it. And every correct
implementation, written in its unusual way, stays under half the allowance.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from specs.dtypes import numpy_dtype
from specs.problems import build
from specs.tolerance import forward_allowance
from tests.fixtures.precision_variants import CORRECT, SLIGHTLY_WRONG, split_kv_merge

RESOLUTION = 3.0
SERIAL_SUM = ("below resolution: values 1e3 + N(0, 1) summed serially in float32 round at 1e3's ulp; "
              "a correct one-key-at-a-time online softmax errs by as much as this defect moves the output")
HALF_ULP = "below resolution: the float16 output's ulp near 1e3 is 0.5, larger than what this defect changes"
BF16_OFFSET = ("below resolution: bfloat16 rounds values 1e3 + N(0, 1) to 996, 1000 or 1004 (ulp 4), so the "
               "output hardly depends on the weights this defect changes")
BF16_SCALE = ("below resolution: 1/sqrt(d+1) moves each score by 1/(2d) = 0.8% of itself, 2 bfloat16 unit "
              "roundoffs (u = 2^-8): about what rounding the scores to bfloat16 moves them by in correct code")
BF16_ONE_PERCENT = ("below resolution: 1e-2 is 2.6 bfloat16 unit roundoffs (u = 2^-8); correct bfloat16 code, "
                    "which rounds P and the output to bfloat16, errs by as much")
CAUGHT = "caught"

# (dtype, value style, n_k) -> {wrong variant: verdict}; cells not listed are caught.
BELOW_RESOLUTION = {
    ("float32", "offset", 128): {"bias 1e-3 on one score": SERIAL_SUM},
    ("float32", "offset", 1024): {"scale 1/sqrt(d+1)": SERIAL_SUM, "bias 1e-3 on one score": SERIAL_SUM},
    ("float16", "offset", 128): {"scale 1/sqrt(d+1)": HALF_ULP, "one key dropped": HALF_ULP},
    ("float16", "offset", 1024): {"scale 1/sqrt(d+1)": HALF_ULP, "one key dropped": HALF_ULP},
    **{("bfloat16", "normal", n_k): {"scale 1/sqrt(d+1)": BF16_SCALE, "output x (1 - 1e-2)": BF16_ONE_PERCENT}
       for n_k in (128, 1024)},
    **{("bfloat16", "offset", n_k): {"scale 1/sqrt(d+1)": BF16_OFFSET, "one key dropped": BF16_OFFSET,
                                     "output x (1 - 1e-2)": BF16_ONE_PERCENT} for n_k in (128, 1024)},
}
# What each 16-bit dtype is asked (the others are float32-inside-float16 questions): three defects of the
# formula, and for bfloat16 the two accumulations in bfloat16 that correct bfloat16 code must not do.
ASKED = {"float16": ("scale 1/sqrt(d+1)", "output x (1 - 1e-2)", "one key dropped"),
         "bfloat16": ("scale 1/sqrt(d+1)", "output x (1 - 1e-2)", "one key dropped", "softmax sum in bfloat16",
                      "P V accumulated in bfloat16")}
CELLS = [(dtype, values, n_k) for dtype in ("float32", "float16", "bfloat16") for values in ("normal", "offset")
         for n_k in (128, 1024)]


@functools.cache
def _case(dtype: str, values: str, n_k: int):
    problem = build(batch=1, heads=2, heads_kv=2, n_q=128, n_k=n_k, d=64, d_v=64, seed=7, value_style=values)
    q, k, v = (x.astype(numpy_dtype(dtype)) for x in (problem.q, problem.k, problem.v))
    oracle, allowance = forward_allowance(*(x.astype(np.float64) for x in (q, k, v)), dtype=dtype)
    return q, k, v, oracle.out, allowance.bound


def _worst(fn, dtype: str, values: str, n_k: int) -> tuple[float, float]:
    """(largest |error|, largest |error| / allowed) of fn on the cell's problem."""
    q, k, v, expected, bound = _case(dtype, values, n_k)
    error = np.abs(np.asarray(fn(q, k, v), dtype=np.float64) - expected)
    return float(error.max()), float(np.max(np.where(error > 0, error / bound, 0.0)))


def _verdict(dtype: str, values: str, n_k: int, wrong: str) -> str:
    return BELOW_RESOLUTION.get((dtype, values, n_k), {}).get(wrong, CAUGHT)


@pytest.mark.parametrize("dtype, values, n_k", CELLS)
@pytest.mark.parametrize("wrong", SLIGHTLY_WRONG)
def test_slightly_wrong_implementation_is_caught_or_below_resolution(dtype, values, n_k, wrong):
    if dtype in ASKED and wrong not in ASKED[dtype]:
        pytest.skip("asked of float32 only")
    error, ratio = _worst(SLIGHTLY_WRONG[wrong], dtype, values, n_k)
    verdict = _verdict(dtype, values, n_k, wrong)
    if verdict == CAUGHT:
        assert ratio > 1, f"{wrong} in {dtype}, {values} values, n_k={n_k}: uses only {ratio:.3g} of the allowance"
        return
    assert ratio <= 1, f"{wrong} is now caught ({ratio:.3g}): move it to the caught cells"
    correct_error = max(_worst(fn, dtype, values, n_k)[0] for fn in CORRECT.values())
    assert error < RESOLUTION * correct_error, (
        f"'{verdict}' does not hold: the defect's error {error:.3g} is not within {RESOLUTION:g}x the largest "
        f"error of a correct implementation ({correct_error:.3g})")


@pytest.mark.parametrize("dtype, values, n_k", CELLS)
@pytest.mark.parametrize("name", CORRECT)
def test_correct_implementation_stays_under_half_the_allowance(dtype, values, n_k, name):
    _, ratio = _worst(CORRECT[name], dtype, values, n_k)
    assert ratio < 0.5, f"{name} in {dtype} uses {ratio:.3g} of the allowance ({values} values, n_k={n_k})"


@pytest.mark.parametrize("seed", range(4))
def test_float64_split_kv_merge_stays_inside_the_a_priori_bound(seed):
    """Correct float64 code that normalises key splits separately and merges them through their
    log-sum-exp: its rounding grows with |lse|, i.e. with the scores (style `large`)."""
    problem = build(batch=2, heads=2, heads_kv=1, n_q=33, n_k=70, d=17, d_v=5, seed=seed, score_style="large")
    oracle, allowance = forward_allowance(problem.q, problem.k, problem.v, dtype="float64")
    for parts in (2, 3, 7, 70):
        for chained in (False, True):
            got = split_kv_merge(problem.q, problem.k, problem.v, parts, chained)
            ratio = float(np.max(np.abs(got - oracle.out) / allowance.bound))
            assert ratio < 0.5, f"split-KV merge over {parts} parts (chained={chained}) uses {ratio:.3g} of the bound"
