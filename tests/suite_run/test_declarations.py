"""A declared deviation covers what it explains and nothing else (CONTRACT 2; protocol/expectation_rows.py,
harness.api.explained_runs).

A declaration names the claim, the dtypes and a deviation; a failing example is declared only when the deviation
explains every element of it. Shown to let an undeclared failure of the same claim through as an unexpected FAIL
(exit 1) (another dtype, another deviation, a real defect beside the declared behaviour, shrunk to the real
defect), and to cover the failure it does explain; a pattern over a tolerance failure is refused. Refuted seed
sentences need their own failure; a property checking two claims blames the one whose assertion failed; an error is
never hidden behind a declared failure; declarations that catch nothing are reported.
"""

from __future__ import annotations

import pytest

from harness.engine.verdicts import Outcome, RunState, aggregate, judge_declarations, uncaught_declarations
from impls.records import BUILTIN_TARGETS, is_builtin
from protocol.expectation_rows import Expectation, ExpectationError, parse_expectations
from protocol.registry import Capabilities, Impl, Variant
from specs.catalogue import load_claims
from specs.deviations import deviation_from_fields
from tests.fixtures.runs import run_suite

MASKING = ("properties/test_masking.py::test_masked_attention_matches_oracle",)
WINDOW = ("properties/test_score_mods.py", "--claims", "sliding-window-attends-its-band")


def _declared_run(name: str, tmp_path, *args: str):
    target = f"tests/fixtures/declared_impls.py:{name}"
    return target, run_suite(*(args or MASKING), "--impl", target, report_dir=tmp_path)


def test_the_explained_failure_is_expected(tmp_path):
    target, run = _declared_run("declares_the_failure", tmp_path)
    verdict = run.verdict("sdpa-formula", f"{target}[float64]")
    assert verdict["status"] == "fail" and verdict["declared"], run.output[-3000:]
    assert "explained as own:masked_after_the_softmax" in verdict["detail"], verdict["detail"]
    assert run.returncode == 0, run.output[-3000:]


def test_a_flash_attention_wrapper_declares_its_two_lse_conventions_and_passes_the_rest(tmp_path):
    """FlashAttention's log-sum-exp of a row with no key (+inf) and under causal ALiBi (shifted by
    slope * (i + n_k - n_q)), each a documented deviation declared on the claims it fails; every other claim
    passes, so the run exits 0."""
    _, run = _declared_run("flash_attention_wrapper", tmp_path, "properties", "interpretations",
                                "--long-regimes", "no", "--isolate", "no")
    declared = {v["claim"]: v for v in run.report["verdicts"] if v["status"] == "fail" and v["declared"]}
    assert {"fully-masked-rows-zero", "lse-keyword-domain", "alibi-is-a-distance-bias"} <= set(declared)
    assert "keyless-lse-plus-inf" in declared["lse-keyword-domain"]["detail"], declared["lse-keyword-domain"]
    assert "causal-alibi-lse-shift" in declared["alibi-is-a-distance-bias"]["detail"]
    assert run.returncode == 0, run.output[-3000:]


@pytest.mark.parametrize("name", ["declares_other_dtype", "declares_other_deviation"])
def test_a_failure_outside_the_declaration_is_unexpected(name, tmp_path):
    """A masking bug (mask applied after the softmax) under a declaration of another dtype, or of a deviation that
    does not explain it (a row with no key averaging the values), must not pass."""
    target, run = _declared_run(name, tmp_path)
    verdict = run.verdict("sdpa-formula", f"{target}[float64]")
    assert verdict["status"] == "fail" and not verdict["declared"], verdict
    assert run.returncode == 1


def test_a_real_defect_beside_a_declared_deviation_is_unexpected_and_shrinks_to_itself(tmp_path):
    """The issue's case: an outside implementation declaring its real deviation (a row with no visible key averages
    the values) for the window's claims, with a window whose left end is exclusive. The window's failure is reported
    unexpected, shrunk to an example the deviation does not explain; the same implementation with the window right
    passes, its keyless rows declared."""
    target, run = _declared_run("keyless_mean_and_exclusive_window", tmp_path / "both", *WINDOW)
    verdict = run.verdict("sliding-window-attends-its-band", f"{target}[float64]")
    assert verdict["status"] == "fail" and not verdict["declared"], verdict
    assert "not explained by the declared deviations (keyless-row-mean)" in verdict["detail"], verdict["detail"]
    assert run.returncode == 1
    target, run = _declared_run("keyless_mean_only", tmp_path / "right", *WINDOW)
    verdict = run.verdict("sliding-window-attends-its-band", f"{target}[float64]")
    assert verdict["status"] == "fail" and verdict["declared"], verdict
    assert "explained as keyless-row-mean" in verdict["detail"]
    assert run.returncode == 0, run.output[-3000:]


@pytest.mark.parametrize("name, message", [
    ("bare_string", "a bare string"),
    ("declares_a_pattern", "declares only a raised error"),
])
def test_a_declaration_that_would_hide_failures_is_refused_with_the_deviation_form(name, message, tmp_path):
    _, run = _declared_run(name, tmp_path)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR
    assert message in run.output and '"deviation": "<one of specs.deviations' in run.output


