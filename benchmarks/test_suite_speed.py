"""The suite's own time to verdict (benchmarks/suite_speed.py says what each case runs): one benchmark per case,
ours timed by pytest-benchmark, the baseline checkout's (--suite-baseline) run just before it. Only with
--suite-cases: the attention benchmarks' session runs none of them. Nothing here asserts a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import suite_speed

ROOT = Path(__file__).resolve().parents[1]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "suite_case" in metafunc.fixturenames:
        chosen = suite_speed.choose(metafunc.config.getoption("suite_cases") or "")
        metafunc.parametrize("suite_case", chosen, ids=[case.name for case in chosen])


def test_time_to_verdict(benchmark, suite_case: suite_speed.Case, suite_rows: list[dict], request):
    baseline = request.config.getoption("suite_baseline")
    row = {"case": suite_case.name, "what": suite_case.what}
    if baseline:
        row["baseline"] = suite_speed.run(suite_case, Path(baseline).resolve())
    benchmark.group = "suite speed"
    results = []
    benchmark.pedantic(lambda: results.append(suite_speed.run(suite_case, ROOT)), rounds=1, iterations=1)
    row["ours"] = results[-1]
    benchmark.extra_info.update(seconds=row["ours"]["seconds"], exit=row["ours"]["exit"])
    suite_rows.append(row)
