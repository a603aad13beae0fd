"""properties.face_checks judges one sequence of a pack or a cache: a log-sum-exp the tolerance model cannot bound
(the naive formula overflows in the dtype) leaves the example uncounted, never passed unchecked."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from harness.api.evidence import PropertyViolation
from harness.api.trial import Trial
from properties.face_checks import check_sequence, source_problems
from protocol.registry import Variant, load_impl
from specs.derivations import with_arrays
from specs.problems import build
from specs.reference import attention

REFERENCE = "impls.numpy.numpy_reference:reference_attention"


def _sequence(sink: float):
    """A float16 trial whose sinks are `sink`, its exact inputs and the oracle's output and log-sum-exp."""
    problem = build(heads=2, n_q=3, n_k=4, d=4, d_v=4, seed=5).derive(with_arrays, sinks=[sink, sink])
    trial = Trial(Variant(load_impl(REFERENCE), "float16"), problem)
    exact = trial.exact_inputs()
    oracle = attention(*exact, **trial.oracle_kwargs(problem))
    return trial, problem, exact, oracle


def test_an_lse_past_the_dtype_is_not_counted_as_checked():
    # a sink of 7e4 is finite in float64 but past float16's largest value: the naive float16 log-sum-exp is inf
    trial, problem, exact, oracle = _sequence(7e4)

    @settings(max_examples=1, database=None)
    @given(st.just(oracle.lse))
    def judged(lse):
        check_sequence(trial, 0, oracle.out, lse, exact, problem, "out = fn(q, k, v)")

    with pytest.raises(Unsatisfiable):  # every example rejected: the property cannot pass on it
        judged()


def test_a_bounded_lse_is_judged():
    trial, problem, exact, oracle = _sequence(0.5)
    check_sequence(trial, 0, oracle.out, oracle.lse, exact, problem, "out = fn(q, k, v)")
    with pytest.raises(PropertyViolation, match="lse of sequence 0"):
        check_sequence(trial, 0, oracle.out, oracle.lse + 0.5, exact, problem, "out = fn(q, k, v)")


def test_a_face_is_drawn_only_the_modifications_its_own_signature_takes():
    """The dense face takes alibi_slopes and window_size, the varlen face window_size only: a varlen problem
    draws the window, never ALiBi (which that face would reject as an unknown keyword)."""
    variant = Variant(load_impl("tests.fixtures.face_impls:dense_with_alibi"), "float64")
    drawn = set()

    @settings(max_examples=60, database=None, derandomize=True)
    @given(source_problems(variant, "varlen", max_batch=2, max_n=6))
    def collect(problem):
        drawn.update(name for name in ("window_size", "alibi_slopes") if name in problem.kwargs())

    collect()
    assert drawn == {"window_size"}
