"""Fused attention equals the unfused operator sequence (seed 000 § Fused Attention: MatMul -> Scale ->
Softmax -> Dropout -> MatMul fused into one kernel), with and without dropout.

The unfused sequence is impls.torch.torch_flash_records:unfused_attention: five torch operators on the whole weight
matrix, with specs.dropout_mask's mask. Fusion matters where the storage precision is low: a fused float16 or
bfloat16 kernel keeps S, the softmax and its sums in float32 and rounds P (at most) and the output once, so it
must equal the sequence run with float32 inside, within specs.tolerance.fused_difference_allowance, far closer
than two float16 evaluations of the formula. In float64 and float32 the comparison has no content of its own:
both sides are held to the oracle's allowance, so |fused - unfused| <= twice it follows from sdpa-formula
(without dropout), dropout-on-weights and dropout-seeded (with it) and differentiable-end-to-end (gradients);
those variants skip, naming them, and tests/suite_run/test_main_run.py checks that they ran on every fused record.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api import CallFailed, call_in_process, checked_array
from harness.api.markers import checks
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, problems_for
from protocol.registry import ImplLoadError, Variant, load_impl
from specs.dropout_mask import keep_mask
from specs.problems import Problem
from specs.reference import attention
from specs.tolerance import fused_difference_allowance

UNFUSED = "impls.torch.torch_flash_records:unfused_attention"
FUSED_DROPOUT_P = 0.2


IMPLIED_BY = ("sdpa-formula", "dropout-on-weights", "dropout-seeded", "differentiable-end-to-end")
HALF_PRECISION = ("float16", "bfloat16")


def _unfused(variant: Variant):
    if variant.dtype not in HALF_PRECISION:
        pytest.skip(f"in {variant.dtype} fused and unfused are both held to the oracle's allowance: implied by "
                    f"{', '.join(IMPLIED_BY)}")
    try:
        return load_impl(UNFUSED)
    except (ImportError, ImplLoadError) as exc:
        pytest.skip(f"the unfused sequence needs torch: {exc}")


@checks("fused-equals-unfused")
@pytest.mark.requires("fused")
@given(data=st.data())
def test_fused_equals_the_unfused_sequence_with_float32_inside(variant, data):
    _unfused(variant)  # skips where the unfused sequence cannot run
    caps = variant.capabilities
    causal = caps.causal and caps.causal_alignment == "top_left" and data.draw(st.booleans(), label="causal")
    masked = caps.mask and not causal and data.draw(st.booleans(), label="masked")
    problem = data.draw(problems_for(variant, causal=causal, masked=masked, max_n=48, max_d=32), label="problem")
    dropout = caps.dropout_seed and data.draw(st.booleans(), label="dropout")
    check_fused_equals_unfused(variant, problem, data.draw(st.integers(0, 2**32 - 1), label="dropout_seed")
                               if dropout else None)


@reproducible
def check_fused_equals_unfused(variant, problem: Problem, dropout_seed: int | None) -> None:
    """The fused call (with dropout under `dropout_seed`, if one) against the unfused sequence with float32 inside,
    rounded to the dtype, within specs.tolerance.fused_difference_allowance."""
    unfused = _unfused(variant)
    trial = Trial(variant, problem)
    extra, oracle_extra = {}, {}
    if dropout_seed is not None:
        seed = dropout_seed
        extra = dict(dropout_p=FUSED_DROPOUT_P, dropout_seed=seed)
        oracle_extra = dict(keep=keep_mask(seed, FUSED_DROPOUT_P, problem.q.shape[:3] + (problem.n_k,)),
                            dropout_p=FUSED_DROPOUT_P)
    exact = trial.exact_inputs()
    fused_out = trial.call(problem, **extra)
    widened = tuple(x.astype(np.float32) for x in trial.inputs())
    try:
        raw = call_in_process(unfused.fn, widened, {**problem.kwargs(), **extra}, unfused.capabilities.tensors)
        inside = checked_array(raw, shape=fused_out.shape, dtype=np.dtype(np.float32))
    except CallFailed as failure:
        raise AssertionError(f"the unfused sequence itself failed: {failure.summary}") from None
    unfused_out = inside.astype(trial.dtype).astype(np.float64)
    result = attention(*exact, **trial.oracle_kwargs(), **oracle_extra)
    trial.expect_close(fused_out, unfused_out, fused_difference_allowance(result, *exact, variant.dtype),
                       versus="the unfused MatMul -> Scale -> Softmax -> Dropout -> MatMul with float32 inside, "
                              f"rounded to {variant.dtype}")
