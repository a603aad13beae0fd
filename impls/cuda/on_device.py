"""Running a kernel launch on the CUDA device through CuPy's RawModule (cupy-cuda12x or cupy-cuda13x), compiled
by NVRTC with the same options impls/cuda/nvrtc.py checks everywhere."""

from __future__ import annotations

import functools

import numpy as np

from impls.cuda.launch import KernelSource, Launch
from impls.cuda.nvrtc import options

DEFAULT_SHARED_LIMIT = 48 * 1024  # bytes of dynamic shared memory a launch gets without opting in


@functools.cache
def _module(kernel: KernelSource):
    import cupy

    return cupy.RawModule(code=kernel.text(), options=options(), name_expressions=kernel.entries)


def run_on_device(kernel: KernelSource, launch: Launch) -> tuple[np.ndarray | np.generic, ...]:
    import cupy

    function = _module(kernel).get_function(launch.entry)
    if launch.shared_bytes > DEFAULT_SHARED_LIMIT:
        function.max_dynamic_shared_size_bytes = launch.shared_bytes
    on_device = [cupy.asarray(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a for a in launch.args]
    function(launch.grid, launch.block, tuple(on_device), shared_mem=launch.shared_bytes)
    cupy.cuda.get_current_stream().synchronize()
    return tuple(cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else a for a in on_device)
