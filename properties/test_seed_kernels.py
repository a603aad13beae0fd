"""Seed 002 § 3.2.1, § 3.2.2 and § 3.2.4: the two CUDA kernels, compiled as written with every CUDA compiler
this machine has (NVRTC through CuPy, nvcc), and the GPU limits MemoryAwareAttention records, against
what ptxas and the device at hand say. No GPU and no torch needed, except for the device checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.api import CallFailed, call_isolated
from harness.api.assertions import assert_within
from harness.api.markers import checks
from impls.cuda.cuda_seed002_kernels import NAIVE, seed_launch
from impls.cuda.gpu_limits import (
    registers_per_thread,
    static_shared_limits,
)
from impls.cuda.runtime.execute import execute
from impls.cuda.runtime.on_cpu import KernelDefect, run_checked
from impls.cuda.seed_kernel_compiler import COMPILERS
from properties.seed_kernel_checks import (
    NAIVE_ON_CPU,
    OVERFLOWING_SEQ_LEN,
    SEED_KERNEL_PROBLEMS,
    SEED_LIMITS,
    SHARED_MEMORY_ON_CPU,
    compiles_as_written,
    cpu_execution,
    device_at_hand,
    device_register_excess,
    register_file_excess,
    seed_kernel_inputs,
    shared_limit_mismatch,
    toolchain_measure,
)
from specs.reference import attention
from specs.tolerance import difference_allowance, forward_allowance, unit_roundoff


@checks("cuda-naive-kernel", subject="seed002-cuda")
@pytest.mark.parametrize("compiler", sorted(COMPILERS))
def test_naive_kernel_compiles_as_written(compiler):
    compiles_as_written("attention_kernel", compiler)


@checks("cuda-shared-memory-kernel", subject="seed002-cuda")
@pytest.mark.parametrize("compiler", sorted(COMPILERS))
def test_shared_memory_kernel_compiles_as_written(compiler):
    compiles_as_written("optimized_attention_kernel", compiler)


@checks("gpu-register-file", subject="seed002-memory-aware-class")
def test_register_file_holds_a_block_per_ptxas():
    excess = register_file_excess(toolchain_measure(registers_per_thread))
    assert excess is None, excess


@checks("gpu-register-file", subject="seed002-memory-aware-class")
def test_register_file_matches_the_device():
    excess = device_register_excess(device_at_hand())
    assert excess is None, excess


@checks("gpu-shared-memory-per-block", subject="seed002-memory-aware-class")
def test_shared_memory_is_the_static_per_block_limit():
    mismatch = shared_limit_mismatch(toolchain_measure(static_shared_limits))
    assert mismatch is None, mismatch


@checks("gpu-shared-memory-per-block", subject="seed002-memory-aware-class")
def test_shared_memory_matches_the_device():
    device = device_at_hand()
    assert device.shared_memory_per_block == SEED_LIMITS.shared_memory_size, (
        f"{device.name} ({device.arch}) gives a block {device.shared_memory_per_block} bytes of shared memory "
        f"without opting in, not the seed's {SEED_LIMITS.shared_memory_size}")


@checks("cuda-shared-memory-kernel-equals-naive", subject="seed002-cuda")
@settings(max_examples=10)
@given(problem=SEED_KERNEL_PROBLEMS, threads=st.integers(1, 70))
def test_shared_memory_kernel_equals_naive_kernel(problem, threads):
    cpu_execution()
    inputs = seed_kernel_inputs(problem)
    outputs = {}
    for name, target in (("naive", NAIVE_ON_CPU), ("shared-memory", SHARED_MEMORY_ON_CPU)):
        try:  # each in a worker process: the shared-memory kernel reads far past its shared buffer
            outputs[name] = np.asarray(call_isolated(target, inputs, "contiguous", {"block_threads": threads}),
                                       dtype=np.float64)
        except CallFailed as failure:
            raise AssertionError(f"the {name} kernel did not complete ({threads} threads a block): "
                                 f"{failure.summary}") from None
    exact = tuple(x.astype(np.float64) for x in inputs)
    _, allowance = forward_allowance(*exact, dtype="float32")
    if not np.isfinite(outputs["shared-memory"]).all():
        raise AssertionError(f"the shared-memory kernel's output differs from the naive kernel's: "
                             f"{int((~np.isfinite(outputs['shared-memory'])).sum())} non-finite values "
                             f"({threads} threads a block)")
    assert_within(outputs["shared-memory"], outputs["naive"], difference_allowance(allowance, allowance),
                  what="the shared-memory kernel's output", versus="the naive kernel's")


@checks("cuda-naive-kernel-weights-buffer", subject="seed002-cuda")
@settings(max_examples=10)
@given(problem=SEED_KERNEL_PROBLEMS)
def test_naive_kernel_leaves_weights_in_its_buffer(problem):
    cpu_execution()
    q, k, v = seed_kernel_inputs(problem)
    launch = seed_launch(NAIVE, q, k, v)
    buffer = execute(NAIVE, launch, "cpu")[-1].astype(np.float64)
    batch, heads, n, d = q.shape
    weights = attention(*(x.astype(np.float64) for x in (q, k, v))).weights.reshape(batch * heads * n, n)
    # Each stored weight is exp(s - max) / Z rounded in float32: relative error <= 4u from exp, division and
    # the max subtraction, plus the score's own error |ds| <= gamma_d * scale * |q||k| (a d-term dot product).
    u = unit_roundoff("float32")
    norms_q = np.linalg.norm(q.astype(np.float64), axis=-1).reshape(-1, 1)
    norms_k = np.repeat(np.linalg.norm(k.astype(np.float64), axis=-1), n, axis=2).reshape(-1, n)
    score_error = 1.01 * d * u * norms_q * norms_k / np.sqrt(d)
    allowed = (weights * (4 * u + score_error)).sum(axis=1) + n * u
    sums = buffer.reshape(-1, n).sum(axis=1)
    worst = int(np.argmax(np.abs(sums - 1) - allowed))
    assert abs(sums[worst] - 1) <= allowed[worst], (
        f"attention_weights rows sum to {sums[worst]:.6g}, not 1 (row {worst}; allowed {allowed[worst]:.2g}): "
        "the buffer holds exp(s - max), unnormalised")


@checks("cuda-naive-kernel-int-indexing", subject="seed002-cuda")
def test_naive_kernel_indices_fit_in_int():
    cpu_execution()
    n, d, threads = OVERFLOWING_SEQ_LEN, 1, 128
    q = np.ones((1, 1, n, d), np.float32)
    launch = seed_launch(NAIVE, q, q, q, threads)
    last_block = launch.grid[1] - 1  # grid (batch, ceil(n / threads)): blocks are numbered x first
    try:  # only the last block, attention_weights unbacked: UBSan stops at the first overflowing index
        run_checked(NAIVE, launch, "overflowcheck", first_block=last_block, block_count=1,
                    unbacked=frozenset({7}))
    except KernelDefect as defect:
        overflow = next((line for line in defect.report.splitlines() if "runtime error" in line), defect.report)
        raise AssertionError(f"at seq_len = {n}, d_model = {d}, the last block's index arithmetic overflows int: "
                             f"{overflow.split('runtime error: ')[-1]}") from None
