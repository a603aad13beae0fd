"""Numerical stability (seed 000 § Flash Attention): the ratio of exponential sums, and the online
softmax correction that keeps it from overflowing."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from harness.markers import checks
from harness.trial import Trial, check_against_oracle, problems_for
from specs.dtypes import finfo


@checks("ratio-of-exp-sums")
@given(data=st.data())
def test_ratio_of_exponential_sums_inside_exp_range(variant, data):
    """Scores are brought inside exp's range for the dtype (|S| <= 0.9 log(max)) by scaling q."""
    problem = data.draw(problems_for(variant, score_styles=("normal", "integers", "tiny", "spiky")), label="problem")
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
