"""The oracle's backward (specs.gradients), which properties/test_gradients.py compares every implementation
with: its analytic gradients against complex-step derivatives in random directions (seed 002 § 3.1.1 可微性)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.assertions import assert_within
from specs.gradients import attention_backward, complex_step_derivative
from specs.problems import build
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


@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
def test_float16_backward_has_the_bits_of_numpys_own_products(monkeypatch, dropout_p):
    """The gradient rule's naive float16 baseline multiplies through specs.reference.matmul: the same bits as the
    formula with np.matmul (NumPy's float16 loop), with GQA, causal and dropout, past matmul's small-size path."""
    from specs import gradients
    from specs.dropout_mask import keep_mask

    p = build(batch=1, heads=4, heads_kv=2, n_q=64, n_k=80, d=32, d_v=48, seed=5)
    q, k, v = (x.astype(np.float16) for x in (p.q, p.k, p.v))
    d_out = np.random.default_rng(5).standard_normal((1, 4, 64, 48)).astype(np.float16)
    kwargs = dict(causal=True)
    if dropout_p:
        kwargs.update(keep=keep_mask(3, dropout_p, (1, 4, 64, 80)), dropout_p=dropout_p)
    fast = gradients.attention_backward(q, k, v, d_out, **kwargs)
    monkeypatch.setattr(gradients, "matmul", np.matmul)
    numpys = gradients.attention_backward(q, k, v, d_out, **kwargs)
    for got, expected in zip(fast, numpys, strict=True):
        assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()
