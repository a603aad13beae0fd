"""What a property is written with, and all it may use of the harness: @checks markers, Trial (inputs, calls,
oracle, comparisons), the steps that derive a problem from another (problem_step), the evidence a failure carries,
observation of weights, blocked and regime cases, exhibits, and, for a property that calls an implementation
outside a Trial, the guarded calls, conversions and gradients of harness.engine that it may use. Properties and
interpretations import nothing else of harness.engine (an import-linter contract, pyproject's
[tool.importlinter]); a name here is public and kept, the submodules hold it."""

from harness.api.assertions import assert_within, compare
from harness.api.blocked import check_any_block_sizes
from harness.api.evidence import PropertyViolation
from harness.api.exhibits import exhibit, record_headroom
from harness.api.face_calls import call_face, expect_face_raised, face_output
from harness.api.markers import ORACLE, checks
from harness.api.observe import ObservedWeights, observe_weights, one_hot_problem
from harness.api.regime_cases import LONG_MARKER, cases, skip_unless_fits
from harness.api.repro import numpy_facing, verdict
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, check_against_oracle, check_out_and_lse_against_oracle, problems_for
from harness.engine.backward import backward_of
from harness.engine.guarded_call import (
    CallFailed,
    as_float64,
    as_numpy,
    call_in_process,
    checked_array,
    handed_over,
)
from harness.engine.isolation import call_isolated
from specs.problems import problem_step

__all__ = [
    "LONG_MARKER", "ORACLE", "CallFailed", "ObservedWeights", "PropertyViolation", "Trial", "as_float64", "as_numpy",
    "assert_within", "backward_of", "call_face", "call_in_process", "call_isolated", "cases", "check_against_oracle",
    "check_any_block_sizes", "check_out_and_lse_against_oracle", "checked_array", "checks", "compare", "exhibit",
    "expect_face_raised", "face_output", "handed_over", "numpy_facing", "observe_weights", "one_hot_problem",
    "problem_step", "problems_for", "record_headroom", "reproducible", "skip_unless_fits", "verdict",
]