def test_a_declaration_nothing_triggers_is_a_warning_for_outside_implementations(tmp_path):
    """declares_the_failure's deviation has nothing to explain in test_output_matches_oracle (no mask drawn): reported,
    without changing the exit status an outside implementation gets."""
    target = "tests/fixtures/declared_impls.py:declares_the_failure"
    run = run_suite("properties/test_formula.py::test_output_matches_oracle", "--impl", target, report_dir=tmp_path)
    assert f"WARNING: {target}[float64] declares a known defect that no property caught" in run.output
    assert any("sdpa-formula" in problem for problem in run.report["uncaught_expectations"])
    assert run.returncode == 0, run.output[-3000:]


def test_a_property_of_two_claims_blames_the_failing_assertion(tmp_path):
    target = "tests/fixtures/declared_impls.py:weights_outside_unit_interval"
    run = run_suite("properties/test_probability.py::test_observed_weights_are_distributions",
                    "--impl", target, report_dir=tmp_path)
    failed = run.verdict("weights-in-unit-interval", f"{target}[float64]")
    assert failed["status"] == "fail" and "weights differs from the interval [0, 1]" in failed["detail"]
    # the row sums are exactly 1: the failure is not blamed on rows-sum-to-one (whose assertion never ran)
    rows = run.verdict("rows-sum-to-one", f"{target}[float64]")
    assert rows is None or rows["status"] != "fail", rows


def test_a_refuted_sentence_needs_its_own_failure(tmp_path):
    """permutation-invariance-literal is false as written; an implementation that raises fails its
    property for another reason, which is not the refutation: unexpected."""
    target = "tests/fixtures/declared_impls.py:always_raises"
    run = run_suite("properties/test_symmetry.py::test_shuffling_the_sequence_leaves_output_unchanged",
                    "--impl", target, report_dir=tmp_path)
    verdict = run.verdict("permutation-invariance-literal", f"{target}[float64]")
    assert verdict["status"] == "fail" and not verdict["declared"], verdict
    assert "raised RuntimeError" in verdict["detail"]
    assert run.returncode == 1
    assert load_claims()["permutation-invariance-literal"].refutation


@pytest.mark.parametrize("entry, message", [
    ("overflows", "a bare string"),
    ({"why": "x", "deviation": "keyless-row-mean"}, "`dtypes` is required"),
    ({"why": "x", "dtypes": ("float64",)}, "`deviation` is required"),
    ({"why": "x", "dtypes": ("float16",), "deviation": "keyless-row-mean"}, "not among the implementation's"),
    ({"why": "x", "dtypes": ("float64",), "deviation": "rejects", "raises": "E", "match": "(unclosed"},
     "not a valid regex"),
    ({"why": "", "dtypes": ("float64",), "deviation": "keyless-row-mean"}, "`why` (a sentence) is required"),
    ({"why": "x", "dtypes": ("float64",), "deviation": "keyless-row-mean", "when": 1}, "unknown fields ['when']"),
    ({"why": "x", "dtypes": ("float64",), "deviation": "keyless-row-mean", "properties": ("test_a",)},
     "`properties` no longer scopes"),
])
def test_malformed_declarations_name_the_problem(entry, message):
    with pytest.raises(ExpectationError) as info:
        parse_expectations({"sdpa-formula": entry}, ("float64",), "user:fn")
    assert message in str(info.value)


def test_a_row_applies_to_its_claim_and_dtypes_only():
    row = Expectation("user:fn", "sdpa-formula", "why", ("float16",),
                      deviation_from_fields("keyless-row-mean", {}, "t"))
    assert row.applies("sdpa-formula", "float16")
    assert not row.applies("rows-sum-to-one", "float16") and not row.applies("sdpa-formula", "float32")


def test_an_error_is_never_hidden_behind_a_declared_failure():
    declared = Outcome("fail", "t::a", "test_a", expected=True, why="declared")
    error = Outcome("error", "t::b", "test_b", detail="fixture exploded")
    unexpected = Outcome("fail", "t::c", "test_c")
    assert aggregate([declared, error])["status"] == "error"
    worst = aggregate([declared, error, unexpected])
    assert worst["status"] == "fail" and not worst["declared"] and worst["test"] == "t::c"
    assert aggregate([declared, Outcome("pass", "t::d", "test_d")])["declared"] is True


def _builtin_variant(scopes: tuple[Expectation, ...]) -> Variant:
    impl = Impl(name="numpy-reference", target="impls.numpy.numpy_reference:reference_attention", fn=lambda *a: None,
                capabilities=Capabilities(), expectations=scopes, backend="numpy")
    return Variant(impl, "float64")


def test_uncaught_declarations_are_found_only_when_their_properties_ran():
    scope = Expectation("numpy-reference", "sdpa-formula", "why", ("float64",),
                deviation_from_fields("float32-softmax", {}, "test"))
    variant = _builtin_variant((scope,))
    state = RunState([variant], [], load_claims(), builtin=frozenset(BUILTIN_TARGETS))
    assert is_builtin(variant.impl)
    assert uncaught_declarations(state) == []  # nothing ran
    prop = "properties.test_formula::test_output_matches_oracle"
    state.registered["sdpa-formula"].add(prop)  # the claim's one property, here
    state.collected[("sdpa-formula", variant.name)].add(prop)
    state.outcomes[("sdpa-formula", variant.name)].append(Outcome("pass", "x", "test_output_matches_oracle"))
    assert [found for found, _ in uncaught_declarations(state)] == [variant]
    assert judge_declarations(state, derandomized=True) and state.warnings[0].startswith("ERROR")
    assert not judge_declarations(state, derandomized=False) and state.warnings[-1].startswith("WARNING")
    state.triggered.add((variant.name, 0))
    assert uncaught_declarations(state) == []
