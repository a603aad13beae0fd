"""Options of the benchmark run, and what happens when it ends.

The benchmarks (test_attention.py) record their times here. When the session ends, if anything was timed:
our torch tiled forward is profiled once, the peak memory of every (implementation, mode, n) is measured
in its own child process (harness/api/peak_memory.py, one after another, after all timings so they do not
disturb them), and benchmarks/summary.py writes bench-<date>.json, .md and .png to --bench-results and
prints the table, the fitted exponents and the three targets at the end of the terminal output.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench, suite_speed, summary

SESSION = pytest.StashKey[bench.Session]()
SUITE_ROWS = pytest.StashKey[list]()
RESULT = pytest.StashKey[dict]()
BUSY = pytest.StashKey[list]()
HERE = Path(__file__).resolve().parent


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attention-bench", "attention benchmarks")
    group.addoption("--bench-n", type=_ints, default=bench.SIZES_N, metavar="N,N,...",
                    help=f"sequence lengths (default {','.join(map(str, bench.SIZES_N))})")
    group.addoption("--bench-d", type=_ints, default=bench.SIZES_D, metavar="D,D,...",
                    help=f"head dims (default {','.join(map(str, bench.SIZES_D))})")
    group.addoption("--bench-quadratic-max-n", type=int, default=max(bench.SIZES_N), metavar="N",
                    help="skip implementations that hold n x n scores (naive NumPy, seed three-line, SDPA math) "
                         "above this n, in timings and memory (n=8192: 2 GiB per score matrix; default: none skipped)")
    group.addoption("--bench-budget", type=float, default=3.0, metavar="SECONDS",
                    help="rounds per benchmark fill about this many seconds (at least 2, at most 25; default 3)")
    group.addoption("--bench-memory", choices=("yes", "no"), default="yes",
                    help="measure peak memory per (implementation, n) at session end (default yes)")
    group.addoption("--bench-profile", choices=("yes", "no"), default="yes",
                    help="profile our torch tiled forward at n=4096 d=64 at session end (default yes)")
    group.addoption("--bench-threads", type=int, default=None, metavar="N",
                    help="torch.set_num_threads(N) for the timings (default: torch's own, one per core); on a busy "
                         "machine fewer threads than cores avoids waits at every parallel region's barrier")
    group.addoption("--bench-busy", type=int, default=0, metavar="N",
                    help="start N processes that only spin, for the whole run: times on a machine another job shares "
                         "(the results' settings and file name say how many; default 0)")
    group.addoption("--bench-results", default=str(HERE / "results"), metavar="DIR",
                    help="where bench-<date>.json/.md/.png (and suite-<date>.json/.md) go (default benchmarks/results)")
    group.addoption("--suite-cases", default=None, metavar="CASE,...",
                    help=f"time the suite itself on these cases ({', '.join(suite_speed.CASES)}; default: none)")
    group.addoption("--suite-baseline", default=None, metavar="DIR",
                    help="a checkout (e.g. a git worktree of the previous HEAD) whose suite runs each case in turn "
                         "with ours; the results give the ratio. Write --suite-baseline=DIR: pytest takes a lone DIR "
                         "for a test path (and loads its conftest.py files) before it knows this option")


def pytest_configure(config: pytest.Config) -> None:
    threads = config.getoption("bench_threads")
    if threads:
        import torch

        torch.set_num_threads(threads)
    config.stash[BUSY] = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                          for _ in range(config.getoption("bench_busy"))]
    config.stash[SESSION] = bench.Session(config.getoption("bench_budget"),
                                          config.getoption("bench_quadratic_max_n"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "point" in metafunc.fixturenames:
        chosen = bench.points(metafunc.config.getoption("bench_n"), metafunc.config.getoption("bench_d"))
        metafunc.parametrize("point", chosen, ids=[p.id for p in chosen])


def pytest_unconfigure(config: pytest.Config) -> None:
    for spinner in config.stash.get(BUSY, []):
        spinner.kill()
        spinner.wait()


@pytest.fixture
def suite_rows(request: pytest.FixtureRequest) -> list[dict]:
    return request.config.stash.setdefault(SUITE_ROWS, [])


@pytest.fixture
def bench_session(request: pytest.FixtureRequest) -> bench.Session:
    return request.config.stash[SESSION]


def _profile(config: pytest.Config, timings: list[dict], notes: list[str]) -> dict | None:
    n, d = bench.PROFILE_AT
    if config.getoption("bench_profile") == "no" or not any(t["impl"] == "torch-tiled" for t in timings):
        return None
    try:
        return bench.profile_forward(at=(n, d))
    except bench.Unavailable as exc:
        notes.append(f"no profile: {exc}")
        return None


def _memory(config: pytest.Config, session: bench.Session, notes: list[str]) -> list[dict]:
    from harness.api.peak_memory import MeasurementUnavailable, peak_bytes

    if config.getoption("bench_memory") == "no":
        return []
    rows = []
    unavailable = {}
    timed = {(t["impl"], t["mode"]) for t in session.timings}  # what this run selected (-k) and could import
    for (impl, mode, n), probe in bench.memory_probes(config.getoption("bench_n"),
                                                     session.quadratic_max_n).items():
        if (impl, mode) not in timed and impl != summary.NAIVE:  # naive NumPy: the memory target's baseline
            continue
        try:
            bench.load(bench.BY_NAME[impl])
        except bench.Unavailable as exc:
            unavailable[impl] = str(exc)
            continue
        row = {"impl": impl, "mode": mode, "n": n, "d": probe.d, "peak_bytes": None}
        try:
            row["peak_bytes"] = peak_bytes({"probe": probe}, timeout=900.0)["probe"][0]
        except MeasurementUnavailable as exc:
            notes.append(f"no peak memory: {exc}")
            return []
        except (RuntimeError, OSError) as exc:
            row["error"] = str(exc)[-500:]
        rows.append(row)
    notes.extend(f"no peak memory of {impl}: {why}" for impl, why in unavailable.items())
    return rows


def _write_suite_speed(config: pytest.Config) -> None:
    rows = config.stash.get(SUITE_ROWS, [])
    if not rows:
        return
    data = suite_speed.summarise(rows, baseline=config.getoption("suite_baseline"), environment=bench.environment())
    stem = f"suite-{datetime.date.today().isoformat()}"
    paths = suite_speed.write(data, Path(config.getoption("bench_results")), stem)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(suite_speed.markdown(data))
        reporter.write_line("suite speed written to " + ", ".join(map(str, paths)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    _write_suite_speed(config)
    state = config.stash.get(SESSION, None)
    if state is None or not state.timings:
        return
    environment = bench.environment()
    environment["load_average_start"] = state.load_at_start
    environment["load_average_end_of_timings"] = [round(x, 2) for x in os.getloadavg()]
    notes = [
        f"NumPy tiled runs with {bench.NUMPY_TILED_BLOCKS['block_rows']} x {bench.NUMPY_TILED_BLOCKS['block_cols']} "
        "blocks (its default 16 x 16 would be ~260k Python steps at n=8192); our torch tiled with its own defaults.",
        "Rounds fill about --bench-budget seconds per benchmark (at least 2): slow cases run 2 rounds. A case's first "
        "size runs once untimed first; later sizes warm up one round only when a call takes < 0.5 s.",
        "Forward cases run on tensors without requires_grad (no graph is kept); fwd+bwd backpropagates a fixed "
        "random gradient through torch autograd.",
        "The machine may be shared: the load average at start and at the end of timings is in the environment.",
    ]
    skipped = config.getoption("bench_quadratic_max_n")
    if skipped < max(config.getoption("bench_n")):
        notes.append(f"implementations holding n x n scores were skipped above n={skipped} (--bench-quadratic-max-n)")
    profile = _profile(config, state.timings, notes)
    memory = _memory(config, state, notes)
    settings = {"batch": bench.BATCH, "heads": bench.HEADS, "dtype": bench.DTYPE,
                "sizes_n": list(config.getoption("bench_n")), "sizes_d": list(config.getoption("bench_d")),
                "memory_d": bench.MEMORY_D, "budget_s": state.budget, "time": "fastest round (min)",
                "busy_processes": config.getoption("bench_busy")}
    data = summary.summarise(state.timings, memory, settings=settings, environment=environment, profile=profile,
                             notes=notes)
    stem = f"bench-{datetime.date.today().isoformat()}"
    if config.getoption("bench_busy"):
        stem += f"-busy{config.getoption('bench_busy')}"
    data["files"] = [str(p) for p in summary.write(data, Path(config.getoption("bench_results")), stem)]
    config.stash[RESULT] = data


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    data = config.stash.get(RESULT, None)
    if data is None:
        return
    terminalreporter.write_sep("=", "attention benchmarks: summary")
    terminalreporter.write_line(summary.terminal_text(data))
    for path in data["files"]:
        terminalreporter.write_line(f"wrote {path}")
