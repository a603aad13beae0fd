"""One BLAS and torch thread per pytest-xdist worker.

The suite's problems are small: a second thread in a matmul or a softmax costs more in waiting at the parallel
region's barrier than it saves, and two processes of two threads each on two cores wait for each other. Measured
on a 2-core machine, the formula, heads and dropout properties on every built-in record: 256 s in one process
with torch's and OpenBLAS's default two threads, 180 s with one, 98 s as two workers of one thread each, 115 s as
three. The controller sets the variables before it starts the workers, which inherit them, and so do the worker
processes of isolated implementations (harness.engine.isolation); a value set by the user is kept.
"""

from __future__ import annotations

import os

import pytest

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def splits_over_workers(config: pytest.Config) -> bool:
    """This process is the controller of a run split over pytest-xdist workers (`-n N`, N > 0, or `-n auto`)."""
    return bool(config.getoption("numprocesses", None)) and not hasattr(config, "workerinput")


def one_thread_per_worker(config: pytest.Config) -> None:
    """Before the workers start: each of them computes with one thread, unless the user chose otherwise."""
    if splits_over_workers(config):
        for name in THREAD_VARIABLES:
            os.environ.setdefault(name, "1")
