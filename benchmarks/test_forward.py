"""Forward-pass timings (pytest-benchmark). Plain parametrized tests, no Hypothesis.

Each group holds one problem size, so pytest-benchmark's table shows every implementation's
time relative to the fastest in the same run. These machines are shared and noisy: read the
ratios, not the absolute times. Memory claims are properties (properties/test_tiling.py).
"""

from __future__ import annotations

import pytest

from specs.problems import build

SIZES = [
    dict(batch=1, heads=4, heads_kv=4, n_q=128, n_k=128, d=64, d_v=64),
    dict(batch=1, heads=4, heads_kv=4, n_q=512, n_k=512, d=64, d_v=64),
    dict(batch=1, heads=8, heads_kv=2, n_q=256, n_k=256, d=64, d_v=64),
]


def _label(size: dict) -> str:
    return f"b{size['batch']} h{size['heads']}/{size['heads_kv']} n{size['n_q']}x{size['n_k']} d{size['d']}"


@pytest.mark.parametrize("size", SIZES, ids=_label)
def test_forward(benchmark, variant, size):
    caps = variant.capabilities
    if size["heads"] != size["heads_kv"] and not caps.gqa:
        pytest.skip(caps.lacking("gqa"))
    problem = build(**size, seed=0)
    q, k, v = (x.astype(variant.dtype) for x in (problem.q, problem.k, problem.v))
    benchmark.group = f"{_label(size)} {variant.dtype}"
    benchmark.extra_info["implementation"] = variant.name
    benchmark(variant.impl.fn, q, k, v)
