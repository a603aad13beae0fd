"""Gradients of every implementation that gives them (Capabilities.gradients: torch autograd or a declared
backward) against the float64 oracle's backward (specs.gradients), within specs.tolerance.gradient_allowance.

Seed 002 § 3.1.1 (可微性: 保持端到端的梯度传播); seed 000 § Flash Attention (the backward recomputes the
weights block by block: for any block sizes it must equal the global gradients).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.backward import backward_of
from harness.guarded_call import CallFailed
from harness.markers import checks
from harness.trial import Trial, problems_for
from specs.dropout_mask import keep_mask
from specs.problems import Problem
from specs.tolerance import ToleranceUndefined, gradient_allowance

GRADIENT_DROPOUT_P = 0.2
SMALL = dict(max_n=48, max_d=32)


def _d_out(problem: Problem, seed: int, dtype) -> np.ndarray:
    shape = problem.q.shape[:3] + (problem.v.shape[-1],)
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def check_gradients(trial: Trial, problem: Problem, *, seed: int, extra: dict, oracle_extra: dict) -> tuple:
    """dQ, dK, dV of the implementation against the oracle's; returns the implementation's (float64)."""
    d_out = _d_out(problem, seed, trial.dtype)
    call_line = ("from harness.backward import backward_of\n"
                 f"d_out = np.random.default_rng({seed}).standard_normal(q.shape[:3] + (v.shape[-1],))"
                 f".astype({str(trial.dtype)!r})\n"
                 f"dq, dk, dv = backward_of(load_impl({trial.variant.impl.target!r}), q, k, v, d_out, "
                 f"**p.kwargs(){''.join(f', {key}={value!r}' for key, value in extra.items())})")
    try:
        grads = backward_of(trial.variant.impl, *trial.inputs(problem), d_out, **problem.kwargs(), **extra)
    except CallFailed as failure:
        trial.fail(failure.summary, problem, call_line=call_line)
    exact = trial.exact_inputs(problem)
    try:
        oracle = gradient_allowance(*exact, d_out.astype(np.float64), dtype=trial.dtype,
                                    **trial.oracle_kwargs(problem), **oracle_extra)
    except ToleranceUndefined:
        if trial.in_hypothesis:
            from hypothesis import reject

            reject()
        raise
    got = tuple(g.astype(np.float64) for g in grads)
    for name, g, expected, allowance in zip(("dQ", "dK", "dV"), got, oracle.grads, oracle.allowances, strict=True):
        if not np.all(np.isfinite(g)):
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(g))[0])
            trial.fail(f"{name} is {g[bad]} at {list(bad)} where the oracle's backward gives {expected[bad]:.6g} "
                       f"({int((~np.isfinite(g)).sum())} non-finite elements)", problem, call_line=call_line)
        trial.expect_close(g, expected, allowance, what=name, versus="the float64 oracle's backward",
                           problem=problem, call_line=call_line)
    return got


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients")
@given(data=st.data())
def test_gradients_match_the_oracle_backward(variant, data):
    """dQ, dK, dV for drawn shapes, scales, masks or causal, block sizes (the tiled backward must equal the
    global gradients for any blocks) and, where the implementation takes dropout_seed, dropout."""
    caps = variant.capabilities
    blocks = {keyword: data.draw(st.integers(1, 70), label=keyword) for keyword in caps.tile_keywords}
    causal = caps.causal and data.draw(st.booleans(), label="causal")
    masked = caps.mask and not causal and data.draw(st.booleans(), label="masked")
    problem = data.draw(problems_for(variant, causal=causal, masked=masked, **SMALL), label="problem")
    extra, oracle_extra = dict(blocks), {}
    if caps.dropout_seed and data.draw(st.booleans(), label="dropout"):
        seed = data.draw(st.integers(0, 2**32 - 1), label="dropout_seed")
        extra.update(dropout_p=GRADIENT_DROPOUT_P, dropout_seed=seed)
        oracle_extra = dict(keep=keep_mask(seed, GRADIENT_DROPOUT_P, problem.q.shape[:3] + (problem.n_k,)),
                            dropout_p=GRADIENT_DROPOUT_P)
    check_gradients(Trial(variant, problem), problem, seed=problem.recipe.seed, extra=extra,
                    oracle_extra=oracle_extra)


@checks("fully-masked-rows-zero-gradients")
@pytest.mark.requires("gradients", "mask")
@given(data=st.data())
def test_fully_masked_rows_have_zero_gradients(variant, data):
    """A query row that sees no key has output 0 whatever q is: its dQ row is exactly 0 (never NaN), and no
    other gradient turns NaN."""
    problem = data.draw(problems_for(variant, masked=True, min_n=2, **SMALL), label="problem")
    row = data.draw(st.integers(0, problem.n_q - 1), label="fully masked row")
    problem = problem.derive(
        "m = np.broadcast_to(p.mask, p.q.shape[:3] + (p.n_k,)).copy(); "
        f"m[:, :, {row}] = False; m[:, :, {(row + 1) % problem.n_q}, 0] = True; p = p.replace(mask=m)")
    trial = Trial(variant, problem)
    d_q, _, _ = check_gradients(trial, problem, seed=problem.recipe.seed, extra={}, oracle_extra={})
    if np.any(d_q[:, :, row] != 0):
        trial.fail(f"dQ of the fully masked row {row} is not exactly 0: largest |dQ| "
                   f"{float(np.abs(d_q[:, :, row]).max()):.3g}", problem)
