"""The seed 002 shared-memory kernel's declarations explain the failure it has and no other (CONTRACT 2: a
declaration names the claim and the deviation that explains it). Unit level, through the harness's own call and
output check (harness.api.trial) in deviation mode, with stand-in outputs in place of the kernel's: the kernel's
output is undefined where it reads shared memory no thread wrote (every row of a launch with two keys or more, at
its default 128 threads), v_0 with one key, and with one thread per block and two keys the model of its indexing; a
raise, a wrong shape, or a wrong output where the output is defined is unexplained. No kernel runs here; the run that
measured the symptoms is the main job's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from harness.api.trial import Trial
from harness.engine.explanation import DeviationRun, deviation_mode
from impls.cuda import cuda_seed002_kernels as seed002
from protocol.expectations import load_table
from protocol.registry import Variant, load_impl
from specs.problems import build
from specs.reference import attention

CPU_RECORD = "impls.cuda.cuda_seed002_kernels:shared_memory_kernel_on_cpu"
DEVICE_RECORD = "impls.cuda.cuda_seed002_kernels:shared_memory_kernel_on_device"
CPU_NAME = "cuda-seed002-shared-memory-kernel-on-cpu"
CHECKED = ("kernel-memory-safe", "kernel-race-free", "kernel-barrier-uniform")  # the CPU checkers' claims


def _stand_in(output: Callable[..., object]) -> Variant:
    """The CPU record (its name, capabilities and declarations) with `output` called in place of the kernel, in
    this process."""
    impl = load_impl(CPU_RECORD)

    def fn(q, k, v, *, block_threads: int = seed002.DEFAULT_THREADS):
        return output(q, k, v, block_threads)

    return Variant(dataclasses.replace(impl, fn=fn, target=f"{__name__}:{output.__name__}"), "float32")


def _sdpa_rows(variant: Variant) -> DeviationRun:
    return DeviationRun(tuple(row for row in variant.impl.expectations if row.claim == "sdpa-formula"))


def _judged(output, problem, **extra) -> np.ndarray:
    variant = _stand_in(output)
    with deviation_mode(_sdpa_rows(variant)):
        return Trial(variant, problem).call(problem, **extra)


def _oracle(q, k, v):
    """The float64 oracle on the inputs the float32 kernel receives (each rounded to float32 once)."""
    return attention(*(x.astype(np.float32).astype(np.float64) for x in (q, k, v))).out


def _unwritten_shared_memory(q, k, v, threads):  # what the kernel returns on the CPU: NaN where it read garbage
    return np.full(v.shape, np.nan, np.float32)


def _kernel_model(q, k, v, threads):  # what the kernel computes where it is defined
    if q.shape[2] == 1:
        return np.broadcast_to(v[:, :, :1], v.shape).astype(np.float32)
    s = np.stack([np.sum(q * q, -1), np.sum(q * k, -1)], -1) / np.sqrt(q.shape[-1])
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return (w[..., :1] * v[:, :, :1] + w[..., 1:] * v[:, :, 1:2]).astype(np.float32)


def _off_by(out: Callable, by: float = 0.25) -> Callable:
    def wrong(q, k, v, threads):
        result = np.array(out(q, k, v, threads), copy=True)
        result[..., -1, 0] += by
        return result
    return wrong


def _raises(q, k, v, threads):
    raise RuntimeError("an illegal memory access was encountered")


def _wrong_shape(q, k, v, threads):
    return np.zeros(v.shape[:-1] + (v.shape[-1] + 1,), np.float32)


def test_the_kernel_declares_its_deviations_on_its_claims_and_its_checkers_reports():
    rows = [row for row in load_table() if row.subject == CPU_NAME]
    deviations = {row.deviation.name for row in rows}
    assert {"unwritten-shared-memory-read", "checker-reports"} <= deviations, deviations
    reported = {row.claim for row in rows if row.deviation.name == "checker-reports"}
    assert reported == set(CHECKED)
    assert all(row.dtypes == ("float32",) and row.why for row in rows)
    assert load_impl(CPU_RECORD).expectations  # the records take their rows


@pytest.mark.parametrize("problem, extra", [
    (build(n_q=9, n_k=9, d=8, d_v=8, seed=3), {}),  # 128 threads, 9 keys: every row undefined
    (build(n_q=3, n_k=3, d=8, d_v=8, seed=4), {"block_threads": 1}),  # a third key past the buffer
])
def test_the_kernels_undefined_output_is_explained(problem, extra):
    seen = _judged(_unwritten_shared_memory, problem, **extra)
    np.testing.assert_allclose(seen, _oracle(problem.q, problem.k, problem.v), rtol=1e-6)  # the oracle, for the rest


@pytest.mark.parametrize("problem, extra", [
    (build(n_q=1, n_k=1, d=8, d_v=8, seed=5), {}),
    (build(n_q=2, n_k=2, d=8, d_v=8, seed=6), {"block_threads": 1}),
])
def test_where_the_kernel_is_defined_its_model_is_met_and_nothing_else(problem, extra):
    _judged(_kernel_model, problem, **extra)
    with pytest.raises(PropertyViolation, match="declared deviations predict"):
        _judged(_off_by(_kernel_model), problem, **extra)


@pytest.mark.parametrize("wrong", [_raises, _wrong_shape])
def test_a_raise_or_a_wrong_shape_is_unexpected(wrong):
    with pytest.raises(PropertyViolation) as info:
        _judged(wrong, build(n_q=9, n_k=9, d=8, d_v=8, seed=3))
    assert "declared deviations" not in info.value.summary  # the call's own failure, which nothing explains
