"""sharded-refuses-what-its-layout-cannot-split for an implementation that splits the heads and needs equal shards
(yunchang's Ulysses): the property draws lengths the layout splits evenly, so the call reaches the implementation and
its heads (with uneven lengths the harness refused it first, and the property failed on a correct one). The one that
names the heads passes; the one that computes them anyway fails."""

from __future__ import annotations

import pytest

from tests.fixtures.runs import run_suite

FIXTURES = "tests/fixtures/sharded_impls.py"
CLAIM = "sharded-refuses-what-its-layout-cannot-split"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return run_suite("properties/test_sharded.py", "--impl", f"{FIXTURES}:heads_refused_by_name", "--impl",
                     f"{FIXTURES}:any_heads_taken", "--claims", CLAIM, "-p", "no:randomly",
                     report_dir=tmp_path_factory.mktemp("heads-refusal"), timeout=600)


def test_the_implementation_naming_the_heads_passes(run):
    verdict = run.verdict(CLAIM, f"{FIXTURES}:heads_refused_by_name[float64]")
    assert verdict is not None and verdict["status"] == "pass", (verdict, run.output[-2000:])


def test_the_implementation_taking_any_heads_fails_for_accepting_them(run):
    verdict = run.verdict(CLAIM, f"{FIXTURES}:any_heads_taken[float64]")
    assert verdict is not None and verdict["status"] == "fail" and "accepted" in verdict["detail"], verdict
