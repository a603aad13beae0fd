"""Scores past float16's range (online-softmax-avoids-overflow): a float16 kernel must keep its scores in
float32 and meet the rule with float32 inside as its baseline (specs.tolerance.forward_allowance, past_range),
where the naive float16 formula, and with it the old rule, had nothing to say. tests/fixtures/past_range_impls.py's
kernels meet their rows there (tests/suite_run/test_expectations_caught.py, group "past-range")."""

from __future__ import annotations

import numpy as np
import pytest

from specs.problems import build
from specs.reference import attention
from specs.tolerance import ToleranceUndefined, forward_allowance


def _huge_float16_inputs():
    p = build(batch=1, heads=2, heads_kv=2, n_q=9, n_k=11, d=16, d_v=16, seed=3, score_style="huge")
    return tuple(x.astype(np.float16).astype(np.float64) for x in (p.q, p.k, p.v))


def test_the_past_range_baseline_is_float32_inside_and_not_vacuous():
    q, k, v = _huge_float16_inputs()
    assert float(np.abs(attention(q, k, v).scores).max()) * 4 > 65504, "the problem must leave float16's range"
    with pytest.raises(ToleranceUndefined):
        forward_allowance(q, k, v, dtype="float16")
    oracle, allowance = forward_allowance(q, k, v, dtype="float16", past_range=True)
    assert "float32 inside" in allowance.rule
    # scores of order 4e4 carry float32 errors of u_32 |S| ~ 2.4e-3 in the exponent, which the floor's merge term
    # (4 u_32 L_i P|V|) charges: a few per cent of |out|, not more, so an output off by a tenth fails
    assert float(allowance.bound.max()) <= 0.05 * float(np.abs(oracle.out).max())
    assert np.all(allowance.bound >= 2.0**-11 * np.abs(oracle.out))
