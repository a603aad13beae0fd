"""An expectation row covers what it declares and nothing else (CONTRACT 2; protocol/known_defects.py).

Each kind of scope (dtype, property, message) is shown to let an undeclared failure of the same
claim through as an unexpected FAIL (exit 1), and to cover the failure it does declare. Refuted
seed sentences need their own failure; a property checking two claims blames the one whose
assertion failed; an error is never hidden behind a declared failure; declarations that catch
nothing are reported.
"""

from __future__ import annotations

import pytest

from harness.engine.verdicts import Outcome, RunState, aggregate, judge_declarations, uncaught_declarations
from impls.records import BUILTIN_TARGETS, is_builtin
from protocol.known_defects import DefectDeclarationError, Row, parse_known_defects
from protocol.registry import Capabilities, Impl, Variant
from specs.catalogue import load_claims
from tests.fixtures.runs import run_suite

MASKING = ("properties/test_masking.py::test_masked_attention_matches_oracle",)


def _declared_run(name: str, tmp_path):
    target = f"tests/fixtures/declared_impls.py:{name}"
    return target, run_suite(*MASKING, "--impl", target, report_dir=tmp_path)


def test_the_declared_failure_is_expected(tmp_path):
    target, run = _declared_run("declares_the_failure", tmp_path)
    verdict = run.verdict("sdpa-formula", f"{target}[float64]")
    assert verdict["status"] == "fail" and verdict["expected"], run.output[-3000:]
    assert run.returncode == 0, run.output[-3000:]


@pytest.mark.parametrize("name", ["declares_other_dtype", "declares_other_property", "declares_other_message"])
def test_a_failure_outside_the_declaration_is_unexpected(name, tmp_path):
    """The issue's case: a masking bug (mask applied after the softmax) under a declaration about
    something else of the same claim must not pass."""
    target, run = _declared_run(name, tmp_path)
    verdict = run.verdict("sdpa-formula", f"{target}[float64]")
    assert verdict["status"] == "fail" and not verdict["expected"], verdict
    assert run.returncode == 1


def test_a_message_predicate_covers_the_failure_it_names(tmp_path):
    target, run = _declared_run("declares_matching_message", tmp_path)
    assert run.verdict("sdpa-formula", f"{target}[float64]")["expected"]
    assert run.returncode == 0, run.output[-3000:]


def test_a_bare_string_is_rejected_with_the_scoped_form(tmp_path):
    _, run = _declared_run("bare_string", tmp_path)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR
    assert "a bare string" in run.output and '"dtypes"' in run.output and '"properties"' in run.output


def test_a_declaration_nothing_triggers_is_a_warning_for_outside_implementations(tmp_path):
    """declares_other_property's scope (test_output_matches_oracle, where no mask is drawn) ran and
    caught nothing: reported, without changing the exit status an outside implementation gets."""
    target = "tests/fixtures/declared_impls.py:declares_other_property"
    run = run_suite("properties/test_formula.py::test_output_matches_oracle",
                    "--impl", target, report_dir=tmp_path)
    assert f"WARNING: {target}[float64] declares a known defect that no property caught" in run.output
    assert any("sdpa-formula" in problem for problem in run.report["uncaught_declared_defects"])
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
    assert verdict["status"] == "fail" and not verdict["expected"], verdict
    assert "raised RuntimeError" in verdict["detail"]
    assert run.returncode == 1
    assert load_claims()["permutation-invariance-literal"].refutation


@pytest.mark.parametrize("entry, message", [
    ("overflows", "a bare string"),
    ({"why": "x", "properties": ("test_a",)}, "`dtypes` is required"),
    ({"why": "x", "dtypes": ("float64",)}, "name the properties that fail or a `match`"),
    ({"why": "x", "dtypes": ("float16",), "match": "nan"}, "not among the implementation's"),
    ({"why": "x", "dtypes": ("float64",), "match": "(unclosed"}, "not a valid regex"),
    ({"why": "", "dtypes": ("float64",), "match": "nan"}, "`why` (a sentence) is required"),
    ({"why": "x", "dtypes": ("float64",), "match": "nan", "when": 1}, "unknown fields ['when']"),
])
def test_malformed_declarations_name_the_problem(entry, message):
    with pytest.raises(DefectDeclarationError) as info:
        parse_known_defects({"sdpa-formula": entry}, ("float64",), "user:fn")
    assert message in str(info.value)


def test_a_scope_covers_exactly_its_dtype_property_and_message():
    scope = Row("user:fn", "sdpa-formula", "why", ("float16",), ("test_a",), r"returned nan")
    assert scope.covers("sdpa-formula", "float16", "test_a", "returned nan at out[0]")
    assert not scope.covers("rows-sum-to-one", "float16", "test_a", "returned nan at out[0]")
    assert not scope.covers("sdpa-formula", "float32", "test_a", "returned nan at out[0]")
    assert not scope.covers("sdpa-formula", "float16", "test_b", "returned nan at out[0]")
    assert not scope.covers("sdpa-formula", "float16", "test_a", "out differs from the oracle")


def test_an_error_is_never_hidden_behind_a_declared_failure():
    declared = Outcome("fail", "t::a", "test_a", expected=True, why="declared")
    error = Outcome("error", "t::b", "test_b", detail="fixture exploded")
    unexpected = Outcome("fail", "t::c", "test_c")
    assert aggregate([declared, error])["status"] == "error"
    worst = aggregate([declared, error, unexpected])
    assert worst["status"] == "fail" and not worst["expected"] and worst["test"] == "t::c"
    assert aggregate([declared, Outcome("pass", "t::d", "test_d")])["expected"] is True


def _builtin_variant(scopes: tuple[Row, ...]) -> Variant:
    impl = Impl(name="numpy-reference", target="impls.numpy.numpy_reference:reference_attention", fn=lambda *a: None,
                capabilities=Capabilities(), known_defects=scopes, backend="numpy")
    return Variant(impl, "float64")


def test_uncaught_declarations_are_found_only_when_their_properties_ran():
    scope = Row("numpy-reference", "sdpa-formula", "why", ("float64",), ("test_output_matches_oracle",))
    variant = _builtin_variant((scope,))
    state = RunState([variant], [], load_claims(), builtin=frozenset(BUILTIN_TARGETS))
    assert is_builtin(variant.impl)
    assert uncaught_declarations(state) == []  # nothing ran
    state.collected[("sdpa-formula", variant.name)].add("properties.test_formula::test_output_matches_oracle")
    state.outcomes[("sdpa-formula", variant.name)].append(Outcome("pass", "x", "test_output_matches_oracle"))
    assert [found for found, _ in uncaught_declarations(state)] == [variant]
    assert judge_declarations(state, derandomized=True) and state.warnings[0].startswith("ERROR")
    assert not judge_declarations(state, derandomized=False) and state.warnings[-1].startswith("WARNING")
    state.triggered.add((variant.name, 0))
    assert uncaught_declarations(state) == []


def test_a_misspelt_property_is_reported(tmp_path):
    """A declaration naming a property the claim does not have covers nothing: say so."""
    target = "tests/fixtures/declared_impls.py:declares_a_misspelt_property"
    run = run_suite(*MASKING, "--impl", target, report_dir=tmp_path)
    assert "declares properties ['test_masked_attention_matches_orcale'] for 'sdpa-formula'" in run.output
    assert run.returncode == 1  # and the failure it meant to declare is unexpected
