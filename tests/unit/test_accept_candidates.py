"""What accept mode tries on a failure nothing declared explains (harness.api.accept_candidates): every deviation of
the catalogue, each with the parameter settings the failure cannot give it, and for a raise the modelled conditions,
then a pattern made from its type and text. A deviation added with a required parameter and no setting would stop
accept mode on every failure (a run met one)."""

from __future__ import annotations

from harness.api.accept_candidates import NEEDS_THE_FAILURE, SETTINGS, candidates
from harness.api.evidence import PropertyViolation
from specs.deviations import CATALOGUE


def test_every_deviation_that_needs_no_failure_is_tried_with_each_of_its_settings():
    tried = candidates(PropertyViolation("out differs from the float64 oracle beyond the tolerance"))
    expected = sum(len(SETTINGS.get(name, ({},))) for name in CATALOGUE if name not in NEEDS_THE_FAILURE)
    assert len(tried) == expected
    assert {deviation.name for deviation in tried} == set(CATALOGUE) - set(NEEDS_THE_FAILURE)


def test_a_raise_is_tried_as_the_modelled_conditions_then_as_rejects_with_its_type_and_the_start_of_its_text():
    """The modelled conditions first: each explains the raise only where the call's ring has an empty block, or where
    it is a backward on one rank."""
    modelled, one_rank, pattern = candidates(PropertyViolation("the implementation raised RuntimeError: shape "
                                                               "'[1, 2, 0]' is invalid for input of size 16"))
    assert modelled.describe() == "raises-on-empty-ring-block (raises='RuntimeError')"
    assert one_rank.describe() == "backward-fails-on-one-rank"
    assert pattern.describe().startswith("rejects (") and "RuntimeError" in pattern.describe()
