"""The probabilistic and information-theoretic readings record their evidence (Monte Carlo curves, zero-weight
thresholds) once per correct implementation, in the run of tests/suite_run/test_expectations_caught.py's group
"readings-prob" (tests/fixtures/readings_prob_impls.py's wrong ones against their rows, zoo/correct.py's correct ones
written in unusual ways passing every reading)."""

from __future__ import annotations

import pytest

from tests.fixtures.expectation_groups import group_run

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return group_run("readings-prob", tmp_path_factory)


def test_each_implementation_records_its_evidence(run):
    """mc-convergence (curves with a band) and zero-weight-threshold (a table row) once per correct implementation;
    the curve falls with N and stays under its band's upper edge, the bound the test applies."""
    correct = {v["impl"] for v in run.report["verdicts"] if v["impl"].startswith("zoo/correct.py:")}
    for name in ("mc-convergence", "zero-weight-threshold"):
        recorded = [e["impl"] for e in run.report["exhibits"] if e["name"] == name]
        assert sorted(i for i in recorded if i in correct) == sorted(correct), (name, recorded)
    for exhibit in (e for e in run.report["exhibits"] if e["name"] == "mc-convergence" and e["impl"] in correct):
        (series,) = exhibit["data"]["series"].values()
        (band,) = exhibit["data"]["band"].values()
        assert series["y"][-1] < series["y"][0], exhibit["impl"]
        assert all(y <= h for y, h in zip(series["y"], band["high"], strict=True)), exhibit["impl"]
