"""The sharded records' own tests (tox -e distributed, tox -e distributed-ci): they start process groups, and
several run the suite as a user does, so every test here is marked `suite_run` (tests/conftest.py)."""

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.suite_run)
