"""Each CPU checker catches the defect it exists for in a broken copy of our SIMT flash kernel, as a user
would see it (a run with --impl and a report), and passes the correct kernel."""

from __future__ import annotations

import re

import pytest

from impls.cuda.cpu_build import compiler_unavailable
from impls.registry import load_impl
from tests.runs import run_suite

pytestmark = pytest.mark.skipif(compiler_unavailable() is not None, reason=str(compiler_unavailable()))

BROKEN = "tests/broken_cuda_impls.py"
CORRECT = "impls.cuda_flash_simt:flash_simt_on_cpu"
CAUGHT_BY = {  # broken copy -> (the claim its checker encodes, what the report must say)
    "missing_sync": ("kernel-race-free", "ThreadSanitizer: data race"),
    "tile_off_by_one": ("kernel-memory-safe", "AddressSanitizer: heap-buffer-overflow"),
    "early_return": ("kernel-barrier-uniform", "barrier divergence: a thread of block .* returned while"),
}


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    targets = [f"{BROKEN}:{name}" for name in CAUGHT_BY] + [CORRECT]
    return run_suite("properties/test_cuda_kernels.py", *(a for t in targets for a in ("--impl", t)),
                     report_dir=tmp_path_factory.mktemp("checkers"))


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_the_matching_checker_catches_the_broken_copy(checked, name):
    claim, report = CAUGHT_BY[name]
    verdict = checked.verdict(claim, f"{load_impl(f'{BROKEN}:{name}').name}[float32]")
    assert verdict is not None and verdict["status"] == "fail" and not verdict["expected"], checked.output[-3000:]
    assert re.search(report, verdict["detail"]), verdict["detail"][:2000]
    assert "fn.cuda_run(q, k, v" in verdict["counterexample"]["repro"]


def test_the_correct_kernel_passes_every_checker(checked):
    for claim, _ in CAUGHT_BY.values():
        verdict = checked.verdict(claim, "cuda-flash-simt-on-cpu[float32]")
        assert verdict is not None and verdict["status"] == "pass", (claim, verdict)
