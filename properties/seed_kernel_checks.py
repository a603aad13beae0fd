"""Seed 002 § 3.2.1, § 3.2.2 and § 3.2.4 checked as written: the two CUDA kernels compiled by every compiler here,
the GPU limits MemoryAwareAttention records against what ptxas and the device at hand say, and the kernels' inputs
as the seed lays them out."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from impls.cuda.cuda_records import cpu_unavailable
from impls.cuda.gpu_limits import (
    BLOCK_THREADS,
    SHARED_PROBE_BYTES,
    DeviceLimits,
    DeviceUnavailable,
    device_limits,
)
from impls.cuda.seed_kernel_compiler import CompilerUnavailable, compile_kernel
from impls.seeds.seed_code.seed002_memory_aware import MemoryAwareAttention
from protocol.registry import Capabilities
from specs.problems import Problem
from specs.strategies import problems

SEED_LIMITS = MemoryAwareAttention(d_model=64, seq_len=64)  # the constants do not depend on the arguments
REGISTER_BYTES = 4  # one 32-bit register


def compiles_as_written(kernel: str, compiler: str) -> None:
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
            f"{', '.join(sorted(over, key=arch_number))}: one block holds {over[worst]} bytes of registers, "
            f"{over[worst] / recorded:g}x the seed's {recorded // 1024} KB register file")


def arch_number(arch: str) -> int:
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


def toolchain_measure(measure):
    try:
        return measure()
    except CompilerUnavailable as exc:
        pytest.skip(str(exc))


def device_at_hand() -> DeviceLimits:
    try:
        return device_limits()
    except DeviceUnavailable as exc:
        pytest.skip(str(exc))


# -- the repaired kernels, executed (impls/cuda/cuda_seed002_kernels.py) ---------------------------------------
SEED_KERNEL_PROBLEMS = problems(caps=Capabilities(gqa=False, cross=False, value_dim=False), dtype="float32",
                                max_n=40, max_d=32)


NAIVE_ON_CPU = "impls.cuda.cuda_seed002_kernels:naive_kernel_on_cpu"
SHARED_MEMORY_ON_CPU = "impls.cuda.cuda_seed002_kernels:shared_memory_kernel_on_cpu"


def seed_kernel_inputs(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tuple(x.astype(np.float32) for x in (problem.q, problem.k, problem.v))


def cpu_execution():
    unavailable = cpu_unavailable()
    if unavailable:
        pytest.skip(unavailable)


OVERFLOWING_SEQ_LEN = 46341  # the least n with n * n > 2^31 - 1
