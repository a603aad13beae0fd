"""benchmarks/durations.py: pytest's --durations lines summed by property and by record."""

from __future__ import annotations

from benchmarks.durations import parse, tables

LINES = [
    "41.95s call     properties/test_cuda_kernels.py::test_kernel_threads_do_not_race_at_tile_edges"
    "[cuda-flash-wmma-on-cpu[float16]]",
    "2.06s call     properties/test_scaling.py::test_scaled_scores_have_unit_variance"
    "[cuda-flash-wmma-on-cpu[bfloat16]-64]",
    "0.89s setup    properties/test_cuda_kernels.py::test_kernel_threads_do_not_race_at_tile_edges"
    "[cuda-flash-wmma-on-cpu[float16]]",
    "0.50s call     interpretations/test_bayesian.py::test_posterior_is_softmax",
    "(3 durations < 0.005s hidden.)",
    "============================= slowest durations =============================",
]


def test_each_phase_is_attributed_to_its_property_and_record():
    assert parse(LINES) == [
        ("test_cuda_kernels::test_kernel_threads_do_not_race_at_tile_edges", "cuda-flash-wmma-on-cpu[float16]", 41.95),
        ("test_scaling::test_scaled_scores_have_unit_variance", "cuda-flash-wmma-on-cpu[bfloat16]", 2.06),
        ("test_cuda_kernels::test_kernel_threads_do_not_race_at_tile_edges", "cuda-flash-wmma-on-cpu[float16]", 0.89),
        ("test_bayesian::test_posterior_is_softmax", "-", 0.5),
    ]


def test_tables_sum_phases_and_rank_them():
    text = tables(parse(LINES))
    assert "Total of the test phases: 45.4 s" in text
    assert "| test_cuda_kernels::test_kernel_threads_do_not_race_at_tile_edges | 42.8 | 94.4% |" in text
    assert "| cuda-flash-wmma-on-cpu[bfloat16] | 2.1 | 4.5% |" in text
