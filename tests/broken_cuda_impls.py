"""The three deliberately broken copies of our SIMT flash kernel (impls/cuda/kernels/broken/), each as a CPU
record an outside user could write with impls.cuda.records.cuda_records: one defect each, for the checker
that must catch it (tests/test_cuda_checkers_catch.py)."""

from __future__ import annotations

from collections.abc import Callable

from impls.cuda.launch import KERNEL_DIR, KernelSource
from impls.cuda.records import cuda_records
from impls.cuda_flash_simt import KERNEL, flash_simt


def _broken_copy(name: str) -> Callable:
    kernel = KernelSource(KERNEL_DIR / "broken" / f"{name}.cu", KERNEL.entries)

    def run(q, k, v, *, scale=None, causal=False, mask=None, executor):
        return flash_simt(q, k, v, scale=scale, causal=causal, mask=mask, executor=executor, kernel=kernel)

    run.__name__ = name
    return cuda_records(name.replace("_", "-"), run, dtypes=("float32",))[1]


missing_sync = _broken_copy("flash_simt_missing_sync")
tile_off_by_one = _broken_copy("flash_simt_tile_off_by_one")
early_return = _broken_copy("flash_simt_early_return")
