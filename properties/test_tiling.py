"""FlashAttention's claims (seed 000 § Flash Attention): tiles equal the whole, scores are used once,
partial results merge through the log-sum-exp."""

from __future__ import annotations

import functools
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

from harness.api import as_numpy
from harness.api.blocked import check_any_block_sizes
from harness.api.markers import checks
from harness.api.peak_memory import MeasurementUnavailable, Probe, peak_bytes
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, problems_for
from protocol.dense_adapters import unchecked_decoys
from specs.derivations import spans_taken
from specs.dtypes import numpy_dtype
from specs.problems import Problem, build
from specs.reference import attention
from specs.tolerance import ToleranceUndefined, lse_allowance, merge_allowance

MEMORY_N = 256


@checks("tiled-equals-global")
@pytest.mark.requires("tile_keywords")
@given(data=st.data())
def test_any_tiling_equals_global_attention(variant, data):
    check_any_block_sizes(variant, data, variant.capabilities.tile_keywords)


def _peak_traced_bytes(fn) -> int:
    """The peak of one call, a face adapter's decoys unchecked (the check's oracle is the suite's memory)."""
    tracemalloc.start()
    try:
        with unchecked_decoys():
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _peak_growth(fn, dtype: str) -> float:
    """peak traced memory at n = 2 MEMORY_N over that at n = MEMORY_N (inputs allocated beforehand)."""
    peaks = []
    for n in (MEMORY_N, 2 * MEMORY_N):
        problem = build(n_q=n, n_k=n, d=16, d_v=16)
        q, k, v = (x.astype(numpy_dtype(dtype)) for x in (problem.q, problem.k, problem.v))
        peaks.append(_peak_traced_bytes(functools.partial(fn, q, k, v)))
    return peaks[1] / peaks[0]


@checks("scores-used-once")
@pytest.mark.requires("tile_keywords")
def test_tiled_forward_memory_grows_linearly(variant):
    """Doubling n doubles the peak of a computation that keeps no n_q x n_k matrix, and quadruples it
    for one that does: a growth factor below 3 (the midpoint) says the scores are used and dropped. NumPy
    implementations are measured with tracemalloc in process; any other backend in a child process."""
    check_tiled_forward_memory_grows_linearly(variant)


@reproducible
def check_tiled_forward_memory_grows_linearly(variant) -> None:
    """The check of test_tiled_forward_memory_grows_linearly."""
    if variant.impl.backend != "numpy":
        _expect_no_score_matrix_resident(variant)
        return
    growth = _peak_growth(variant.impl.fn, variant.dtype)
    naive_growth = _peak_growth(lambda q, k, v: attention(q, k, v), variant.dtype)
    assert naive_growth > 3, f"no power: the naive formula's peak grew only {naive_growth:.2f}x"
    if growth >= 3:
        Trial(variant, build(n_q=MEMORY_N, n_k=MEMORY_N, d=16, d_v=16)).fail(
            "peak memory grows like the n_q x n_k score matrix",
            details=(f"doubling n from {MEMORY_N} multiplied the peak traced memory by {growth:.2f} "
                     f"(the naive formula: {naive_growth:.2f})",))


# Other backends (torch's allocator is invisible to tracemalloc): the peak resident memory one call adds, in a
# child process (harness.api.peak_memory), at n = 512 and n = 4096, batch 1, one head, d = 16. One 4096 x 4096
# float32 matrix is 64 MiB; everything else a call holds at n = 4096 (inputs, output, tiles of at most a few
# hundred rows and columns, row statistics) is O(n d + tile^2), under 2 MiB. A growth below a quarter of the
# matrix says no whole matrix was resident; the unfused operator sequence, measured beside it, holds several
# and must exceed it (power). 4096 rather than 8192: the same separation (16 MiB against < 2 MiB) at a
# quarter of the time and memory.
RESIDENT_N = (512, 4096)
RESIDENT_CONTROL = "impls.torch.torch_flash_records:unfused_attention"


def _resident_limit(dtype: str) -> int:
    n = RESIDENT_N[-1]
    return n * n * numpy_dtype(dtype).itemsize // 4


