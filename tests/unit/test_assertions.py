"""harness.api.assertions in-process: what a comparison returns, and what a failed one names."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.assertions import assert_within, compare
from harness.api.evidence import PropertyViolation
from specs.tolerance import Allowance

EXPECTED = np.arange(6.0).reshape(2, 3)
TENTH = Allowance(np.full((2, 3), 0.1), "a tenth each")


def _violation(got, expected=EXPECTED, allowance=TENTH, **names) -> PropertyViolation:
    with pytest.raises(PropertyViolation) as info:
        assert_within(got, expected, allowance, **names)
    return info.value


def test_within_passes_and_returns_the_largest_error_over_allowed():
    got = EXPECTED + np.array([[0.0, 0.05, 0.0], [0.0, 0.0, -0.025]])
    assert assert_within(got, EXPECTED, TENTH) == pytest.approx(0.5)
    comparison = compare(got, EXPECTED, TENTH)
    assert comparison.within and comparison.details == ()


def test_failure_names_the_worst_element_the_count_over_and_the_rule():
    got = EXPECTED.copy()
    got[0, 1] += 0.15
    got[1, 2] += 0.5
    violation = _violation(got, what="weights", versus="the oracle")
    assert violation.summary == "weights differs from the oracle beyond the tolerance"
    assert violation.details == (
        "worst element weights[1, 2]: got 5.5, expected 5.0, |error| 0.5 > allowed 0.1",
        "elements over tolerance: 2 of 6",
        "allowed 0.1 at weights[1, 2]: a tenth each",
    )
    assert violation.claim is None


def test_nan_and_inf_in_got_count_as_over_and_nan_is_counted():
    got = EXPECTED.copy()
    got[0, 2], got[1, 0] = np.nan, np.inf
    comparison = compare(got, EXPECTED, TENTH)
    assert not comparison.within and comparison.ratio == np.inf
    worst, count, _ = comparison.details
    assert worst.startswith("worst element out[0, 2]: got nan, expected 2.0")
    assert count == "elements over tolerance: 2 of 6 (1 NaN)"


def test_a_shape_mismatch_is_a_value_error_naming_both_shapes():
    with pytest.raises(ValueError, match=r"weights: got has shape \(3, 2\), expected has shape \(2, 3\)"):
        compare(EXPECTED.T, EXPECTED, TENTH, what="weights")


@pytest.mark.parametrize("allowance, kind", [(0.1, "float"), (np.full((2, 3), 0.1), "ndarray")])
def test_an_allowance_that_is_not_an_allowance_is_a_type_error(allowance, kind):
    with pytest.raises(TypeError, match=rf"allowance must be a specs\.tolerance\.Allowance, not {kind}$"):
        assert_within(EXPECTED, EXPECTED, allowance)


def test_an_allowance_that_does_not_broadcast_is_a_value_error():
    with pytest.raises(ValueError, match=r"allowance of shape \(3,\) does not broadcast to \(3, 2\)"):
        compare(EXPECTED.T, EXPECTED.T, Allowance(np.ones(3), "three"))


def test_a_scalar_bound_applies_to_every_element():
    everywhere = Allowance(0.1, "0.1")
    assert_within(EXPECTED + 0.09, EXPECTED, everywhere)
    assert _violation(EXPECTED + 0.11, allowance=everywhere).details[1] == "elements over tolerance: 6 of 6"


def test_a_bound_per_row_applies_to_the_whole_row():
    per_row = Allowance(np.array([[0.1], [1.0]]), "per row")
    got = EXPECTED + np.array([[0.0], [0.5]])
    assert assert_within(got, EXPECTED, per_row) == pytest.approx(0.5)
    got[0, 1] += 0.5
    assert _violation(got, allowance=per_row).details[0].startswith("worst element out[0, 1]")


def test_scalars_compare_as_zero_dimensional_arrays():
    one = Allowance(1.0, "one")
    assert assert_within(np.asarray(0.5), np.asarray(0.0), one) == pytest.approx(0.5)
    violation = _violation(np.asarray(2.0), np.asarray(0.0), one, what="score")
    assert violation.details[0] == "worst element score: got 2.0, expected 0.0, |error| 2 > allowed 1"


def test_the_claim_is_carried_on_the_violation():
    violation = _violation(EXPECTED + 1.0, claim="rows-sum-to-one")
    assert violation.claim == "rows-sum-to-one"
