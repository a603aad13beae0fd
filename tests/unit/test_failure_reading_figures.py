"""A counterexample's picture shows what failed: the gradient for a gradient failure, the output's non-finite
pattern against exact arithmetic's for a NaN failure, the weights for a weight error, and nothing when nothing
fits; the drawn data is the failing input's."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from harness.api.observe import observe_weights
from harness.api.trial import Trial, check_against_oracle
from harness.engine.backward import backward_of
from harness.reporting.figures import counterexample_kind, counterexample_picture, draw_figures, expected_non_finite
from properties.gradient_checks import check_gradients
from properties.poisons import check_visible_nan
from protocol.registry import Variant, load_impl
from specs.derivations import entries_set
from specs.gradients import attention_backward
from specs.problem_code import rebuild
from specs.problems import build
from specs.reference import attention

pytest.importorskip("matplotlib", reason="the report's pictures are drawn with matplotlib")

HERE = "tests.unit.test_failure_reading_figures"
GRADIENT_PROBLEM = build(n_q=3, n_k=4, d=4, d_v=2, seed=6)


def nan_swallowed(q, k, v, *, scale=None, causal=False, mask=None):
    """Wrong: NaN and Inf in the inputs read as 0, so a poisoned key reaches no row."""
    return attention(*(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) for x in (q, k, v)), scale=scale,
                     causal=causal, mask=mask).out


def scale_doubled(q, k, v, *, scale=None, causal=False, mask=None):
    """Wrong: twice the scale, so the weights are sharper than softmax's."""
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    return attention(q, k, v, scale=2 * scale, causal=causal, mask=mask).out


def dq_doubled(q, k, v, *, scale=None, causal=False, mask=None):
    """Right forward, wrong backward: dQ twice the true one."""
    return attention(q, k, v, scale=scale, causal=causal, mask=mask).out


def _doubled_backward(q, k, v, d_out, **kwargs):
    dq, dk, dv = attention_backward(q, k, v, d_out, **kwargs)
    return 2 * dq, dk, dv


dq_doubled.attention_backward = _doubled_backward


def _variant(name: str) -> Variant:
    target = name if ":" in name else f"{HERE}:{name}"
    return Variant(load_impl(target), "float64")


def _failing_verdict(check, variant: Variant, claim: str) -> dict:
    """Run the property's check in process; its failure as report.json's verdict."""
    with pytest.raises(PropertyViolation) as failure:
        check(variant)
    return {"claim": claim, "impl": variant.name, "status": "fail", "detail": failure.value.message(),
            "counterexample": failure.value.counterexample()}


def test_a_nan_failure_shows_the_output_s_non_finite_pattern_against_exact_arithmetic_s():
    variant = _variant("nan_swallowed")
    poisoned_key = 1
    verdict = _failing_verdict(lambda v: check_visible_nan(v, build(n_q=3, n_k=4, d=2, d_v=3, seed=4), poisoned_key,
                                                           None), variant, "visible-nan-propagates")
    problem = rebuild(verdict["counterexample"]["problem"])
    assert counterexample_kind(verdict, problem) == "non-finite"
    picture = counterexample_picture(verdict, variant)
    assert picture.kind == "non-finite"
    expected, got = picture.panels.values()
    allowed = attention(problem.q, problem.k, problem.v, **problem.kwargs(), finite=False).allowed
    assert np.array_equal(expected, expected_non_finite(problem, allowed)[picture.head])
    assert np.array_equal(got, ~np.isfinite(nan_swallowed(problem.q, problem.k, problem.v, **problem.kwargs()))[
        picture.head])
    assert expected.any() and not got.any()  # the NaN that should have spread, and the output that has none


def test_exact_arithmetic_s_non_finite_pattern_follows_what_each_element_reads():
    problem = build(n_q=3, n_k=4, d=2, d_v=3, seed=1, causal=True).derive(
        entries_set, "v", (None, None, 2, 1), float("nan")).derive(entries_set, "k", (None, None, 3), float("inf"))
    allowed = attention(problem.q, problem.k, problem.v, **problem.kwargs(), finite=False).allowed
    pattern = expected_non_finite(problem, allowed)[0, 0]
    # causal: row 2 is the first to see key 2 (its value column 1 only); nobody sees key 3
    assert pattern.tolist() == [[False, False, False], [False, False, False], [False, True, False]]


def test_a_gradient_failure_shows_the_gradient_it_got_wrong():
    variant = _variant("dq_doubled")
    verdict = _failing_verdict(lambda variant: check_gradients(Trial(variant, GRADIENT_PROBLEM), GRADIENT_PROBLEM,
                                                               seed=GRADIENT_PROBLEM.recipe.seed, extra={}), variant,
                               "differentiable-end-to-end")
    problem = rebuild(verdict["counterexample"]["problem"])
    assert verdict["detail"].startswith("dQ ") and counterexample_kind(verdict, problem) == "gradients"
    picture = counterexample_picture(verdict, variant)
    oracle, got, difference = picture.panels.values()
    assert next(iter(picture.panels)) == "dQ, float64 oracle"
    seed = problem.recipe.seed  # the property draws dO from the problem's seed, and the failure records it
    assert verdict["counterexample"]["cotangent_seed"] == seed
    d_out = np.random.default_rng(seed).standard_normal(problem.q.shape[:3] + (problem.v.shape[-1],))
    exact = attention_backward(problem.q, problem.k, problem.v, d_out, **problem.kwargs())[0][picture.head]
    assert np.array_equal(oracle, exact)
    assert np.array_equal(got, backward_of(variant.impl, problem.q, problem.k, problem.v, d_out,
                                           **problem.kwargs())[0][picture.head])
    assert np.array_equal(difference, got - oracle) and np.allclose(got, 2 * exact)


def test_a_weight_error_shows_the_weights():
    variant = _variant("scale_doubled")
    verdict = _failing_verdict(lambda variant: check_against_oracle(variant, build(n_q=3, n_k=4, d=4, seed=2)), variant,
                               "sdpa-formula")
    problem = rebuild(verdict["counterexample"]["problem"])
    assert counterexample_kind(verdict, problem) == "weights"
    picture = counterexample_picture(verdict, variant)
    observed = observe_weights(Trial(variant, problem))
    oracle, got, _ = picture.panels.values()
    assert np.array_equal(oracle, observed.oracle.weights[picture.head])
    assert np.array_equal(got, observed.weights[picture.head]) and not np.allclose(got, oracle)


def test_nothing_is_drawn_when_nothing_fits(tmp_path):
    right = _variant("impls.numpy.numpy_reference:reference_attention")
    problem = build(n_q=3, n_k=4, d=4, seed=1)
    # weights that are the oracle's, on a failure some other check reported: a weights picture shows no fault
    weights_fine = {"claim": "sdpa-formula", "impl": right.name, "status": "fail",
                    "detail": "out differs from its output without the poison", "counterexample": {
                        "problem": repr(problem), "repro": ""}}
    assert counterexample_kind(weights_fine, problem) == "weights"
    assert counterexample_picture(weights_fine, right) is None
    # a gradient failure whose dO the picture cannot draw as the property did
    gradient = {**weights_fine, "detail": "dK differs from the float64 oracle's backward beyond the tolerance"}
    assert counterexample_kind(gradient, problem) == "gradients" and counterexample_picture(gradient, right) is None
    report = {"claims": [{"slug": "sdpa-formula", "holds": True}], "verdicts": [weights_fine, gradient],
              "exhibits": []}
    drawn = draw_figures(report, tmp_path, [right])["drawn"]
    assert [f for f in drawn if f["source"] == "counterexample"] == []
