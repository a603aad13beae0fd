"""A failure's repro snippet, executed, runs the property's comparison and prints its verdict: FAIL with the
worst element and the allowance's terms there on the failing input, PASS on an input the implementation gets
right."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from harness.api.repro import imports_used, repro_snippet, verdict
from harness.api.trial import Trial, check_against_oracle
from properties.call_checks import check_calls_on_a_b_a
from properties.gradient_checks import GRADIENT_DROPOUT_P, check_gradients
from properties.masking_checks import check_empty_rows_zero
from protocol.registry import Variant, load_impl
from specs import regimes
from specs.derivations import positions_taken, with_mask_entries
from specs.dropout_mask import keep_mask
from specs.gradients import attention_backward
from specs.problems import build
from specs.reference import attention
from specs.tolerance import Allowance
from tests.fixtures.standalone_repro import assert_repro_fails_alike, run_standalone

WRONG = "tests/fixtures/report_impls.py:keys_reversed"
RIGHT = "impls.numpy.numpy_reference:reference_attention"


def _printed(snippet: str) -> list[str]:
    """What the snippet prints, run on its own in a fresh Python (it must not fail)."""
    done = run_standalone(snippet)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_the_repro_of_a_failure_raises_it_again_with_its_worst_element_and_terms():
    with pytest.raises(PropertyViolation) as failure:
        check_against_oracle(Variant(load_impl(WRONG), "float64"), build(n_q=3, n_k=4, d=2, d_v=2, seed=5))
    assert failure.value.repro.splitlines()[-2] == f"check_against_oracle(Variant(load_impl({WRONG!r}), 'float64'), p)"
    assert_repro_fails_alike(failure.value)  # the same worst element, count and terms
    assert failure.value.details[0].startswith("worst element out[") and "(dominant)" in failure.value.details[2]


def test_a_snippet_is_written_once_when_first_read():
    """Shrinking raises many violations nobody reads: each holds the function that writes its snippet and calls it
    on the first reading (the message, report.json's counterexample), once."""
    written = []

    def write() -> str:
        written.append(1)
        return "print('the snippet')"

    violation = PropertyViolation("out differs", repro=write)
    assert written == []
    assert str(violation).endswith("reproduce:\n    print('the snippet')")
    assert violation.counterexample()["repro"] == "print('the snippet')"
    assert violation.noted("a note").repro == "print('the snippet')"
    assert written == [1]


def test_a_failure_outside_any_check_prints_the_verdict_of_the_trial_s_last_call():
    """A property's own comparison outside a @reproducible check: the snippet makes the trial's call and prints the
    verdict, FAIL with the worst element, count and terms."""
    problem = build(n_q=3, n_k=4, d=2, d_v=2, seed=5)
    trial = Trial(Variant(load_impl(WRONG), "float64"), problem)
    oracle, allowance = trial.oracle()
    with pytest.raises(PropertyViolation) as failure:
        trial.expect_close(trial.call(), oracle.out, allowance)
    printed = _printed(failure.value.repro)
    assert printed[0] == "FAIL: out differs from the float64 oracle beyond the tolerance"
    assert printed[1:] == list(failure.value.details)


def test_the_repro_of_an_input_the_implementation_gets_right_prints_pass():
    problem = build(n_q=3, n_k=4, d=2, d_v=2, seed=5)
    for target, first in ((RIGHT, "PASS: out is within the tolerance of the float64 oracle"), (WRONG, "FAIL: ")):
        snippet = repro_snippet(problem, target=target, dtype="float64", layout="contiguous",
                                causal_alignment="top_left")
        assert _printed(snippet)[0].startswith(first), target


def torch_keys_reversed(q, k, v, *, scale=None):
    """Takes torch tensors (forward only): the keys in reverse order, the values not, a wrong pairing."""
    import torch

    weights = torch.softmax(q @ k.flip(-2).transpose(-1, -2) * (scale or q.shape[-1] ** -0.5), dim=-1)
    return weights @ v


torch_keys_reversed.attention_capabilities = {"tensors": "torch", "differentiable": False}


def test_the_repro_of_a_torch_implementation_hands_it_tensors_as_the_suite_did():
    """An implementation that takes torch tensors: the check called again hands it tensors as the suite did (the
    trial's own call), so the snippet fails with the violation instead of raising on a NumPy input."""
    pytest.importorskip("torch")
    with pytest.raises(PropertyViolation) as failure:
        check_against_oracle(Variant(load_impl(f"{__name__}:torch_keys_reversed"), "float64"),
                             build(n_q=3, n_k=4, d=2, d_v=2, seed=5))
    assert_repro_fails_alike(failure.value)


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
    _printed(snippet)


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
def test_a_gradient_failure_s_repro_calls_the_same_check_again(dropout):
    """The gradient check's repro calls check_gradients again on the same trial, problem, d_out seed and keywords
    (the dropout's seed among them), and fails as it did: dQ, with the same worst element and terms."""
    variant = Variant(load_impl(f"{__name__}:reference_with_dq_doubled"), "float64")
    problem = build(n_q=5, n_k=7, d=4, d_v=3, seed=2)
    extra = {"dropout_p": GRADIENT_DROPOUT_P, "dropout_seed": 11} if dropout else {}
    with pytest.raises(PropertyViolation) as failure:
        check_gradients(Trial(variant, problem), problem, seed=3, extra=extra)
    assert failure.value.summary.startswith("dQ differs from the float64 oracle's backward")
    assert failure.value.repro.splitlines()[-2] == (
        f"check_gradients(Trial(Variant(load_impl('{__name__}:reference_with_dq_doubled'), 'float64'), p, "
        f"layout='contiguous', past_range=False), p, seed=3, extra={extra!r})")
    assert_repro_fails_alike(failure.value)


def test_a_metamorphic_failure_s_repro_replays_the_same_comparison():
    """A metamorphic property's repro (Trial.expect_unchanged) rebuilds the input and the transformed one by the
    same steps and calls the same comparison again (check_unchanged), which fails with the property's worst element
    and terms."""
    variant = Variant(load_impl("zoo/declared.py:per_block_softmax"), "float64")
    problem = build(n_q=3, n_k=20, d=4, d_v=3, seed=1)  # two key blocks of 16, each normalised alone
    moved = problem.derive(positions_taken, keys=list(range(19, -1, -1)))
    with pytest.raises(PropertyViolation) as failure:
        Trial(variant, problem).expect_unchanged(moved, what="out(k, v permuted together)", versus="out")
    assert "= positions_taken(p, keys=[19, 18," in failure.value.repro
    assert failure.value.repro.splitlines()[-2].startswith(
        "check_unchanged(Trial(Variant(load_impl('zoo/declared.py:per_block_softmax'), 'float64'), problem_1, ")
    assert_repro_fails_alike(failure.value)


EMPTIED = build(batch=2, heads=2, n_q=4, n_k=5, d=4, d_v=3, seed=3, mask_layout="full").derive(
    with_mask_entries, (0, 1, [0, 2]), False)  # rows 0 and 2 of batch 0, head 1 see no key
REGIME = regimes.SEQUENCE_LENGTHS[0]


@pytest.mark.parametrize("check, target, summary", [
    (lambda variant: check_empty_rows_zero(Trial(variant, EMPTIED), "rows 0 and 2 emptied"),
     "zoo/wrong.py:fully_masked_rows_mean", "a query row with no visible key has a non-zero output"),
    (lambda variant: check_calls_on_a_b_a(variant, REGIME.problem(), REGIME.problem(seed=REGIME.recipe["seed"] + 1)),
     "zoo/wrong.py:stale_cache_by_shape", "the call on new values returned the previous call's output"),
])
def test_a_property_s_own_check_is_called_again(check, target, summary):
    """The exact check of fully masked rows and the calls on A, B, A: the repro calls the property's check again on
    the same arguments (a stale state shows only after the calls before it, so it makes the three calls), and it
    fails with the property's message."""
    with pytest.raises(PropertyViolation) as failure:
        check(Variant(load_impl(target), "float64"))
    assert failure.value.summary == summary
    assert failure.value.repro.splitlines()[-2].startswith(("check_empty_rows_zero(Trial(", "check_calls_on_a_b_a("))
    assert_repro_fails_alike(failure.value)
