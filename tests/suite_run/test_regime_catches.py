"""The long determinism case, which catches tests/fixtures/regime_catch_impls.py's key order drawn anew past 1024 keys
(tests/suite_run/test_expectations_caught.py, group "regimes"), stays out of the main job; the oracle's score-spread
check (properties/test_scaling) rejects a reference that gets the scale wrong and accepts one that scales q first."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from properties.scaling_checks import score_spread
from specs.reference import attention
from tests.fixtures.runs import run_suite


def test_the_long_case_is_not_in_the_main_job(tmp_path):
    """Without --impl (the main job over the built-ins) the long determinism case is skipped as a long regime."""
    done = run_suite("properties/test_determinism.py::test_repeated_calls_at_length_are_bitwise_equal",
                     "--backend", "numpy", "-rs", report_dir=tmp_path)
    assert done.returncode == 0, done.output[-2000:]
    assert "long regime" in done.output and " passed" not in done.output, done.output[-2000:]


def _ignores_scale(q, k, v, *, scale=None):
    """Wrong: the scale keyword never reaches the scores (always 1/sqrt(d_k))."""
    return attention(q, k, v)


def _scale_one_over_dk(q, k, v, *, scale=None):
    """Wrong: the default scale is 1/d_k, not 1/sqrt(d_k)."""
    return attention(q, k, v, scale=1 / q.shape[-1] if scale is None else scale)


def _queries_scaled_first(q, k, v, *, scale=None):
    """Correct: the scores as einsum of (s q) with k, s applied to q before the product."""
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return dataclasses.replace(attention(q, k, v, scale=scale), scores=np.einsum("bhid,bhjd->bhij", s * q, k))


@pytest.mark.parametrize("reference, caught", [(_ignores_scale, "scale=1's"),
                                               (_scale_one_over_dk, "the default scale's")])
def test_score_spread_rejects_a_wrong_reference(reference, caught):
    _, failures = score_spread(reference)
    assert failures and all(caught in failure for failure in failures), failures


def test_score_spread_accepts_the_oracle_and_queries_scaled_first():
    assert score_spread()[1] == [] and score_spread(_queries_scaled_first)[1] == []
