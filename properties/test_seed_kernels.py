"""Seed 002 § 3.2.1, § 3.2.2 and § 3.2.4: the two CUDA kernels, compiled as written with every CUDA compiler
this machine has (NVRTC through CuPy, nvcc), and the GPU limits MemoryAwareAttention records, against
what ptxas and the device at hand say. No GPU and no torch needed, except for the device checks."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from harness.cuda_compiler import COMPILERS, CompilerUnavailable, compile_kernel
from harness.gpu_limits import (
    BLOCK_THREADS,
    SHARED_PROBE_BYTES,
    DeviceLimits,
    DeviceUnavailable,
    device_limits,
    registers_per_thread,
    static_shared_limits,
)
from harness.markers import checks
from impls.seed_code.seed002_memory_aware import MemoryAwareAttention

SEED_LIMITS = MemoryAwareAttention(d_model=64, seq_len=64)  # the constants do not depend on the arguments
REGISTER_BYTES = 4  # one 32-bit register


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


def register_file_excess(per_thread: Mapping[str, int], recorded: int = SEED_LIMITS.register_size) -> str | None:
    """Seed 002 § 3.2.1 (32KB寄存器): why `recorded` bytes cannot be the register file, given the registers
    ptxas gives each thread of a BLOCK_THREADS-thread block per architecture (one block's registers must fit
    in one SM's file); None if every block fits."""
    held = {arch: BLOCK_THREADS * count * REGISTER_BYTES for arch, count in per_thread.items()}
    over = {arch: size for arch, size in held.items() if size > recorded}
    if not over:
        return None
    worst = max(over, key=over.get)
    return (f"ptxas gives each of a block's {BLOCK_THREADS} threads {per_thread[worst]} registers on "
            f"{', '.join(sorted(over, key=_arch_number))}: one block holds {over[worst]} bytes of registers, "
            f"{over[worst] / recorded:g}x the seed's {recorded // 1024} KB register file")


def _arch_number(arch: str) -> int:
    return int(arch.removeprefix("sm_"))


def device_register_excess(device: DeviceLimits, recorded: int = SEED_LIMITS.register_size) -> str | None:
    """The same judgement from the device's own count of 32-bit registers per SM."""
    size = device.registers_per_sm * REGISTER_BYTES
    if size == recorded:
        return None
    return (f"{device.name} ({device.arch}) has {device.registers_per_sm} 32-bit registers per SM: its register "
            f"file holds {size} bytes of registers, {size / recorded:g}x the seed's {recorded // 1024} KB "
            "register file")


def shared_limit_mismatch(limits: Mapping[str, int | None],
                          recorded: int = SEED_LIMITS.shared_memory_size) -> str | None:
    """Seed 002 § 3.2.1 (48KB共享内存): the architectures whose static shared memory per block is not `recorded`
    (a limit of None: ptxas accepted SHARED_PROBE_BYTES)."""
    wrong = [f"{arch} {f'at least {SHARED_PROBE_BYTES}' if limit is None else limit}"
             for arch, limit in limits.items() if limit != recorded]
    if not wrong:
        return None
    return f"ptxas allows a block, in bytes of static shared memory, not the seed's {recorded}: " + ", ".join(wrong)


def _toolchain(measure):
    try:
        return measure()
    except CompilerUnavailable as exc:
        pytest.skip(str(exc))


def _device() -> DeviceLimits:
    try:
        return device_limits()
    except DeviceUnavailable as exc:
        pytest.skip(str(exc))


@checks("gpu-register-file", subject="seed002-memory-aware-class")
def test_register_file_holds_a_block_per_ptxas():
    excess = register_file_excess(_toolchain(registers_per_thread))
    assert excess is None, excess


@checks("gpu-register-file", subject="seed002-memory-aware-class")
def test_register_file_matches_the_device():
    excess = device_register_excess(_device())
    assert excess is None, excess


@checks("gpu-shared-memory-per-block", subject="seed002-memory-aware-class")
def test_shared_memory_is_the_static_per_block_limit():
    mismatch = shared_limit_mismatch(_toolchain(static_shared_limits))
    assert mismatch is None, mismatch


@checks("gpu-shared-memory-per-block", subject="seed002-memory-aware-class")
def test_shared_memory_matches_the_device():
    device = _device()
    assert device.shared_memory_per_block == SEED_LIMITS.shared_memory_size, (
        f"{device.name} ({device.arch}) gives a block {device.shared_memory_per_block} bytes of shared memory "
        f"without opting in, not the seed's {SEED_LIMITS.shared_memory_size}")
