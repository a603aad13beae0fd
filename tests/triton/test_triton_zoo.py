"""The Triton zoo (tox -e triton; marked full_triton, so tox -e triton-ci leaves it out): every wrong Triton
kernel of zoo/wrong_triton.py is caught exactly as zoo/catches.toml says under the `ci` profile, and the correct
copies of zoo/correct_triton.py pass every property that applies to them."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from tests.fixtures.runs import run_suite
from zoo.correct_triton import CORRECT_TRITON
from zoo.defects import DEFECTS
from zoo.run import run_zoo, table

pytestmark = pytest.mark.full_triton
TRITON_DEFECTS = tuple(d for d in DEFECTS if d.target.startswith("zoo/wrong_triton.py:"))


def test_there_are_at_least_five_wrong_triton_kernels():
    assert len(TRITON_DEFECTS) >= 5
    names = {d.name for d in TRITON_DEFECTS}
    assert {"triton_value_load_unmasked", "triton_output_store_unmasked", "triton_dk_from_first_query_tile"} <= names


@pytest.fixture(scope="module")
def zoo_results():
    # no repro runs: a kernel's under the interpreter, or a rank pool's, takes minutes; the repros of the same
    # properties are run on their own by the dense zoo (tests/suite_run/test_zoo.py)
    return {r.defect.name: r for r in run_zoo(TRITON_DEFECTS, profile="ci", jobs=2, repros="none")}


@pytest.mark.parametrize("name", [d.name for d in TRITON_DEFECTS])
def test_every_wrong_triton_kernel_is_caught(zoo_results, name):
    result = zoo_results[name]
    assert result.caught, "\n".join(table([result])) + "\n" + result.output


def test_the_correct_triton_kernels_pass(tmp_path):
    targets = [arg for name in CORRECT_TRITON for arg in ("--impl", f"zoo/correct_triton.py:{name}")]
    # a call's limit as tox -e triton's: the statistical readings' 2,000-entry calls take 20-60 s under the interpreter
    run = run_suite("properties", "interpretations", "--long-regimes", "no", "--isolate", "no", "-n", "2",
                    "--impl-timeout", "120", *targets, report_dir=tmp_path, timeout=5400)
    assert run.report is not None, run.output[-3000:]
    unexpected = [(v["impl"], v["claim"], v["detail"][:300]) for v in run.report["verdicts"]
                  if v["status"] in ("fail", "error") and not v["declared"]]
    assert not unexpected, unexpected
    assert sum(v["status"] == "pass" for v in run.report["verdicts"]) >= 30
