"""Seed 002 § 3.2.2 and § 3.2.4: the two CUDA kernels, compiled as written with every CUDA compiler
this machine has (NVRTC through CuPy, nvcc). No GPU and no torch needed."""

from __future__ import annotations

import pytest

from harness.markers import checks
from impls.seed002_hardware import COMPILERS, CompilerUnavailable, compile_kernel


@checks("cuda-naive-kernel", subject="seed002-cuda")
@pytest.mark.parametrize("compiler", sorted(COMPILERS))
def test_naive_kernel_compiles_as_written(compiler):
    _compiles("attention_kernel", compiler)


@checks("cuda-shared-memory-kernel", subject="seed002-cuda")
@pytest.mark.parametrize("compiler", sorted(COMPILERS))
def test_shared_memory_kernel_compiles_as_written(compiler):
    _compiles("optimized_attention_kernel", compiler)


def _compiles(kernel: str, compiler: str) -> None:
    try:
        log = compile_kernel(kernel, compiler)
    except CompilerUnavailable as exc:
        pytest.skip(str(exc))
    errors = [line for line in (log or "").splitlines() if "error" in line]
    assert log is None, f"{compiler} rejects {kernel} as written:\n" + "\n".join(errors[:6])

