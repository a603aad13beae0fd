"""The suite split across machines (harness.reporting.split_runs): two pytest-split groups of one run, merged by
`attention-spec merge`, give the verdicts of the unsplit run (`attention-spec compare`: nothing changed), although a
claim's properties ran in both groups (so neither group alone could judge its declared row) and a declared row was
caught in one group only; groups that disagree, or one given twice, are refused by name."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.command_line.cli import compare, merge
from harness.engine.verdicts import uncaught_declarations
from harness.reporting.split_runs import OUTCOMES, SplitError, merge_outcomes
from tests.fixtures.runs import run_suite

SELECTION = ("properties", "interpretations", "-p", "no:randomly",
             "--impl", "impls.numpy.numpy_reference:reference_attention",
             "--impl", "impls.seeds.seed000_exp_ratio:exp_ratio_attention",
             "--claims", "sdpa-formula,rows-sum-to-one")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("split")
    single = run_suite(*SELECTION, report_dir=root / "single")
    groups = [run_suite(*SELECTION, "--splits", "2", "--group", str(i), report_dir=root / f"group{i}")
              for i in (1, 2)]
    return root, single, groups


def _caught_rows(directory) -> set[tuple[str, str]]:
    data = json.loads((directory / OUTCOMES).read_text())
    return {(c["subject"], slug) for c in data["contributions"] for slug, o in c["outcomes"]
            if o["status"] == "fail" and o["expected"]}


def _claims_run(directory) -> set[str]:
    data = json.loads((directory / OUTCOMES).read_text())
    return {slug for c in data["contributions"] for slug, _ in c["collected"]}


def test_a_group_writes_outcomes_and_no_verdicts(runs):
    root, _, groups = runs
    for i, group in enumerate(groups, start=1):
        assert group.returncode == 0, group.output[-2000:]
        assert (root / f"group{i}" / OUTCOMES).is_file() and not (root / f"group{i}" / "report.json").exists()
        assert f"split group {i}/2" in group.output


def test_the_merged_groups_give_the_verdicts_of_the_single_run(runs, capsys):
    root, single, _ = runs
    assert single.report is not None, single.output[-2000:]
    assert merge([root / "group1", root / "group2"], root / "merged") == 0
    assert compare(root / "single", root / "merged") == 0
    assert "0 worse, 0 better, 0 changed, 0 added, 0 removed" in capsys.readouterr().out
    merged = json.loads((root / "merged" / "report.json").read_text())
    assert merged["uncaught_expectations"] == single.report["uncaught_expectations"] == []


def test_the_split_separated_what_only_the_merge_can_judge(runs):
    """sdpa-formula's properties ran in both groups and catch seed 000's row in each: neither group alone ran all of
    them, so neither could have judged the row (with nothing caught, only the merge calls it uncaught); and a row
    caught in one group only (rows-sum-to-one) is in the merge's state as caught."""
    root, _, _ = runs
    first, second = root / "group1", root / "group2"
    assert "sdpa-formula" in _claims_run(first) & _claims_run(second)
    row = ("seed000-exp-ratio[float64]", "rows-sum-to-one")
    assert row in _caught_rows(first) - _caught_rows(second)
    judged = {}
    for name, groups in (("first", [first]), ("second", [second]), ("merged", [first, second])):
        state = merge_outcomes(groups).state
        state.triggered.clear()  # as if nothing had caught a row: which rows could each judge?
        judged[name] = {(variant.name, scope.claim) for variant, scope in uncaught_declarations(state)}
    sdpa = {found for found in judged["merged"] if found == (row[0], "sdpa-formula")}
    assert sdpa and not sdpa & (judged["first"] | judged["second"])


def test_groups_that_disagree_or_repeat_are_refused(runs, tmp_path):
    root, _, _ = runs
    with pytest.raises(SplitError, match="a group is given twice"):
        merge_outcomes([root / "group1", root / "group1"])
    other = tmp_path / "other"
    shutil.copytree(root / "group2", other)
    data = json.loads((other / OUTCOMES).read_text())
    data["variants"] = data["variants"][:1]
    (other / OUTCOMES).write_text(json.dumps(data))
    with pytest.raises(SplitError, match="the groups disagree on variants"):
        merge_outcomes([root / "group1", other])
    with pytest.raises(SplitError, match="not a split group's outcomes"):
        merge_outcomes([tmp_path / "missing"])
