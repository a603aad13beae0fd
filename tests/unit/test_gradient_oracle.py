"""The oracle's backward (specs.gradients), which properties/test_gradients.py compares every implementation
with: its analytic gradients against complex-step derivatives in random directions (seed 002 § 3.1.1 可微性)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from harness.api.assertions import assert_within
from specs.gradients import attention_backward, complex_step_derivative
from specs.strategies import problems
from specs.tolerance import directional_derivative_allowance


@given(problem=problems(max_n=40, max_d=24, score_styles=("normal", "integers", "spiky", "mixed")),
       seed=st.integers(0, 2**32 - 1), masked=st.booleans())
def test_analytic_gradient_matches_complex_step(problem, seed, masked):
    rng = np.random.default_rng(seed)
    q, k, v = problem.q, problem.k, problem.v
    mask = rng.random(problem.q.shape[:3] + (problem.n_k,)) < 0.7 if masked else None
    if mask is not None:
        mask[..., 0] = True  # every row keeps a key: the derivative of an empty row is 0 either way
    d_out = rng.standard_normal(q.shape[:3] + (v.shape[-1],))
    directions = tuple(rng.standard_normal(x.shape) for x in (q, k, v))
    kwargs = dict(scale=problem.scale, mask=mask)
    d_q, d_k, d_v = attention_backward(q, k, v, d_out, **kwargs)
    analytic = sum(float(np.sum(g * e)) for g, e in zip((d_q, d_k, d_v), directions, strict=True))
    numeric = float(np.sum(d_out * complex_step_derivative(q, k, v, directions, **kwargs)))
    assert_within(np.asarray(analytic), np.asarray(numeric),
                  directional_derivative_allowance(q, k, v, d_out, directions, **kwargs),
                  what="<grad, E> of the analytic gradients", versus="the complex-step derivative <dO, J E>")
