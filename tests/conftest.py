"""The suite's own tests: a test that runs the whole suite (tests.fixtures.runs.run_suite) must be marked
`suite_run` (every module under tests/suite_run/ is), so `-m "not suite_run"` is a fast loop that stays fast."""

import pytest

from tests.fixtures import runs


@pytest.hookimpl(tryfirst=True)  # before the fixtures of the item (a module's run fixture among them) are set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    runs.allow_suite_runs(item.get_closest_marker("suite_run") is not None, item.nodeid)
