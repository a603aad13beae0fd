"""Correct attention written in unusual ways stays under half the tolerance model's allowance.

Over every score and value style, odd sizes and n_q != n_k (specs.strategies), in float64, float32,
float16 and bfloat16: the naive formula, PyTorch's math backend, a one-key-at-a-time online softmax, an
exp2 softmax, a split-KV merge through the log-sum-exp, and 16-bit storage computed in float32
(tests/fixtures/precision_variants.py). Run it under HYPOTHESIS_PROFILE=thorough for 400 draws.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, reject, target
from hypothesis import strategies as st

from protocol.registry import Capabilities
from specs.dtypes import numpy_dtype
from specs.strategies import problems
from specs.tolerance import ToleranceUndefined, forward_allowance
from tests.fixtures.precision_variants import CORRECT

SAME_HEADS = Capabilities(gqa=False)  # the variants take heads_kv == heads
DTYPES = ("float64", "float32", "float16", "bfloat16")


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from(DTYPES), label="dtype")
    name = draw(st.sampled_from(sorted(CORRECT)), label="variant")
    max_n = 40 if name == "online-one-key" else 130  # the serial loop is slow in Python
    problem = draw(problems(caps=SAME_HEADS, dtype=dtype, scale=False, max_n=max_n), label="problem")
    return dtype, name, problem


@given(case=cases())
def test_correct_code_uses_under_half_the_allowance(case):
    dtype, name, problem = case
    with np.errstate(over="ignore"):
        q, k, v = (x.astype(numpy_dtype(dtype)) for x in (problem.q, problem.k, problem.v))
    if not all(np.isfinite(x).all() for x in (q, k, v)):
        reject()
    try:
        oracle, allowance = forward_allowance(*(x.astype(np.float64) for x in (q, k, v)), dtype=dtype)
    except ToleranceUndefined:
        reject()
    with np.errstate(all="ignore"):
        got = np.asarray(CORRECT[name](q, k, v), dtype=np.float64)
    error = np.abs(got - oracle.out)
    ratio = float(np.max(np.where(error > 0, error / allowance.bound, 0.0), initial=0.0))
    target(ratio, label=f"{dtype} error / allowed")
    assert ratio < 0.5, f"{name} in {dtype} uses {ratio:.3g} of the allowance on {problem!r}"
