"""The CPU checkers' reports on broken copies of our SIMT flash kernel (their rows of impls/expectations.toml:
tests/suite_run/test_expectations_caught.py, group "cuda-checkers") come with a repro of the launch; and the fixed
tile-edge cases (impls/cuda/geometry.py) catch two broken copies of the WMMA kernel whose defects lie past its first
64-key tile, which the random draws (n <= 48) never reach."""

from __future__ import annotations

import re

import pytest

from impls.cuda.runtime.cpu_build import compiler_unavailable
from protocol.registry import load_impl
from tests.fixtures.expectation_groups import group_run
from tests.fixtures.runs import run_suite

pytestmark = pytest.mark.skipif(compiler_unavailable() is not None, reason=str(compiler_unavailable()))

BROKEN = "tests/fixtures/broken_cuda_impls.py"


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    return group_run("cuda-checkers", tmp_path_factory)


@pytest.mark.parametrize("name", ["missing_sync", "tile_off_by_one", "early_return"])
def test_a_checkers_report_comes_with_a_repro_of_the_launch(checked, name):
    """Each broken copy meets its rows there (tests/suite_run/test_expectations_caught.py, group "cuda-checkers");
    the failure's repro runs the kernel's launch itself."""
    variant = f"{load_impl(f'{BROKEN}:{name}').name}[float32]"
    failed = [v for v in checked.report["verdicts"] if v["impl"] == variant and v["status"] == "fail"]
    assert failed, checked.output[-3000:]
    assert all("fn.cuda_run(q, k, v" in v["counterexample"]["repro"] for v in failed), failed


# broken WMMA copy -> (the claim, the tile-edge property that catches it, the same check on random draws that
# does not, what the report must say)
PAST_THE_FIRST_TILE = {
    "wmma_missing_tile_sync": ("kernel-race-free",
                               "test_cuda_kernels.py::test_kernel_threads_do_not_race_at_tile_edges",
                               "test_cuda_kernels.py::test_kernel_threads_do_not_race",
                               "racecheck reports a defect .* at the tile edge case d=64 .*ThreadSanitizer: data race"),
    "wmma_unrescaled_sum": ("tiled-equals-global", "test_cuda_kernels.py::test_tile_edges_match_oracle",
                            "test_formula.py::test_output_matches_oracle", "n_k=129"),
}


@pytest.fixture(scope="module")
def past_the_first_tile(tmp_path_factory):
    targets = [f"{BROKEN}:{name}" for name in PAST_THE_FIRST_TILE]
    return run_suite("properties/test_cuda_kernels.py", "properties/test_formula.py", "-k", "race or oracle", "-rA",
                     *(a for t in targets for a in ("--impl", t)), report_dir=tmp_path_factory.mktemp("tiles"))


@pytest.mark.parametrize("name", sorted(PAST_THE_FIRST_TILE))
def test_the_tile_edge_cases_catch_what_the_random_draws_miss(past_the_first_tile, name):
    claim, catching, missing, detail = PAST_THE_FIRST_TILE[name]
    variant = f"{load_impl(f'{BROKEN}:{name}').name}[float16]"
    verdict = past_the_first_tile.verdict(claim, variant)
    assert verdict is not None and verdict["status"] == "fail", (verdict, past_the_first_tile.output[-3000:])
    assert re.search(detail, verdict["detail"], re.S), verdict["detail"][:2000]
    output = past_the_first_tile.output
    assert f"FAILED properties/{catching}[{variant}]" in output, output[-3000:]
    assert f"PASSED properties/{missing}[{variant}]" in output, output[-3000:]

