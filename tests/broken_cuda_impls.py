"""Deliberately broken copies of our SIMT and WMMA flash kernels, each as a CPU record an outside user could
write with impls.cuda.records.cuda_records: one defect each, for the check that must catch it
(tests/test_cuda_checkers_catch.py). Each copy is derived from its .cu file by one textual change, so the copies
follow the kernels instead of being stale duplicates of them. The WMMA copies break only what runs past the
first key tile: they declare the kernel's geometry, so its fixed tile-edge cases reach them."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from impls import cuda_flash_wmma
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
# name -> (text in flash_wmma.cu, what replaces it)
NEXT_TILE = ("        __syncthreads();  // every warp is done with the previous K/V tile (and on the first pass Q is "
             "in)\n")
WMMA_DEFECTS = {
    # no barrier before the next K/V tile is loaded: a warp overwrites the tile others still multiply (a race);
    # on the first pass the barrier after the load orders the Q tile, so one key tile never shows it
    "flash_wmma_missing_tile_sync": (NEXT_TILE, "\n"),
    # the row sum is not rescaled with the output when the lazy maximum is raised: off only when a later key
    # tile raises a row's maximum past the lazy threshold (on the first tile l is 0)
    "flash_wmma_unrescaled_sum": ("        l_run = l_run * alpha + sum;\n", "        l_run = l_run + sum;\n"),
}


def broken_kernel(name: str) -> KernelSource:
    """The kernel with the defect `name`, written once under the build cache (same lines as the original)."""
    kernel, (original, broken) = (cuda_flash_wmma.KERNEL, WMMA_DEFECTS[name]) if name in WMMA_DEFECTS else (
        KERNEL, DEFECTS[name])
    source = kernel.text()
    if source.count(original) != 1:
        raise RuntimeError(f"{name}: the text it breaks occurs {source.count(original)} times in "
                           f"{kernel.path.name}")
    text = source.replace(original, broken)
    path = cache_dir() / "broken" / hashlib.sha256(text.encode()).hexdigest()[:16] / f"{name}.cu"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, path)
    return KernelSource(path, kernel.entries)


def _broken_copy(name: str) -> Callable:
    kernel = broken_kernel(name)

    def run(q, k, v, *, scale=None, causal=False, mask=None, executor):
        return flash_simt(q, k, v, scale=scale, causal=causal, mask=mask, executor=executor, kernel=kernel)

    run.__name__ = name
    return cuda_records(name.replace("_", "-"), run, dtypes=("float32",))[1]


def _broken_wmma(name: str) -> Callable:
    kernel = broken_kernel(name)

    def run(q, k, v, *, scale=None, causal=False, mask=None, executor):
        return cuda_flash_wmma.flash_wmma(q, k, v, scale=scale, causal=causal, mask=mask, executor=executor,
                                          kernel=kernel)

    run.__name__ = name
    return cuda_records(name.replace("_", "-"), run, dtypes=("float16",), causal_alignment="top_left",
                        geometry=cuda_flash_wmma.GEOMETRY)[1]


missing_sync = _broken_copy("flash_simt_missing_sync")
tile_off_by_one = _broken_copy("flash_simt_tile_off_by_one")
early_return = _broken_copy("flash_simt_early_return")
wmma_missing_tile_sync = _broken_wmma("flash_wmma_missing_tile_sync")
wmma_unrescaled_sum = _broken_wmma("flash_wmma_unrescaled_sum")
