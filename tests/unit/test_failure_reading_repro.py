"""A failure's repro snippet, executed, runs the property's comparison and prints its verdict: FAIL with the
worst element and the allowance's terms there on the failing input, PASS on an input the implementation gets
right."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from harness.api.repro import imports_used, repro_snippet, verdict
from harness.api.trial import Trial, check_against_oracle
from properties import test_masking, test_regimes, test_symmetry
from properties.gradient_checks import GRADIENT_DROPOUT_P, check_gradients
from protocol.registry import Variant, load_impl
from specs import regimes
from specs.dropout_mask import keep_mask
from specs.gradients import attention_backward
from specs.problems import build
from specs.reference import attention
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


def torch_keys_reversed(q, k, v, *, scale=None):
    """Takes torch tensors (forward only): the keys in reverse order, the values not, a wrong pairing."""
    import torch

    weights = torch.softmax(q @ k.flip(-2).transpose(-1, -2) * (scale or q.shape[-1] ** -0.5), dim=-1)
    return weights @ v


torch_keys_reversed.attention_capabilities = {"tensors": "torch", "differentiable": False}


def test_the_repro_of_a_torch_implementation_hands_it_tensors_and_prints_fail(capsys):
    """An implementation that takes torch tensors gets them in its repro as the suite gave them (numpy_facing), so
    the snippet runs to the same FAIL instead of raising on a NumPy input."""
    pytest.importorskip("torch")
    with pytest.raises(PropertyViolation) as failure:
        check_against_oracle(Variant(load_impl(f"{__name__}:torch_keys_reversed"), "float64"),
                             build(n_q=3, n_k=4, d=2, d_v=2, seed=5))
    assert "fn = numpy_facing(load_impl(" in failure.value.repro
    printed = _printed(failure.value.repro, capsys)
    assert printed[0] == "FAIL: out differs from the float64 oracle beyond the tolerance"
    assert printed[1:] == list(failure.value.details)


def test_a_repro_imports_only_what_it_reads():
    """The snippet of a plain problem reads build, load_impl, forward_allowance, verdict and as_float64: nothing of
    specs.examples, specs.fill, to_layout or the oracle's attention is imported."""
    snippet = repro_snippet(build(n_q=2, n_k=3, seed=1), target=RIGHT, dtype="float64", layout="contiguous",
                            causal_alignment="top_left")
    imports = [line for line in snippet.splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["from specs.problems import build", "from harness.api import as_float64, verdict",
                       "from protocol.registry import load_impl", "from specs.tolerance import forward_allowance"]
    assert imports_used(("import numpy as np", "from a import b, c"), "x = np.zeros(1)\nc(x)") == [
        "import numpy as np", "from a import c"]


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


def _keep(q, k, dropout_p, dropout_seed):
    return None if dropout_p == 0 else keep_mask(dropout_seed, dropout_p, q.shape[:3] + (k.shape[2],))


def _dq_doubled_backward(q, k, v, d_out, *, dropout_p=0.0, dropout_seed=None, **kwargs):
    dq, dk, dv = attention_backward(q, k, v, d_out, dropout_p=dropout_p, keep=_keep(q, k, dropout_p, dropout_seed),
                                    **kwargs)
    return 2 * dq, dk, dv


def reference_with_dq_doubled(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0, dropout_seed=None):
    """Wrong backward (dQ twice the true one) behind the reference's forward."""
    return attention(q, k, v, scale=scale, causal=causal, mask=mask, dropout_p=dropout_p,
                     keep=_keep(q, k, dropout_p, dropout_seed)).out


reference_with_dq_doubled.attention_backward = _dq_doubled_backward


@pytest.mark.parametrize("dropout", [False, True])
def test_a_gradient_failure_s_repro_prints_each_gradient_s_verdict(capsys, dropout):
    """The gradient property's repro runs the backward on the same d_out and prints the verdict of dQ, dK and dV
    against the oracle's backward (with the dropout mask the seed decides): dQ fails, as in the property."""
    variant = Variant(load_impl(f"{__name__}:reference_with_dq_doubled"), "float64")
    problem = build(n_q=5, n_k=7, d=4, d_v=3, seed=2)
    extra = {"dropout_p": GRADIENT_DROPOUT_P, "dropout_seed": 11} if dropout else {}
    with pytest.raises(PropertyViolation) as failure:
        check_gradients(Trial(variant, problem), problem, seed=3, extra=extra)
    assert failure.value.summary.startswith("dQ differs from the float64 oracle's backward")
    printed = _printed(failure.value.repro, capsys)
    verdicts = [line for line in printed if line.startswith(("PASS", "FAIL"))]
    assert [line.split(":")[0] for line in verdicts] == ["FAIL", "PASS", "PASS"], printed
    assert verdicts[0].startswith("FAIL: dQ differs from the float64 oracle's backward beyond the tolerance")
    assert printed[1:1 + len(failure.value.details)] == list(failure.value.details)  # the property's worst element


def test_a_metamorphic_failure_s_repro_replays_the_same_comparison(capsys):
    """A metamorphic property's repro (Trial.expect_unchanged) rebuilds the input, derives the transformed one by
    the same steps and prints the verdict of the same comparison: the property's worst element and terms."""
    variant = Variant(load_impl("zoo/declared.py:per_block_softmax"), "float64")
    with pytest.raises(PropertyViolation) as failure:
        test_symmetry.test_permuting_keys_with_values_changes_nothing(variant=variant)
    printed = _printed(failure.value.repro, capsys)
    assert printed[0] == f"FAIL: {failure.value.summary}"
    assert printed[1:] == list(failure.value.details)


@pytest.mark.parametrize("check, target, summary", [
    (lambda variant: test_masking.test_fully_masked_row_gives_zero_output(variant=variant),
     "zoo/wrong.py:fully_masked_rows_mean", "a query row with no visible key has a non-zero output"),
    (lambda variant: test_regimes.test_repeated_calls_follow_new_values_and_leave_inputs_alone(
        variant=variant, regime=regimes.SEQUENCE_LENGTHS[0]),
     "zoo/wrong.py:stale_cache_by_shape", "the call on new values returned the previous call's output"),
])
def test_a_property_s_own_script_prints_its_verdict(capsys, check, target, summary):
    """The exact check of fully masked rows and the calls on A, B, A replay what the property compared and print
    FAIL: a stale state shows only after the calls before it, so the repro makes the three calls."""
    with pytest.raises(PropertyViolation) as failure:
        check(Variant(load_impl(target), "float64"))
    assert failure.value.summary == summary
    assert _printed(failure.value.repro, capsys)[0].startswith("FAIL: ")