@functools.cache
def _resident_growth(target: str, dtype: str, tensors: str) -> int:
    """Bytes of peak resident memory one call adds at the largest RESIDENT_N over the smallest."""
    try:
        extra = peak_bytes({"subject": Probe(target, RESIDENT_N, dtype=dtype, tensors=tensors)})["subject"]
    except MeasurementUnavailable as exc:
        pytest.skip(str(exc))
    return extra[-1] - extra[0]


def _expect_no_score_matrix_resident(variant) -> None:
    if variant.impl.capabilities.cuda_checkers:
        pytest.skip("a CUDA kernel run on the CPU: the emulator's memory is not the kernel's (on a GPU the "
                    "kernel's buffers are its launcher's, sized from its tiles)")
    preferred = "float32" if "float32" in variant.capabilities.dtypes else variant.capabilities.dtypes[0]
    if variant.dtype != preferred:
        pytest.skip(f"resident memory is measured once per implementation, on its {preferred} variant")
    limit = _resident_limit(variant.dtype)
    control = _resident_growth(RESIDENT_CONTROL, variant.dtype, "torch")
    assert control > limit, f"no power: the unfused sequence's peak grew by only {control / 2**20:.0f} MiB"
    grown = _resident_growth(variant.impl.target, variant.dtype, variant.capabilities.tensors)
    if grown >= limit:
        n_small, n_large = RESIDENT_N
        Trial(variant, build(n_q=n_small, n_k=n_small, d=16, d_v=16)).fail(
            "peak resident memory grows like the n_q x n_k score matrix",
            details=(f"from n = {n_small} to n = {n_large} ({variant.dtype}, batch 1, one head, d = 16) one call's "
                     f"peak resident memory grew by {grown / 2**20:.0f} MiB, at least a quarter of one "
                     f"{n_large} x {n_large} matrix ({4 * limit / 2**20:.0f} MiB); the unfused sequence's grew by "
                     f"{control / 2**20:.0f} MiB",),
            observed={"resident_growth": grown, "score_matrix_bytes": 4 * limit})


@checks("online-softmax-merge")
@pytest.mark.requires("lse")
@given(data=st.data())
def test_partial_results_merge_through_lse(variant, data):
    problem = data.draw(problems_for(variant, min_n=2), label="problem")
    check_partial_results_merge(variant, problem, data.draw(st.integers(1, problem.n_k - 1), label="key split"))


@reproducible
def check_partial_results_merge(variant, problem: Problem, cut: int) -> None:
    """The outputs and log-sum-exps of keys :cut and cut: merged by their LSE equal the output over all keys, within
    the merge's allowance; each part's LSE within its own."""
    trial = Trial(variant, problem)
    oracle, _ = trial.oracle()
    parts, outs, lses, out_allowances, lse_allowances = [], [], [], [], []
    for keys in ((0, cut), (cut, problem.n_k)):
        part = problem.derive(spans_taken, keys=keys)
        raw = trial.call_raw(part, return_lse=True)
        if not isinstance(raw, tuple) or len(raw) != 2:
            trial.fail("declared lse=True but return_lse=True did not return (out, lse)", part)
        out = trial.check_output(raw[0], part)
        lse = as_numpy(raw[1])
        part_oracle, part_allowance = trial.oracle(part)
        exact = trial.exact_inputs(part)
        try:
            part_lse_allowance = lse_allowance(*exact, dtype=variant.dtype, oracle=part_oracle,
                                               **trial.oracle_kwargs(part))
        except ToleranceUndefined:
            reject()  # the naive log-sum-exp overflows in this dtype: the rule has nothing to scale
        trial.expect_close(lse.astype(np.float64), part_oracle.lse, part_lse_allowance, what="lse", problem=part)
        parts.append(part)
        outs.append(out)
        lses.append(lse.astype(np.float64))
        out_allowances.append(part_allowance)
        lse_allowances.append(part_lse_allowance)
    total = np.logaddexp(*lses)
    shares = [np.exp(lse - total) for lse in lses]
    merged = sum(w[..., None] * o for w, o in zip(shares, outs, strict=True))
    trial.expect_close(merged, oracle.out, merge_allowance(shares, outs, out_allowances, lse_allowances),
                       what="out merged from two key blocks", versus="the float64 oracle over all keys")
