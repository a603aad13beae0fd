"""The tolerance model's power on the score modifications, as a table that is a test (issue 21's power rows).

At d = 64 with 128 queries and 128 keys, and with 96 queries on 128 keys where the alignment offset matters (fixed
seeds), every wrong modification of zoo/wrong.py named below is caught in float32 and float16 by the allowance of
specs.tolerance (its largest error / allowed > 1), and the correct formula with the same modification, and the
correct zoo's unusual ones, stay under half the allowance. Each computes as kernels do: float32 inside, float16
storage rounded once at the end. The modifications are drawn as the properties draw them: a cap of half the
largest |scaled score| (Gemma's 50 would barely touch these scores, and a record ignoring it would pass), slopes
that move the weights, biases and sinks in [-4, 4].
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pytest

from specs.dtypes import numpy_dtype
from specs.problems import build
from specs.tolerance import forward_allowance
from zoo import correct, wrong

DTYPES = ("float32", "float16")
SHAPE = dict(batch=2, heads=2, heads_kv=2, d=64, d_v=64, seed=11)
# modification -> the recipe fields that draw it (specs.problems.Recipe), with n_q != n_k where the offset matters
CASES = {
    "window": dict(n_q=128, n_k=128, window=(8, 8)),
    "window bottom-right": dict(n_q=96, n_k=128, window=(8, 8), causal=True),
    "softcap": dict(n_q=128, n_k=128),
    "softcap with bias": dict(n_q=128, n_k=128, bias="full"),
    "alibi": dict(n_q=128, n_k=128, alibi="heads"),
    "alibi bottom-right": dict(n_q=96, n_k=128, alibi="batch_heads"),
    "bias": dict(n_q=128, n_k=128, bias="full"),
    "sinks": dict(n_q=128, n_k=128, sinks=True),
}
BOTTOM_RIGHT = ("window bottom-right", "alibi bottom-right")
# wrong implementation -> the case it is asked on (the power rows)
WRONG = {
    "window_left_end_exclusive": "window",
    "window_right_end_one_past": "window",
    "window_ignores_alignment": "window bottom-right",
    "softcap_ignored": "softcap",
    "softcap_before_scale": "softcap",
    "softcap_after_bias": "softcap with bias",
    "alibi_sign_flipped": "alibi",
    "alibi_ignores_alignment": "alibi bottom-right",
    "bias_scaled_with_scores": "bias",
    "sink_given_a_value": "sinks",
}
# correct implementation -> the cases it takes (the formula the wrong ones change, in its alignment; the correct zoo)
CORRECT: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "the formula, top-left": (wrong._modified, tuple(c for c in CASES if c not in BOTTOM_RIGHT)),
    "the formula, bottom-right": (functools.partial(wrong._modified, offset=32), BOTTOM_RIGHT),
    "window_as_boolean_mask": (correct.window_as_boolean_mask, ("window",)),
    "window_as_minus_inf_bias": (correct.window_as_minus_inf_bias, ("window",)),
    "softcap_through_exp": (correct.softcap_through_exp, ("softcap",)),
    "sinks_as_extra_key": (correct.sinks_as_extra_key, ("sinks",)),
}


@functools.cache
def _case(case: str, dtype: str):
    """Inputs rounded to `dtype` and their float64 oracle and allowance, and the keywords."""
    fields = dict(SHAPE, **CASES[case])
    if case.startswith("softcap"):
        fields["softcap"] = 1.0  # placeholder, replaced below by half the largest |scaled score|
    problem = build(**fields)
    q, k, v = (x.astype(numpy_dtype(dtype)).astype(np.float64) for x in (problem.q, problem.k, problem.v))
    kwargs = problem.kwargs()
    if case.startswith("softcap"):
        kwargs["softcap"] = 0.5 * float(np.abs(q @ k.swapaxes(-1, -2)).max()) / np.sqrt(q.shape[-1])
    alignment = {"causal_alignment": "bottom_right"} if case in BOTTOM_RIGHT else {}
    oracle, allowance = forward_allowance(q, k, v, dtype=dtype, **kwargs, **alignment)
    return q, k, v, kwargs, oracle.out, allowance.bound


def _ratio(fn: Callable, case: str, dtype: str) -> float:
    """Largest |error| / allowed of fn on the case, computing in float32 and storing in `dtype`."""
    q, k, v, kwargs, expected, bound = _case(case, dtype)
    inside = {name: value.astype(np.float32) if isinstance(value, np.ndarray) and value.dtype != bool else value
              for name, value in kwargs.items()}
    out = np.asarray(fn(*(x.astype(np.float32) for x in (q, k, v)), **inside))
    error = np.abs(out.astype(numpy_dtype(dtype)).astype(np.float64) - expected)
    return float(np.max(error / bound))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_modification_is_caught(name, dtype):
    ratio = _ratio(getattr(wrong, name), WRONG[name], dtype)
    assert ratio > 1, f"{name} on {WRONG[name]} in {dtype}: error / allowed {ratio:.3g}, not caught"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, case", [(name, case) for name, (_, cases) in CORRECT.items() for case in cases])
def test_a_correct_modification_stays_under_half_the_allowance(name, case, dtype):
    ratio = _ratio(CORRECT[name][0], case, dtype)
    assert ratio < 0.5, f"{name} on {case} in {dtype}: error / allowed {ratio:.3g}"
