"""A failure's repro snippet, executed, runs the property's comparison and prints its verdict: FAIL with the
worst element and the allowance's terms there on the failing input, PASS on an input the implementation gets
right."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from harness.api.repro import repro_snippet, verdict
from harness.api.trial import check_against_oracle
from protocol.registry import Variant, load_impl
from specs.problems import build
from specs.tolerance import Allowance

WRONG = "tests/fixtures/report_impls.py:keys_reversed"
RIGHT = "impls.numpy.numpy_reference:reference_attention"


def _printed(snippet: str, capsys) -> list[str]:
    exec(snippet, {})
    return capsys.readouterr().out.splitlines()


def test_the_repro_of_a_failure_prints_fail_with_the_failure_s_worst_element_and_terms(capsys):
    with pytest.raises(PropertyViolation) as failure:
        check_against_oracle(Variant(load_impl(WRONG), "float64"), build(n_q=3, n_k=4, d=2, d_v=2, seed=5))
    printed = _printed(failure.value.repro, capsys)
    assert printed[0] == "FAIL: out differs from the float64 oracle beyond the tolerance"
    assert printed[1:] == list(failure.value.details)  # the same worst element, count and terms
    assert printed[1].startswith("worst element out[") and "(dominant)" in printed[3]


def test_the_repro_of_an_input_the_implementation_gets_right_prints_pass(capsys):
    problem = build(n_q=3, n_k=4, d=2, d_v=2, seed=5)
    for target, first in ((RIGHT, "PASS: out is within the tolerance of the float64 oracle"), (WRONG, "FAIL: ")):
        snippet = repro_snippet(problem, target=target, dtype="float64", layout="contiguous",
                                causal_alignment="top_left")
        assert _printed(snippet, capsys)[0].startswith(first), target


def test_the_verdict_words_both_outcomes():
    allowance = Allowance(np.full(3, 0.5), "a half")
    assert verdict(np.array([0.0, 0.25, 0.0]), np.zeros(3), allowance, what="w", versus="zero") == (
        "PASS: w is within the tolerance of zero (largest |error| / allowed 0.5)")
    assert verdict(np.array([0.0, 1.0, 0.0]), np.zeros(3), allowance, what="w", versus="zero").splitlines() == [
        "FAIL: w differs from zero beyond the tolerance",
        "worst element w[1]: got 1.0, expected 0.0, |error| 1 > allowed 0.5",
        "elements over tolerance: 1 of 3",
        "allowed 0.5 at w[1]: a half",
    ]


def test_a_call_that_computes_something_else_ends_the_snippet():
    """A gradient property's call assigns dq, dk, dv: there is no `out` to judge, and the snippet runs."""
    snippet = repro_snippet(build(n_q=2, n_k=3, seed=1), target=RIGHT, dtype="float64", layout="contiguous",
                            causal_alignment="top_left", call_line="dq = fn(q, k, v, **p.kwargs())")
    assert snippet.endswith("dq = fn(q, k, v, **p.kwargs())") and "verdict(" not in snippet.splitlines()[-1]
    exec(snippet, {})
