"""The CPU execution of CUDA kernels (impls/cuda/cpu) on probe kernels (tests/fixtures/cuda/emulator_probes.cu): each
emulated feature computes what CUDA defines, and each checker catches the defect it exists for while passing
a correct kernel."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from impls.cuda.runtime.cpu_build import PROJECT, compiler_unavailable, rewrite_dynamic_shared, translation_unit
from impls.cuda.runtime.execute import execute
from impls.cuda.runtime.launch import KernelSource, Launch
from impls.cuda.runtime.on_cpu import KernelDefect, KernelLaunchError, run_on_cpu_with_diagnostics

pytestmark = pytest.mark.skipif(compiler_unavailable() is not None, reason=str(compiler_unavailable()))

PROBES = KernelSource(Path(__file__).parents[1] / "fixtures" / "cuda" / "emulator_probes.cu", (
    "block_sums<float>", "block_sums<__half>", "block_sums<__nv_bfloat16>", "lanes", "early_return",
    "split_barriers", "deadlock", "missing_barrier", "read_unwritten", "read_past_end", "read_past_dynamic_shared",
    "wmma_product<__half>", "wmma_product<__nv_bfloat16>", "round_trip"))
SOURCE_LINES = PROBES.path.read_text().splitlines()


def line_of(text: str, after: str) -> int:
    """The 1-based line of the first `text` after the line holding `after` (for file:line in reports)."""
    start = next(i for i, line in enumerate(SOURCE_LINES) if after in line)
    return next(i for i, line in enumerate(SOURCE_LINES[start:], start) if text in line) + 1


def sums_launch(values: np.ndarray, threads: int = 128) -> Launch:
    blocks = -(-values.size // threads)
    entry = {np.float32: "block_sums<float>", np.float16: "block_sums<__half>",
             ml_dtypes.bfloat16: "block_sums<__nv_bfloat16>"}[values.dtype.type]
    return Launch(entry, (blocks, 1, 1), (threads, 1, 1), threads * 4,
                  (values, np.zeros(blocks, np.float32), np.int32(values.size)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_barriers_shuffles_and_shared_memory_compute_block_sums(dtype):
    values = np.arange(300).astype(dtype)
    sums = execute(PROBES, sums_launch(values), "cpu")[1]
    expected = [values[i:i + 128].astype(np.float64).sum() for i in range(0, 300, 128)]
    np.testing.assert_array_equal(sums, expected)


def test_a_kernel_of_the_project_builds_the_same_wherever_the_project_lives(tmp_path):
    """The build is cached by the translation unit's text: it names the kernel relative to the project, so a fresh
    clone reuses what another clone built; a kernel outside the project keeps its absolute path."""
    unit = translation_unit(PROBES)
    assert str(PROJECT) not in unit and '#line 1 "tests/fixtures/cuda/emulator_probes.cu"' in unit
    outside = tmp_path / "k.cu"
    outside.write_text("__global__ void k() {}\n")
    assert f'#line 1 "{outside.resolve()}"' in translation_unit(KernelSource(outside, ("k",)))


def test_votes_and_shuffles_follow_cuda_lane_rules():
    out = execute(PROBES, Launch("lanes", (1, 1, 1), (64, 1, 1), 0, (np.zeros(256, np.int32),)), "cpu")[0]
    lane = np.arange(64) % 32
    got = out.reshape(64, 4)
    assert (got[:, 0].astype(np.uint32) == 0xAAAAAAAA).all()
    np.testing.assert_array_equal(got[:, 1], np.where(lane + 5 < 32, lane + 5, lane))
    np.testing.assert_array_equal(got[:, 2], np.where(lane >= 2, lane - 2, lane))
    np.testing.assert_array_equal(got[:, 3], lane // 8 * 8 + 3)


def test_a_thread_returning_before_a_barrier_is_reported_where_the_others_wait():
    launch = Launch("early_return", (1, 1, 1), (64, 1, 1), 0, (np.zeros(64, np.float32), np.int32(50)))
    run = run_on_cpu_with_diagnostics(PROBES, launch)
    barrier = f"emulator_probes.cu:{line_of('__syncthreads', 'void early_return')}"
    assert any("returned while 50 threads waited" in d and barrier in d for d in run.diagnostics), run.diagnostics
    with pytest.raises(KernelDefect, match=re.escape(barrier)):
        execute(PROBES, launch, "synccheck")


def test_threads_at_different_barriers_are_reported():
    launch = Launch("split_barriers", (1, 1, 1), (64, 1, 1), 0, (np.zeros(64, np.float32),))
    run = run_on_cpu_with_diagnostics(PROBES, launch)
    assert any("met at different __syncthreads() calls" in d for d in run.diagnostics), run.diagnostics


@pytest.mark.parametrize("executor", ["cpu", "racecheck"])
def test_threads_that_can_never_meet_are_a_deadlock_not_a_hang(executor):
    launch = Launch("deadlock", (1, 1, 1), (32, 1, 1), 0, (np.zeros(32, np.float32),))
    with pytest.raises((KernelLaunchError, KernelDefect), match=r"deadlock: .* no barrier can release"):
        execute(PROBES, launch, executor)


def test_a_correct_kernel_passes_every_checker():
    launch = sums_launch(np.arange(300).astype(np.float32))
    for checker in ("synccheck", "memcheck", "racecheck"):
        np.testing.assert_array_equal(execute(PROBES, launch, checker)[1], execute(PROBES, launch, "cpu")[1])


def test_racecheck_catches_a_missing_barrier():
    with pytest.raises(KernelDefect, match="ThreadSanitizer: data race"):
        execute(PROBES, Launch("missing_barrier", (1, 1, 1), (64, 1, 1), 0, (np.zeros(64, np.float32),)),
                "racecheck")


def test_memcheck_catches_a_read_past_the_end():
    with pytest.raises(KernelDefect, match="AddressSanitizer: heap-buffer-overflow"):
        execute(PROBES, Launch("read_past_end", (1, 1, 1), (8, 1, 1), 0,
                               (np.zeros(8, np.float32), np.zeros(8, np.float32))), "memcheck")


def test_shared_memory_nothing_wrote_reads_as_nan():
    out = execute(PROBES, Launch("read_unwritten", (1, 1, 1), (64, 1, 1), 0, (np.zeros(64, np.float32),)),
                  "cpu")[0]
    assert (out[:32] == 1).all() and np.isnan(out[32:]).all()


def _past_dynamic_shared(offset: int) -> Launch:
    return Launch("read_past_dynamic_shared", (1, 1, 1), (64, 1, 1), 64 * 4, (np.full(64, 7, np.float32),
                                                                               np.int32(offset)))


@pytest.mark.parametrize("offset", [64, 2**24])  # just past the launch's 256 bytes, and 64 MiB past them
def test_a_read_past_the_dynamic_shared_memory_reads_zeros_in_every_run(offset):
    """The plain build's dynamic shared memory sits at the start of a window of zero pages: what a kernel reads
    past it is 0 whatever the process ran before, where the heap past an exact buffer held anything, or nothing
    mapped (a crash); memcheck, which keeps the exact buffer, reports the read."""
    for _ in range(2):
        assert (execute(PROBES, _past_dynamic_shared(offset), "cpu")[0] == 0).all()
    with pytest.raises(KernelDefect, match="AddressSanitizer: heap-"):  # past the redzone: a freed neighbour
        execute(PROBES, _past_dynamic_shared(64), "memcheck")


@pytest.mark.parametrize("dtype,entry", [(np.float16, "wmma_product<__half>"),
                                         (ml_dtypes.bfloat16, "wmma_product<__nv_bfloat16>")])
def test_wmma_fragments_multiply_in_float32(dtype, entry):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((16, 16)).astype(dtype) for _ in range(2))
    c = execute(PROBES, Launch(entry, (1, 1, 1), (32, 1, 1), 0, (a, b, np.zeros((16, 16), np.float32))), "cpu")[2]
    exact = 2 * a.astype(np.float64) @ b.astype(np.float64).T
    # products of 16-bit inputs are exact in float32; 16 float32 additions: |error| <= 16 u32 sum |a||b|
    bound = 2 * 16 * 2.0 ** -24 * np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T
    assert (np.abs(c - exact) <= bound).all()


def test_half_and_bfloat16_round_to_nearest_even():
    values = np.concatenate([np.random.default_rng(1).standard_normal(500) * 10.0 ** np.arange(-3, 2).repeat(100),
                             [0.0, -0.0, np.inf, -np.inf, 65504.0, 65520.0, 1 + 2.0 ** -11, 1 + 2.0 ** -8]])
    values = values.astype(np.float32)
    n = values.size
    _, half, bf16, _ = execute(PROBES, Launch("round_trip", (-(-n // 64), 1, 1), (64, 1, 1), 0,
                                              (values, np.zeros(n, np.float32), np.zeros(n, np.float32),
                                               np.int32(n))), "cpu")
    np.testing.assert_array_equal(half, values.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(bf16, values.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_bad_launches_name_the_problem():
    out = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="no entry 'nope'; entries: block_sums<float>"):
        execute(PROBES, Launch("nope", (1, 1, 1), (1, 1, 1), 0, (out,)), "cpu")
    with pytest.raises(TypeError, match="argument 1 is a float64 scalar"):
        execute(PROBES, Launch("early_return", (1, 1, 1), (1, 1, 1), 0, (out, np.float64(1))), "cpu")
    with pytest.raises(KernelLaunchError, match="invalid configuration: a block has 2048 threads"):
        execute(PROBES, Launch("early_return", (1, 1, 1), (2048, 1, 1), 0, (out, np.int32(1))), "cpu")
    with pytest.raises(ValueError, match="grid must be three positive sizes"):
        Launch("early_return", (0, 1, 1), (1, 1, 1), 0, (out,))
    with pytest.raises(TypeError, match="pass NumPy arrays for pointers"):
        Launch("early_return", (1, 1, 1), (1, 1, 1), 0, (out, 3))
    with pytest.raises(ValueError, match="unknown executor 'gpu'"):
        execute(PROBES, Launch("early_return", (1, 1, 1), (1, 1, 1), 0, (out, np.int32(1))), "gpu")


def test_the_dynamic_shared_rewrite_keeps_lines_and_names():
    source = "a\n  extern __shared__ __align__(16) unsigned char smem[];\nextern __shared__ float s_mem[];\nb"
    rewritten = rewrite_dynamic_shared(source)
    assert rewritten.count("\n") == source.count("\n")
    assert "unsigned char* smem = reinterpret_cast<unsigned char*>(cuda_cpu::dynamic_shared());" in rewritten
    assert "float* s_mem = reinterpret_cast<float*>(cuda_cpu::dynamic_shared());" in rewritten
