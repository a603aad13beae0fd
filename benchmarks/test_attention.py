"""Attention implementations side by side (pytest-benchmark), float32, batch 1, 8 heads, n x d grid.

One benchmark per (implementation, mode, n, d), grouped by size so pytest-benchmark's table reads side by
side; benchmarks/bench.py says what each case runs, benchmarks/conftest.py what the session writes at its
end. Benchmarks are not tests: nothing here asserts a time.
"""

from __future__ import annotations

import pytest

from benchmarks import bench, summary


def test_attention(benchmark, bench_session: bench.Session, point: bench.Point):
    impl = point.case.impl
    if impl.quadratic and point.n > bench_session.quadratic_max_n:
        pytest.skip(f"{impl.name} holds n x n scores: skipped above n={bench_session.quadratic_max_n}")
    try:
        run = bench.runner(point.case, point.n, point.d)
    except bench.Unavailable as exc:
        pytest.skip(str(exc))
    rounds, warmup = bench_session.plan(point, run)
    benchmark.group = point.group
    benchmark.pedantic(run, rounds=rounds, warmup_rounds=warmup, iterations=1)
    if benchmark.stats is None:  # --benchmark-disable: ran once, nothing timed
        return
    row = bench_session.record(point, benchmark.stats.stats, rounds, warmup)
    rates = {r["impl"] + r["mode"]: r for r in summary.add_rates(
        [t for t in bench_session.timings if (t["n"], t["d"]) == (point.n, point.d)], bench.BATCH, bench.HEADS)}
    mine = rates[row["impl"] + row["mode"]]
    benchmark.extra_info.update(implementation=impl.label, mode=point.case.mode, n=point.n, d=point.d,
                                dtype=bench.DTYPE, gflops=mine["gflops"], vs_sdpa_flash=mine["vs_sdpa_flash"],
                                vs_matmul_peak=mine["vs_matmul_peak"], load_1min=row["load_1min"])
