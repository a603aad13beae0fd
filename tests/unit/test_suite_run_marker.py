"""Whole-suite runs are marked: run_suite refuses to start inside a test that is not marked `suite_run`, so the
fast loop (`-m "not suite_run"`) cannot silently grow a whole run."""

import pytest

from tests.fixtures.runs import run_suite


def test_an_unmarked_test_cannot_run_the_suite():
    with pytest.raises(RuntimeError, match=r"test_an_unmarked_test_cannot_run_the_suite runs the whole suite but "
                                           r"is not marked suite_run"):
        run_suite("--version")


@pytest.mark.suite_run
def test_a_marked_test_may(tmp_path):
    run = run_suite("--version")
    assert run.returncode == 0 and "pytest" in run.output
