"""`attention-spec compare` on synthetic reports: regressions fail the comparison, nothing else does."""

from __future__ import annotations

import json

import pytest

from harness.command_line.cli import main
from harness.reporting.compare import Change, ReportError, changes, load_verdicts
from harness.reporting.report import SCHEMA

IMPL = "my_attn.py:attention[float64]"


def _verdict(claim: str, status: str, expected: bool = False, impl: str = IMPL) -> dict:
    return {"claim": claim, "impl": impl, "status": status, "detail": "", "counterexample": None, "declared": expected}


def _write(path, *verdicts: dict, schema=SCHEMA):
    path.mkdir(parents=True, exist_ok=True)
    report = {"impls": sorted({v["impl"] for v in verdicts}), "claims": [], "verdicts": list(verdicts)}
    if schema is not None:
        report["schema"] = schema
    (path / "report.json").write_text(json.dumps(report))
    return path / "report.json"


@pytest.mark.parametrize(("old", "new", "kind"), [
    (("pass",), ("fail",), "worse"),
    (("pass",), ("error",), "worse"),
    (("fail", True), ("fail",), "worse"),  # declared -> unexpected
    (("pass",), ("fail", True), "worse"),  # a claim that held now fails, declared or not
    (("fail",), ("pass",), "better"),
    (("fail",), ("fail", True), "better"),
    (("fail", True), ("pass",), "better"),
    (("pass",), ("skip",), "changed"),
    (("error",), ("fail",), "changed"),
])
def test_each_kind_of_change(tmp_path, old, new, kind):
    before = load_verdicts(_write(tmp_path / "old", _verdict("sdpa-formula", *old)))
    after = load_verdicts(_write(tmp_path / "new", _verdict("sdpa-formula", *new)))
    assert [c.kind for c in changes(before, after)] == [kind]


def test_declared_reads_apart_from_an_unexpected_failure(tmp_path):
    verdicts = load_verdicts(_write(tmp_path, _verdict("a", "fail", True), _verdict("b", "fail")))
    assert verdicts == {("a", IMPL): "declared", ("b", IMPL): "fail"}


def test_regression_exits_1_and_names_claim_impl_and_statuses(tmp_path, capsys):
    old = _write(tmp_path / "old", _verdict("sdpa-formula", "pass"), _verdict("rows-sum-to-one", "fail"))
    new = _write(tmp_path / "new", _verdict("sdpa-formula", "fail"), _verdict("rows-sum-to-one", "pass"))
    assert main(["compare", str(old), str(new)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["worse", "sdpa-formula", IMPL, "pass", "->", "fail"]
    assert out[1].split() == ["better", "rows-sum-to-one", IMPL, "fail", "->", "pass"]
    assert out[-1].startswith("1 worse, 1 better, 0 changed, 0 added, 0 removed (of 2 verdicts)")


def test_improvements_additions_and_removals_exit_0(tmp_path, capsys):
    old = _write(tmp_path / "old", _verdict("sdpa-formula", "fail", True), _verdict("gone", "pass"))
    new = _write(tmp_path / "new", _verdict("sdpa-formula", "pass"), _verdict("fresh", "fail"))
    assert main(["compare", str(old.parent), str(new.parent)]) == 0  # directories, as --report writes them
    out = capsys.readouterr().out
    assert "better   sdpa-formula" in out and "declared -> pass" in out
    assert "added    fresh" in out and "- -> fail" in out
    assert "removed  gone" in out and "pass -> -" in out


def test_identical_reports_exit_0(tmp_path, capsys):
    report = _write(tmp_path, _verdict("sdpa-formula", "pass"))
    assert main(["compare", str(report), str(report)]) == 0
    assert capsys.readouterr().out.strip() == "0 worse, 0 better, 0 changed, 0 added, 0 removed (of 1 verdicts)"


def test_changes_list_worst_first():
    old = {("a", IMPL): "fail", ("b", IMPL): "pass"}
    new = {("a", IMPL): "pass", ("b", IMPL): "fail", ("c", IMPL): "pass"}
    assert changes(old, new) == [Change("b", IMPL, "pass", "fail"), Change("a", IMPL, "fail", "pass"),
                                 Change("c", IMPL, None, "pass")]


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such file"),
    ("{not json", "not JSON"),
    (json.dumps({"verdicts": []}), "no schema field"),
    (json.dumps({"schema": 99, "verdicts": []}), "schema 99, which this version of attention-spec does not read"),
    (json.dumps({"schema": SCHEMA - 2, "verdicts": []}), f"schema {SCHEMA - 2}, which this version"),
    (json.dumps({"schema": SCHEMA}), "no list of verdicts"),
    (json.dumps({"schema": SCHEMA, "verdicts": [{"claim": "a"}]}), "lacks claim, impl or status"),
    (json.dumps({"schema": SCHEMA, "verdicts": [_verdict("a", "wobbly")]}), "has status 'wobbly'"),
])
def test_unreadable_report_is_a_clear_error_with_exit_2(tmp_path, capsys, content, message):
    good = _write(tmp_path / "good", _verdict("a", "pass"))
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    with pytest.raises(ReportError, match=message):
        load_verdicts(bad)
    assert main(["compare", str(good), str(bad)]) == 2
    assert message in capsys.readouterr().err


def test_a_report_of_the_previous_schema_is_read_by_its_own_field_names(tmp_path):
    """Schema 1 called a declared failure `expected`: compare reads it so, and finds no change against the same
    verdicts written in the current schema; a declared failure that became unexpected is still worse."""
    def former(claim, status, expected=False):
        verdict = _verdict(claim, status)
        del verdict["declared"]
        return {**verdict, "expected": expected}

    old = _write(tmp_path / "old", former("sdpa-formula", "fail", True), former("rows-sum-to-one", "pass"),
                 schema=SCHEMA - 1)
    same = _write(tmp_path / "same", _verdict("sdpa-formula", "fail", True), _verdict("rows-sum-to-one", "pass"))
    worse = _write(tmp_path / "worse", _verdict("sdpa-formula", "fail"), _verdict("rows-sum-to-one", "pass"))
    assert load_verdicts(old) == load_verdicts(same) == {("sdpa-formula", IMPL): "declared",
                                                          ("rows-sum-to-one", IMPL): "pass"}
    assert [c.kind for c in changes(load_verdicts(old), load_verdicts(worse))] == ["worse"]
