"""The sharded zoo (tox -e distributed; marked full_distributed, so CI's tests leave it out): every wrong sharded
implementation of zoo/wrong_sharded.py is caught exactly as zoo/catches.toml says under the `ci` profile; the
correct ring written without a ring (ring-allgather) passes every claim in its own environment's run."""

from __future__ import annotations

import pytest

from zoo.defects import DEFECTS
from zoo.run import run_zoo

pytestmark = pytest.mark.full_distributed
SHARDED_DEFECTS = tuple(d for d in DEFECTS if d.target.startswith("zoo/wrong_sharded.py:"))


def test_there_are_at_least_five_wrong_sharded_implementations():
    assert len(SHARDED_DEFECTS) >= 5


@pytest.fixture(scope="module")
def zoo_results():
    # no repro runs: a kernel's under the interpreter, or a rank pool's, takes minutes; the repros of the same
    # properties are run on their own by the dense zoo (tests/suite_run/test_zoo.py)
    return {result.defect.name: result for result in run_zoo(SHARDED_DEFECTS, jobs=1, repros="none")}


@pytest.mark.parametrize("name", [d.name for d in SHARDED_DEFECTS])
def test_every_wrong_sharded_implementation_is_caught(zoo_results, name):
    result = zoo_results[name]
    assert result.caught, (result.broken, result.missed, result.output[-2000:])
