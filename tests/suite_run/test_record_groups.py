"""One draw, many records (harness.pytest_plugin.record_groups), as a user meets it: records that draw alike are
judged on the same Hypothesis examples, and on exactly the problems each is judged on alone; a record that rejects
otherwise runs alone, with the valid examples it has alone; a failing record is shrunk alone."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.fixtures.runs import run_suite

FIXTURE = "tests/fixtures/group_properties.py"
PROPERTY = "test_one_record_rejects_odd_query_counts"
EINSUM = "tests/fixtures/outside_impls.py:einsum_attention[float64]"
TWIN = "tests/fixtures/group_impls.py:einsum_twin[float64]"
PICKY = "tests/fixtures/group_impls.py:picky_attention[float64]"


def _valid_examples(junit) -> dict[str, int]:
    """Valid examples per test, as the plugin records them in the JUnit XML."""
    return {case.get("name"): int(prop.get("value")) for case in ET.parse(junit).iter("testcase")
            for prop in case.iter("property") if prop.get("name") == "valid_examples"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """The property on the three records, drawing once for the group and each drawing its own."""
    found = {}
    for shared in ("yes", "no"):
        where = tmp_path_factory.mktemp(f"share-{shared}")
        targets = [arg for name in (EINSUM, TWIN, PICKY) for arg in ("--impl", name.removesuffix("[float64]"))]
        run = run_suite(FIXTURE, *targets, "--share-draws", shared, "--junitxml", str(where / "junit.xml"),
                        report_dir=where, env={"GROUP_SEEN_FILE": str(where / "seen.json")})
        assert run.returncode == 0, run.output[-3000:]
        found[shared] = (run, json.loads((where / "seen.json").read_text()), _valid_examples(where / "junit.xml"))
    return found


def test_records_that_draw_alike_are_judged_once_on_what_each_is_judged_on_alone(runs):
    _, shared, _ = runs["yes"]
    _, alone, _ = runs["no"]
    assert [example for example, _ in shared[EINSUM]] == [example for example, _ in shared[TWIN]]  # drawn once
    assert not {example for example, _ in alone[EINSUM]} & {example for example, _ in alone[TWIN]}
    for name in (EINSUM, TWIN):
        assert [problem for _, problem in shared[name]] == [problem for _, problem in alone[name]]


def test_a_record_that_rejects_otherwise_runs_alone_with_its_own_examples(runs):
    """The picky record rejects odd query counts, which the others take: it leaves the loop at the first one and
    its own run is judged on what it is judged on without sharing, with as many valid examples (>= 15, ci)."""
    for shared in ("yes", "no"):
        run, _, valid = runs[shared]
        for name in (EINSUM, TWIN, PICKY):
            assert run.verdict("sdpa-formula", name)["status"] == "pass"
            assert valid[f"{PROPERTY}[{name}]"] >= 15, valid
    assert runs["yes"][2][f"{PROPERTY}[{PICKY}]"] == runs["no"][2][f"{PROPERTY}[{PICKY}]"]
    in_loop_and_alone, alone = ([problem for _, problem in runs[shared][1][PICKY]] for shared in ("yes", "no"))
    assert len(in_loop_and_alone) > len(alone) and in_loop_and_alone[-len(alone):] == alone


def test_a_failing_record_is_shrunk_alone_and_its_group_mate_passes(tmp_path):
    """The wrong record's failure, found in the group's loop, is shrunk as when it runs alone: the same smallest
    input (five keys here: a fourth key's weight can round away)."""
    wrong = "tests/fixtures/group_impls.py:drops_keys_past_three"
    inputs = []
    for shared in ("yes", "no"):
        run = run_suite("properties/test_formula.py", "-k", "test_output_matches_oracle",
                        "--impl", EINSUM.removesuffix("[float64]"), "--impl", wrong, "--share-draws", shared,
                        report_dir=tmp_path / shared)
        assert run.returncode == 1, run.output[-3000:]
        assert run.verdict("sdpa-formula", EINSUM)["status"] == "pass"
        failed = run.verdict("sdpa-formula", f"{wrong}[float64]")
        assert failed["status"] == "fail" and not failed["declared"]
        inputs.append([line.strip() for line in run.output.splitlines() if "input: q (" in line])
    assert inputs[0] == inputs[1] and "k (1, 1, 5, 1)" in inputs[0][0], inputs
