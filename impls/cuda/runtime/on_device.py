"""Running a kernel launch on the CUDA device through CuPy's RawModule (cupy-cuda12x or cupy-cuda13x), compiled
by NVRTC with the same options impls/cuda/runtime/nvrtc.py checks everywhere.

Besides the copying launch a record makes (`run_on_device`), two paths for measuring on a device
(tools/gpu_check): `planning()`, within which a record's function yields the launches it would make and runs
nothing (no GPU needed), and `launch_on_device`, which launches on arrays already in device memory.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

import numpy as np

from impls.cuda.runtime.launch import KernelSource, Launch
from impls.cuda.runtime.nvrtc import options

DEFAULT_SHARED_LIMIT = 48 * 1024  # bytes of dynamic shared memory a launch gets without opting in
_PLANNED: ContextVar[list[tuple[KernelSource, Launch]] | None] = ContextVar("planned_launches", default=None)


@contextlib.contextmanager
def planning() -> Iterator[list[tuple[KernelSource, Launch]]]:
    """Within it, `run_on_device` appends (kernel, launch) to the list yielded and returns the arguments
    unchanged instead of launching: a device record's function then plans its launches without a GPU."""
    planned: list[tuple[KernelSource, Launch]] = []
    token = _PLANNED.set(planned)
    try:
        yield planned
    finally:
        _PLANNED.reset(token)


@functools.cache
def _module(kernel: KernelSource):
    import cupy

    return cupy.RawModule(code=kernel.text(), options=options(), name_expressions=kernel.entries)


def launch_on_device(kernel: KernelSource, launch: Launch, args: Sequence) -> None:
    """Launch `launch` with `args` in its arguments' place (CuPy arrays, used in place, and scalars), on the
    current stream, without waiting for it."""
    if len(args) != len(launch.args):
        raise ValueError(f"{launch.entry}: {len(args)} arguments for a launch of {len(launch.args)}")
    function = _module(kernel).get_function(launch.entry)
    if launch.shared_bytes > DEFAULT_SHARED_LIMIT:
        function.max_dynamic_shared_size_bytes = launch.shared_bytes
    function(launch.grid, launch.block, tuple(args), shared_mem=launch.shared_bytes)


def run_on_device(kernel: KernelSource, launch: Launch) -> tuple[np.ndarray | np.generic, ...]:
    planned = _PLANNED.get()
    if planned is not None:
        planned.append((kernel, launch))
        return launch.args
    import cupy

    on_device = [cupy.asarray(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a for a in launch.args]
    launch_on_device(kernel, launch, on_device)
    cupy.cuda.get_current_stream().synchronize()
    return tuple(cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else a for a in on_device)
