"""The CPU checkers' reports on broken copies of our SIMT flash kernel (their rows of impls/expectations.toml:
tests/suite_run/test_expectations_caught.py, group "cuda-checkers") come with a repro of the launch; and the fixed
tile-edge cases (impls/cuda/geometry.py) catch two broken copies of the WMMA kernel whose defects lie past its first
64-key tile (their rows: group "past-first-tile"), which the random draws (n <= 48) never reach."""

from __future__ import annotations

import pytest

from impls.cuda.runtime.cpu_build import compiler_unavailable
from protocol.registry import load_impl
from tests.fixtures.expectation_groups import group_run

pytestmark = pytest.mark.skipif(compiler_unavailable() is not None, reason=str(compiler_unavailable()))

BROKEN = "tests/fixtures/broken_cuda_impls.py"


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    return group_run("cuda-checkers", tmp_path_factory)


@pytest.mark.parametrize("name", ["missing_sync", "tile_off_by_one", "early_return"])
def test_a_checkers_report_comes_with_a_repro_of_the_launch(checked, name):
    """Each broken copy meets its rows there (tests/suite_run/test_expectations_caught.py, group "cuda-checkers");
    the failure's repro runs the checked launch again."""
    variant = f"{load_impl(f'{BROKEN}:{name}').name}[float32]"
    failed = [v for v in checked.report["verdicts"] if v["impl"] == variant and v["status"] == "fail"]
    assert failed, checked.output[-3000:]
    assert all("run_checked(Trial(" in v["counterexample"]["repro"] for v in failed), failed


# broken WMMA copy -> the property on random draws (n <= 48) that passes it, where the tile-edge cases fail it
DRAWS_MISS = {
    "wmma_missing_tile_sync": "test_cuda_kernels.py::test_kernel_threads_do_not_race",
    "wmma_unrescaled_sum": "test_formula.py::test_output_matches_oracle",
}


@pytest.mark.parametrize("name", sorted(DRAWS_MISS))
def test_the_tile_edge_cases_catch_what_the_random_draws_miss(tmp_path_factory, name):
    """Each copy meets its catches (tests/suite_run/test_expectations_caught.py, group "past-first-tile": the
    tile-edge case n_k = 129 named in the failure), while the same check on random draws passes it."""
    run = group_run("past-first-tile", tmp_path_factory)
    variant = f"{load_impl(f'{BROKEN}:{name}').name}[float16]"
    assert f"PASSED properties/{DRAWS_MISS[name]}[{variant}]" in run.output, run.output[-3000:]
