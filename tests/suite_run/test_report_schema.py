"""report.json against its JSON Schema (harness/reporting/report.schema.json): a report the suite writes is valid,
and the schema rejects reports that break the layout a reader relies on."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from tests.fixtures.report_schema import SCHEMA, schema_errors
from tests.fixtures.runs import run_suite


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    """A real run: one correct implementation and one that fails (a counterexample, its picture)."""
    directory = tmp_path_factory.mktemp("report")
    run = run_suite("properties", "interpretations", "--impl", "tests/fixtures/outside_impls.py:einsum_attention",
                    "--impl", "docs/examples/forgot_scale.py:attention", "--claims", "sdpa-formula,rows-sum-to-one",
                    "--long-regimes", "no", report_dir=directory)
    assert run.report is not None, run.output[-3000:]
    return run.report


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_a_generated_report_is_valid(report):
    assert any(v["status"] == "fail" and v["counterexample"] for v in report["verdicts"]), "no failure to cover"
    assert any(v["status"] == "pass" for v in report["verdicts"])
    assert schema_errors(report) == []


def test_the_former_field_names_are_written_beside_the_current_ones(report):
    """Schema 2's deprecated aliases (harness.reporting.report.DEPRECATED_ALIASES) carry the same values, so a
    reader of schema 1's `expected` and `uncaught_declared_defects` still reads this report right."""
    assert report["schema"] == 2
    assert all(v["expected"] is v["declared"] for v in report["verdicts"])
    assert report["uncaught_declared_defects"] == report["uncaught_expectations"]


def _drop(field):
    return lambda r: r.pop(field)


def _first_verdict(change):
    return lambda r: change(r["verdicts"][0])


def _failing_verdict(change):
    return lambda r: change(next(v for v in r["verdicts"] if v["counterexample"]))


BROKEN = {
    "no verdicts": (_drop("verdicts"), "'verdicts' is a required property"),
    "an unknown top-level field": (lambda r: r.update(verdict_count=3), "verdict_count"),
    "a newer schema version": (lambda r: r.update(schema=3), "$.schema"),
    "a status outside pass/fail/skip/error": (_first_verdict(lambda v: v.update(status="passed")),
                                              "$.verdicts[0].status"),
    "a verdict without its claim": (_first_verdict(lambda v: v.pop("claim")), "'claim' is a required property"),
    "expected as a string": (_first_verdict(lambda v: v.update(expected="no")), ".expected"),
    "a counterexample without details": (_failing_verdict(lambda v: v["counterexample"].pop("details")),
                                         "'details' is a required property"),
    "a claim slug with spaces": (lambda r: r["claims"][0].update(slug="rows sum to one"), "$.claims[0].slug"),
    "a claim of an unknown kind": (lambda r: r["claims"][0].update(kind="heuristic"), "$.claims[0].kind"),
    "a summary count below zero": (lambda r: r["summary"].update(skip=-1), "$.summary.skip"),
    "kernels as a list": (lambda r: r.update(kernels=[]), "$.kernels"),
    "a figure outside figures/": (lambda r: r["figures"]["drawn"][0].update(file="/tmp/x.png"),
                                  "$.figures.drawn[0].file"),
    "a capability dtype the suite does not know": (
        lambda r: next(iter(r["capabilities"].values())).update(dtypes=["float8"]), ".dtypes[0]"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_report_is_rejected_at_the_broken_field(report, name):
    change, where = BROKEN[name]
    broken = copy.deepcopy(report)
    change(broken)
    errors = schema_errors(broken)
    assert errors, f"{name}: the schema accepted it"
    assert any(where in error for error in errors), errors
