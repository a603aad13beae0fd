"""A crash is a verdict: an implementation that kills its process fails the property with the signal and the
input, its worker is replaced, and the run and its report go on (harness.engine.isolation)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness.engine import run_context
from harness.engine.guarded_call import CallFailed
from harness.engine.isolation import WORKERS, call_isolated
from harness.pytest_plugin.plugin import isolated_targets
from protocol.registry import load_impl
from specs.layouts import to_layout
from tests.fixtures.runs import run_suite

SEGFAULT = "tests/fixtures/crashing_impls.py:segfaults_past_three_queries"
ABORT = "tests/fixtures/crashing_impls.py:aborts_on_two_heads"
CORRECT = "tests/fixtures/outside_impls.py:einsum_attention"


def _inputs(n_q: int, heads: int = 1) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal((1, heads, n, 8)) for n in (n_q, 5, 5))


def test_a_segfault_fails_the_call_and_the_next_call_gets_a_new_worker():
    with pytest.raises(CallFailed, match=r"crashed its process: signal SIGSEGV") as crash:
        call_isolated(SEGFAULT, _inputs(4), "contiguous", {})
    assert crash.value.kind == "crashed"
    out = call_isolated(SEGFAULT, _inputs(3), "contiguous", {})
    assert out.shape == (1, 1, 3, 8) and np.all(np.isfinite(out))


def test_an_abort_names_sigabrt():
    with pytest.raises(CallFailed, match=r"signal SIGABRT"):
        call_isolated(ABORT, _inputs(2, heads=2), "contiguous", {})


def test_isolated_calls_keep_layouts_exceptions_and_writes_to_inputs():
    """What the in-process call shows survives the worker: strided inputs, raised exceptions, input writes."""
    q, k, v = (np.ascontiguousarray(x) for x in _inputs(3))
    in_process = load_impl(CORRECT).fn(*(to_layout(x, "fortran") for x in (q, k, v)))
    assert np.array_equal(call_isolated(CORRECT, (q, k, v), "fortran", {}), in_process)
    with pytest.raises(CallFailed, match="raised ValueError") as raised:
        call_isolated("tests/fixtures/outside_impls.py:raises", (q, k, v), "contiguous", {})
    assert raised.value.kind == "raised"
    writer = "tests/fixtures/crashing_impls.py:writes_to_q"
    before = q.copy()
    call_isolated(writer, (q, k, v), "contiguous", {})
    assert not np.array_equal(q, before), "the write to q in the worker must reach the caller's q"


def test_a_hang_in_native_code_is_a_timeout():
    with run_context.using(run_context.RunContext(timeout_s=0.5)), \
            pytest.raises(CallFailed, match=r"longer than 0\.5 s") as hung:
        call_isolated("tests/fixtures/crashing_impls.py:ignores_the_alarm", _inputs(2), "contiguous", {})
    assert hung.value.kind == "timeout"


def test_isolation_defaults_to_named_and_native_implementations():
    named, builtin = load_impl(CORRECT), load_impl("impls.numpy.numpy_reference:reference_attention")
    assert isolated_targets("auto", [named], named=True) == {CORRECT}
    assert isolated_targets("auto", [builtin], named=False) == frozenset()
    assert isolated_targets("yes", [builtin], named=False) == {builtin.target}
    assert isolated_targets("no", [named], named=True) == frozenset()


def test_a_crashing_implementation_gets_its_verdict_and_the_report_is_written(tmp_path):
    """The issue's case: a ctypes crash on n_q > 3 ended the run with exit 139 and no report."""
    run = run_suite("properties/test_formula.py", "--claims", "sdpa-formula", "--impl", SEGFAULT, "--impl", CORRECT,
                    report_dir=tmp_path)
    assert run.returncode == 1 and run.report is not None, run.output[-3000:]
    crashed = run.verdict("sdpa-formula", f"{SEGFAULT}[float64]")
    assert crashed["status"] == "fail" and not crashed["declared"]
    assert "crashed its process: signal SIGSEGV" in crashed["detail"]
    n_q = int(re.search(r"n_q=(\d+)", crashed["counterexample"]["problem"]).group(1))
    assert 3 < n_q <= 5, crashed["counterexample"]  # shrunk to a small crashing input (n_q = 4 or 5)
    assert run.verdict("sdpa-formula", f"{CORRECT}[float64]")["status"] == "pass"


@pytest.fixture(autouse=True, scope="module")
def _stop_workers():
    yield
    WORKERS.close()


def test_a_face_called_isolated_is_a_verdict_when_it_crashes_and_writes_its_cache_back():
    """The varlen and kv-cache faces of an isolated implementation run in its worker: an abort there fails the call
    with the signal instead of ending the pytest process, a cache the kv-cache face writes in place comes back to
    the caller as it was written, and an absent argument (k=None) arrives as None."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((5, 1, 4)) for _ in range(3))
    cu = np.array([0, 2, 5], dtype=np.int32)
    with pytest.raises(CallFailed, match=r"crashed its process: signal SIGABRT"):
        call_isolated("tests/fixtures/crashing_impls.py:varlen_aborts", (q, k, v, cu, cu), "contiguous",
                      {"max_seqlen_q": 3, "max_seqlen_k": 3}, face="varlen")
    q, new_k, new_v = (rng.standard_normal((1, 1, 1, 4)) for _ in range(3))
    k_cache, v_cache = rng.standard_normal((1, 4, 1, 4)), rng.standard_normal((1, 4, 1, 4))
    lengths = np.array([2], dtype=np.int32)
    kvcache = load_impl("impls.numpy.numpy_kv_cache:kv_cache_attention").face("kvcache")
    k_here, v_here = k_cache.copy(), v_cache.copy()
    expected = kvcache(q, k_here, v_here, new_k, new_v, cache_seqlens=lengths)
    out = call_isolated("impls.numpy.numpy_kv_cache:kv_cache_attention", (q, k_cache, v_cache, new_k, new_v),
                        "contiguous", {"cache_seqlens": lengths}, face="kvcache")
    np.testing.assert_array_equal(k_cache, k_here)  # the new key written at slot 2 in the caller's cache
    np.testing.assert_array_equal(k_cache[0, 2], new_k[0, 0])
    np.testing.assert_array_equal(out, expected)
    alone = call_isolated("impls.numpy.numpy_kv_cache:kv_cache_attention", (q, k_cache, v_cache, None, None),
                          "contiguous", {"cache_seqlens": lengths}, face="kvcache")  # no new keys: k=None travels
    np.testing.assert_array_equal(alone, kvcache(q, k_here, v_here, cache_seqlens=lengths))

