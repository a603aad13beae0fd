"""One draw, many records (harness.pytest_plugin.record_groups), as a user meets it: records whose strategies cannot
tell them apart are judged on the same examples, each keeps its own verdict, id and valid examples, a rejection by
one does not cost the other its examples, and a failing record is shrunk alone."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.fixtures.runs import run_suite

FIXTURE = "tests/fixtures/group_properties.py"
EINSUM = "tests/fixtures/outside_impls.py:einsum_attention"
PICKY = "tests/fixtures/group_impls.py:picky_attention"


def _valid_examples(junit) -> dict[str, int]:
    """Valid examples per test, as the plugin records them in the JUnit XML."""
    return {case.get("name"): int(prop.get("value")) for case in ET.parse(junit).iter("testcase")
            for prop in case.iter("property") if prop.get("name") == "valid_examples"}


@pytest.fixture(scope="module", params=["yes", "no"])
def rejecting_run(request, tmp_path_factory):
    where = tmp_path_factory.mktemp(f"share-{request.param}")
    run = run_suite(FIXTURE, "--impl", EINSUM, "--impl", PICKY, "--share-draws", request.param,
                    "--junitxml", str(where / "junit.xml"), report_dir=where,
                    env={"GROUP_SEEN_FILE": str(where / "seen.json")})
    seen = json.loads((where / "seen.json").read_text())
    return request.param, run, seen, _valid_examples(where / "junit.xml")


def test_records_of_a_group_are_judged_on_the_same_examples(rejecting_run):
    shared, run, seen, _ = rejecting_run
    assert run.returncode == 0, run.output[-3000:]
    einsum, picky = (set(seen[f"{target}[float64]"]) for target in (EINSUM, PICKY))
    if shared == "yes":
        assert einsum == picky  # drawn once, both judged
    else:
        assert not einsum & picky  # each test drew its own


def test_a_rejection_by_one_record_costs_the_other_none_of_its_examples(rejecting_run):
    """Each keeps its own test id and verdict; each is judged on at least max_examples (ci: 15) valid examples,
    the picky record included, although it rejects about half of what is drawn."""
    _, run, seen, valid = rejecting_run
    for target in (EINSUM, PICKY):
        name = f"{target}[float64]"
        assert run.verdict("sdpa-formula", name)["status"] == "pass"
        assert valid[f"test_one_record_rejects_odd_query_counts[{name}]"] >= 15, valid
    assert len(seen[f"{PICKY}[float64]"]) > valid[f"test_one_record_rejects_odd_query_counts[{PICKY}[float64]]"]


def test_a_failing_record_is_shrunk_alone_and_its_group_mate_passes(tmp_path):
    """The wrong record's failure, found in the group's loop, is shrunk as when it runs alone: the same smallest
    input (five keys here: a fourth key's weight can round away)."""
    wrong = "tests/fixtures/group_impls.py:drops_keys_past_three"
    inputs = []
    for shared in ("yes", "no"):
        run = run_suite("properties/test_formula.py", "-k", "test_output_matches_oracle", "--impl", EINSUM,
                        "--impl", wrong, "--share-draws", shared, report_dir=tmp_path / shared)
        assert run.returncode == 1, run.output[-3000:]
        assert run.verdict("sdpa-formula", f"{EINSUM}[float64]")["status"] == "pass"
        failed = run.verdict("sdpa-formula", f"{wrong}[float64]")
        assert failed["status"] == "fail" and not failed["expected"]
        inputs.append([line.strip() for line in run.output.splitlines() if "input: q (" in line])
    assert inputs[0] == inputs[1] and "k (1, 1, 5, 1)" in inputs[0][0], inputs
