"""Three deliberately broken copies of our SIMT flash kernel, each as a CPU record an outside user could write
with impls.cuda.records.cuda_records: one defect each, for the checker that must catch it
(tests/test_cuda_checkers_catch.py). Each copy is derived from impls/cuda/kernels/flash_simt.cu by one textual
change, so the copies follow the kernel instead of being three stale duplicates of it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from impls.cuda.cpu_build import cache_dir
from impls.cuda.launch import KernelSource
from impls.cuda.records import cuda_records
from impls.cuda_flash_simt import KERNEL, flash_simt

# name -> (text in flash_simt.cu, what replaces it): the defect
FIRST_ROW = "    const int warp_row0 = row0 + warp * ROWS_PER_WARP;\n"
TILE_LOADED = "        __syncthreads();  // the tile (and, on the first pass, the q tile) is in shared memory\n"
DEFECTS = {
    # a `return` before the barriers for warps whose query rows all lie past n_q (barrier divergence)
    "flash_simt_early_return": (FIRST_ROW, FIRST_ROW.replace(";\n", "; if (warp_row0 >= n_q) return;\n")),
    # no __syncthreads() after loading the K/V tile: warps read it while others write (a race)
    "flash_simt_missing_sync": (TILE_LOADED, "\n"),
    # the K load takes key <= n_k: one key past the end of K (out of bounds)
    "flash_simt_tile_off_by_one": ("key < n_k ? to_float(k[", "key <= n_k ? to_float(k["),
}


def broken_kernel(name: str) -> KernelSource:
    """flash_simt.cu with the defect `name`, written once under the build cache (same lines as the original)."""
    original, broken = DEFECTS[name]
    source = KERNEL.text()
    if source.count(original) != 1:
        raise RuntimeError(f"{name}: the text it breaks occurs {source.count(original)} times in flash_simt.cu")
    text = source.replace(original, broken)
    path = cache_dir() / "broken" / hashlib.sha256(text.encode()).hexdigest()[:16] / f"{name}.cu"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, path)
    return KernelSource(path, KERNEL.entries)


def _broken_copy(name: str) -> Callable:
    kernel = broken_kernel(name)

    def run(q, k, v, *, scale=None, causal=False, mask=None, executor):
        return flash_simt(q, k, v, scale=scale, causal=causal, mask=mask, executor=executor, kernel=kernel)

    run.__name__ = name
    return cuda_records(name.replace("_", "-"), run, dtypes=("float32",))[1]


missing_sync = _broken_copy("flash_simt_missing_sync")
tile_off_by_one = _broken_copy("flash_simt_tile_off_by_one")
early_return = _broken_copy("flash_simt_early_return")
