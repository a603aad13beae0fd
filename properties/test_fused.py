"""Fused attention equals the unfused operator sequence (seed 000 § Fused Attention: MatMul -> Scale ->
Softmax -> Dropout -> MatMul fused into one kernel), forward and backward, with and without dropout.

The unfused sequence is impls.torch_flash_records:unfused_attention: five torch operators on the whole weight
matrix, with specs.dropout_mask's mask. Both results are held to the oracle's allowance in the same precision,
so they may differ by the sum of the two (specs.tolerance.difference_allowance).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.backward import backward_of
from harness.guarded_call import CallFailed, call_in_process, checked_array
from harness.markers import checks
from harness.trial import Trial, problems_for
from impls.registry import ImplLoadError, Variant, load_impl
from specs.dropout_mask import keep_mask
from specs.tolerance import difference_allowance, forward_allowance, gradient_allowance

UNFUSED = "impls.torch_flash_records:unfused_attention"
FUSED_DROPOUT_P = 0.2


def _unfused(variant: Variant):
    try:
        unfused = load_impl(UNFUSED)
    except (ImportError, ImplLoadError) as exc:
        pytest.skip(f"the unfused sequence needs torch: {exc}")
    if variant.dtype not in unfused.capabilities.dtypes:
        pytest.skip(f"the unfused sequence runs in {' and '.join(unfused.capabilities.dtypes)} only: in "
                    f"{variant.dtype} it rounds S and P where a fused kernel keeps float32 (sdpa-formula checks "
                    "this variant against the oracle)")
    return unfused


@checks("fused-equals-unfused")
@pytest.mark.requires("fused")
@given(data=st.data())
def test_fused_equals_the_unfused_sequence(variant, data):
    unfused = _unfused(variant)
    caps = variant.capabilities
    causal = caps.causal and caps.causal_alignment == "top_left" and data.draw(st.booleans(), label="causal")
    masked = caps.mask and not causal and data.draw(st.booleans(), label="masked")
    problem = data.draw(problems_for(variant, causal=causal, masked=masked, max_n=48, max_d=32), label="problem")
    trial = Trial(variant, problem)
    extra, oracle_extra = {}, {}
    if caps.dropout_seed and data.draw(st.booleans(), label="dropout"):
        seed = data.draw(st.integers(0, 2**32 - 1), label="dropout_seed")
        extra = dict(dropout_p=FUSED_DROPOUT_P, dropout_seed=seed)
        oracle_extra = dict(keep=keep_mask(seed, FUSED_DROPOUT_P, problem.q.shape[:3] + (problem.n_k,)),
                            dropout_p=FUSED_DROPOUT_P)
    inputs, exact = trial.inputs(), trial.exact_inputs()
    kwargs = {**problem.kwargs(), **extra}
    fused_out = trial.call(problem, **extra)
    try:
        raw = call_in_process(unfused.fn, inputs, kwargs, unfused.capabilities.tensors)
        unfused_out = checked_array(raw, shape=fused_out.shape, dtype=trial.dtype).astype(np.float64)
    except CallFailed as failure:
        raise AssertionError(f"the unfused sequence itself failed: {failure.summary}") from None
    call_line = (f"out = fn(q, k, v, **p.kwargs(), **{extra!r})\n"
                 f"unfused = load_impl({UNFUSED!r}).fn(q, k, v, **p.kwargs(), **{extra!r})")
    _, allowance = forward_allowance(*exact, dtype=variant.dtype, **trial.oracle_kwargs(), **oracle_extra)
    trial.expect_close(fused_out, unfused_out, difference_allowance(allowance, allowance),
                       versus="the unfused MatMul -> Scale -> Softmax -> Dropout -> MatMul", call_line=call_line)
    if not (caps.gradients and unfused.capabilities.gradients):
        return
    d_out = np.random.default_rng(problem.recipe.seed).standard_normal(fused_out.shape).astype(trial.dtype)
    try:
        fused_grads = backward_of(variant.impl, *inputs, d_out, **kwargs)
    except CallFailed as failure:
        trial.fail(failure.summary, problem, call_line=call_line)
    unfused_grads = backward_of(unfused, *inputs, d_out, **kwargs)
    oracle = gradient_allowance(*exact, d_out.astype(np.float64), dtype=variant.dtype, **trial.oracle_kwargs(),
                                **oracle_extra)
    for name, got, expected, a in zip(("dQ", "dK", "dV"), fused_grads, unfused_grads, oracle.allowances,
                                      strict=True):
        trial.expect_close(got.astype(np.float64), expected.astype(np.float64), difference_allowance(a, a),
                           what=name, versus="the unfused sequence's gradient", call_line=call_line)
