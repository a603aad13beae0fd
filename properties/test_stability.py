"""Numerical stability (seed 000 § Flash Attention): the ratio of exponential sums, and the online
softmax correction that keeps it from overflowing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, check_against_oracle, problems_for
from specs.dtypes import finfo
from specs.strategies import VALUE_STYLES, problems, unrepresentable


@checks("ratio-of-exp-sums")
@given(data=st.data())
def test_ratio_of_exponential_sums_inside_exp_range(variant, data):
    """Scores are brought inside exp's range for the dtype (|S| <= 0.9 log(max)) by scaling q."""
    problem = data.draw(problems_for(variant, score_styles=("normal", "integers", "tiny", "spiky")), label="problem")
    check_ratio_of_exponential_sums_inside_exp_range(variant, problem)


@reproducible
def check_ratio_of_exponential_sums_inside_exp_range(variant, problem) -> None:
    """The check of test_ratio_of_exponential_sums_inside_exp_range on one problem."""
    largest = float(np.abs(Trial(variant, problem).oracle()[0].scores).max())
    limit = 0.9 * math.log(float(finfo(variant.dtype).max))
    if largest > limit:
        problem = problem.scale_queries(limit / largest)
    check_against_oracle(variant, problem)


@checks("online-softmax-avoids-overflow")
@given(data=st.data())
def test_large_scores_give_finite_correct_outputs(variant, data):
    problem = data.draw(problems_for(variant, score_styles=("large", "huge", "mixed")), label="problem")
    check_against_oracle(variant, problem)


@checks("online-softmax-avoids-overflow")
@given(data=st.data())
def test_scores_past_the_dtypes_range_give_finite_correct_outputs(variant, data):
    """Scores of order 3e4 sqrt(d) from float16 inputs leave float16's range (65504), where no float16 formula is
    finite: a kernel that keeps its scores in float32, as FlashAttention does, still gives the oracle's output,
    within the rule's bound with float32 inside as the baseline (specs.tolerance.forward_allowance, past_range).
    Inputs whose float32 scores would overflow too are rejected. A dtype that holds "huge" scores (float64,
    float32, bfloat16: float32's exponent) is judged on them by the property above."""
    banned = unrepresentable(variant.dtype)
    if "huge" not in banned["score_style"]:
        pytest.skip(f"{variant.dtype} holds the huge scores, judged by the property above")
    values = tuple(s for s in VALUE_STYLES if s not in banned["value_style"])
    # the styles float32 holds: "huge" scores, which float16 cannot hold, are the point
    problem = data.draw(problems(caps=variant.capabilities, dtype="float32", score_styles=("huge",),
                                 value_styles=values), label="problem")
    check_against_oracle(variant, problem, past_range=True)
