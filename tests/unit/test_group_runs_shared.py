"""A group run of tests/fixtures/expectation_groups.py runs once per test session, whichever worker asks first:
the others wait for it and read what it wrote, a timeout included."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from tests.fixtures import expectation_groups
from tests.fixtures.runs import SuiteRun


class _Session:
    """A test session's temp factory whose base temp is `base` (one per test here)."""

    def __init__(self, base):
        self.base = base

    def getbasetemp(self):
        return self.base


def _ask_twice(base) -> list:
    """Two askers at once, as two xdist workers would (each opens the lock file: flock excludes them)."""
    found = []
    tmp_path_factory = _Session(base)

    def ask():
        try:
            found.append(expectation_groups._shared_run("cuda-checkers", tmp_path_factory))
        except subprocess.TimeoutExpired as exc:
            found.append(exc)

    askers = [threading.Thread(target=ask) for _ in range(2)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    return found


def test_the_second_asker_reads_the_first_run(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    calls = []

    def fake_run(*args, report_dir, timeout):
        calls.append(args)
        time.sleep(0.2)  # the second asker arrives while this one runs
        report_dir.mkdir(parents=True)
        (report_dir / "report.json").write_text(json.dumps({"verdicts": [{"claim": "c"}]}))
        return SuiteRun(0, "the run's output", None)

    monkeypatch.setattr(expectation_groups, "run_suite", fake_run)
    found = _ask_twice(tmp_path)
    assert len(calls) == 1
    assert [(run.returncode, run.output, run.report) for run in found] == [
        (0, "the run's output", {"verdicts": [{"claim": "c"}]})] * 2


def test_a_timed_out_run_is_not_run_again(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    calls = []

    def fake_run(*args, report_dir, timeout):
        calls.append(args)
        raise subprocess.TimeoutExpired(["pytest"], timeout)

    monkeypatch.setattr(expectation_groups, "run_suite", fake_run)
    found = _ask_twice(tmp_path)
    assert len(calls) == 1 and all(isinstance(exc, subprocess.TimeoutExpired) for exc in found)
    with pytest.raises(subprocess.TimeoutExpired):
        expectation_groups._shared_run("cuda-checkers", _Session(tmp_path))
