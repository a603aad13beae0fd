"""harness.pytest_plugin.worker_threads: a split run's workers compute with one thread each, unless the user chose."""

from __future__ import annotations

import os
import types

import pytest

from harness.pytest_plugin.worker_threads import THREAD_VARIABLES, one_thread_per_worker


def _config(numprocesses, *, worker: bool = False):
    config = types.SimpleNamespace(getoption=lambda name, default=None: numprocesses if name == "numprocesses"
                                   else default)
    if worker:
        config.workerinput = {}
    return config


@pytest.fixture
def clean_environment(monkeypatch):
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("numprocesses", [2, "auto"])
def test_the_controller_of_a_split_run_sets_one_thread(clean_environment, numprocesses):
    one_thread_per_worker(_config(numprocesses))
    assert {name: os.environ.get(name) for name in THREAD_VARIABLES} == dict.fromkeys(THREAD_VARIABLES, "1")


@pytest.mark.parametrize("config", [_config(None), _config(0), _config(2, worker=True)],
                         ids=["no xdist", "-n 0", "a worker"])
def test_a_run_in_one_process_and_a_worker_leave_the_threads_alone(clean_environment, config):
    one_thread_per_worker(config)
    assert not any(name in os.environ for name in THREAD_VARIABLES)


def test_a_thread_count_the_user_set_is_kept(clean_environment):
    clean_environment.setenv("OMP_NUM_THREADS", "4")
    one_thread_per_worker(_config(2))
    assert os.environ["OMP_NUM_THREADS"] == "4" and os.environ["OPENBLAS_NUM_THREADS"] == "1"
