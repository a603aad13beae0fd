"""Running a launch on an executor: CuPy on the CUDA device, or the CPU build of impls/cuda/cpu, plain or under a
checker. Kept apart from impls.cuda.runtime.launch, which both executors import, so the imports run one way."""

from __future__ import annotations

import numpy as np

from impls.cuda.runtime.launch import EXECUTORS, KernelSource, Launch


def execute(kernel: KernelSource, launch: Launch, executor: str) -> tuple[np.ndarray | np.generic, ...]:
    """Run `launch` of `kernel` on `executor` ("cupy": the CUDA device; "cpu": impls/cuda/cpu in this process;
    a checker: the CPU build in a driver process that raises KernelDefect with what the checker reports);
    every argument after the launch, arrays copied back."""
    if executor == "cupy":
        from impls.cuda.runtime.on_device import run_on_device

        return run_on_device(kernel, launch)
    if executor == "cpu":
        from impls.cuda.runtime.on_cpu import run_on_cpu

        return run_on_cpu(kernel, launch)
    if executor in EXECUTORS:
        from impls.cuda.runtime.on_cpu import run_checked

        return run_checked(kernel, launch, executor)
    raise ValueError(f"unknown executor {executor!r}; valid: {', '.join(EXECUTORS)}")
