"""The benchmark summary (benchmarks/summary.py): exponent fits, rates and ratios, target verdicts, the files.

Synthetic timings and peaks with known answers; nothing is timed here (benchmarks are not tests).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import summary

SETTINGS = {"batch": 1, "heads": 8, "dtype": "float32", "sizes_n": [256, 1024, 4096, 8192], "sizes_d": [64],
            "memory_d": 64}
SIZES = (256, 1024, 4096, 8192)


@pytest.mark.parametrize("exponent", [1.0, 1.5, 2.0, 3.0])
def test_fit_recovers_a_known_exponent(exponent):
    ns = np.array(SIZES, dtype=float)
    fit = summary.fit_exponent(ns, 3e-7 * ns**exponent)
    assert fit["exponent"] == pytest.approx(exponent, abs=1e-9)
    assert fit["coefficient"] == pytest.approx(3e-7, rel=1e-6)
    assert fit["points"] == 4 and fit["stderr"] == pytest.approx(0, abs=1e-9)


def test_fit_under_noise_stays_near_the_exponent_and_reports_its_error():
    rng = np.random.default_rng(0)
    ns = np.geomspace(128, 16384, 12)
    values = 2.0 * ns**2 * np.exp(rng.normal(0, 0.1, ns.size))  # 10 % multiplicative noise
    fit = summary.fit_exponent(ns, values)
    assert abs(fit["exponent"] - 2.0) < 0.1
    assert 0 < fit["stderr"] < 0.1
    assert abs(fit["exponent"] - 2.0) < 4 * fit["stderr"]


def test_fit_needs_two_distinct_positive_points():
    assert summary.fit_exponent([1024], [1.0]) is None
    assert summary.fit_exponent([1024, 1024], [1.0, 2.0]) is None
    assert summary.fit_exponent([256, 1024, 4096], [None, 0.0, 1.0]) is None  # missing and non-positive dropped
    assert summary.fit_exponent([256, 1024, 4096], [None, 1.0, 4.0])["exponent"] == pytest.approx(1.0)


def test_flops_follow_flash_attentions_rule():
    forward = 4 * 1 * 8 * 4096 * 4096 * 64
    assert summary.flops("forward", 1, 8, 4096, 64) == forward
    assert summary.flops("fwd+bwd", 1, 8, 4096, 64) == 3.5 * forward  # backward = 2.5 forwards
    assert summary.flops("matmul", 1, 8, 4096, 64) == forward / 2  # one of the forward's two products


def timing(impl, mode, n, seconds, d=64):
    return {"impl": impl, "mode": mode, "n": n, "d": d, "min_s": seconds, "median_s": seconds * 1.1,
            "mean_s": seconds * 1.2, "rounds": 2, "warmup_rounds": 0}


def synthetic(ours_forward=1.0, ours_fwd_bwd=1.0, ours_peak=1e6, naive_peak=2e9):
    """Times in units where SDPA flash takes 1 s forward and 3 s forward + backward at every n."""
    timings, memory = [], []
    for n in SIZES:
        scale = (n / 4096) ** 2
        timings += [timing("sdpa-flash", "forward", n, 1.0 * scale), timing("sdpa-flash", "fwd+bwd", n, 3.0 * scale),
                    timing("matmul-qk", "matmul", n, 0.5 * scale), timing("matmul-pv", "matmul", n, 0.25 * scale),
                    timing("torch-tiled", "forward", n, 1.0 / ours_forward * scale),
                    timing("torch-tiled", "fwd+bwd", n, 3.0 / ours_fwd_bwd * scale)]
        memory += [{"impl": "torch-tiled", "mode": "forward", "n": n, "d": 64, "peak_bytes": ours_peak * n / 8192},
                   {"impl": "numpy-naive", "mode": "forward", "n": n, "d": 64,
                    "peak_bytes": naive_peak * (n / 8192) ** 2}]
    return timings, memory


def test_rates_and_ratios():
    timings, _ = synthetic(ours_forward=0.5)
    rows = {(r["impl"], r["mode"], r["n"]): r for r in summary.add_rates(timings, 1, 8)}
    flash = rows[("sdpa-flash", "forward", 4096)]
    assert flash["gflops"] == pytest.approx(4 * 8 * 4096**2 * 64 / 1.0 / 1e9)
    assert flash["vs_sdpa_flash"] == 1.0
    ours = rows[("torch-tiled", "forward", 4096)]
    assert ours["vs_sdpa_flash"] == pytest.approx(0.5)  # twice SDPA flash's time
    peak = rows[("matmul-pv", "matmul", 4096)]  # the faster product: half a forward's FLOPs in 0.25 s
    assert peak["vs_matmul_peak"] == 1.0 and peak["vs_sdpa_flash"] is None
    assert rows[("matmul-qk", "matmul", 4096)]["vs_matmul_peak"] == pytest.approx(0.5)
    assert flash["vs_matmul_peak"] == pytest.approx(flash["gflops"] / peak["gflops"])
    assert rows[("torch-tiled", "fwd+bwd", 4096)]["vs_sdpa_flash"] == pytest.approx(1.0)  # fwd+bwd vs fwd+bwd
    alone = summary.add_rates([timing("torch-tiled", "forward", 256, 1.0)], 1, 8)[0]
    assert alone["vs_sdpa_flash"] is None and alone["vs_matmul_peak"] is None


def test_exponents_of_time_and_memory():
    timings, memory = synthetic()
    data = summary.summarise(timings, memory, settings=SETTINGS)
    time_fits = {(e["impl"], e["mode"]): e["exponent"] for e in data["exponents"]["time"]}
    memory_fits = {e["impl"]: e["exponent"] for e in data["exponents"]["memory"]}
    assert time_fits[("torch-tiled", "forward")] == pytest.approx(2.0)
    assert memory_fits == pytest.approx({"torch-tiled": 1.0, "numpy-naive": 2.0})


@pytest.mark.parametrize(("ours_forward", "ours_fwd_bwd", "ours_peak", "expected"), [
    (0.9, 0.7, 1e8, ("PASS", "PASS", "PASS")),
    (0.8, 0.6, 1e8, ("PASS", "PASS", "PASS")),  # at the speed thresholds: >= passes
    (0.79, 0.59, 2e8, ("MISS", "MISS", "MISS")),  # memory at exactly 0.1 x naive: < misses
])
def test_target_verdicts(ours_forward, ours_fwd_bwd, ours_peak, expected):
    timings, memory = synthetic(ours_forward, ours_fwd_bwd, ours_peak, naive_peak=2e9)
    targets = summary.summarise(timings, memory, settings=SETTINGS)["targets"]
    assert tuple(t["verdict"] for t in targets[:3]) == expected
    assert targets[0]["value"] == pytest.approx(ours_forward)
    assert targets[2]["value"] == pytest.approx(ours_peak / 2e9)


@pytest.mark.parametrize(("window_share", "expected"), [(0.1, "PASS"), (1024 / 8192, "PASS"), (0.13, "MISS")])
def test_the_window_target_is_its_time_over_the_dense_forwards(window_share, expected):
    """A window of 256 at n = 8192 may cost (256 + 256 + 512) / 8192 of our dense forward: <= passes."""
    timings, memory = synthetic(ours_forward=0.5)  # our dense forward: 2 s at n = 4096, 8 s at 8192
    timings.append(timing("torch-tiled-window", "forward", 8192, 8.0 * window_share))
    window = summary.summarise(timings, memory, settings=SETTINGS)["targets"][3]
    assert window["value"] == pytest.approx(window_share) and window["relation"] == "<="
    assert window["verdict"] == expected


def test_a_target_without_its_data_is_not_applicable():
    timings, memory = synthetic()
    timings = [t for t in timings if not (t["impl"] == "torch-tiled" and t["mode"] == "fwd+bwd")]
    memory = [m for m in memory if m["impl"] != "numpy-naive"]
    targets = summary.summarise(timings, memory, settings=SETTINGS)["targets"]
    assert [t["verdict"] for t in targets] == ["PASS", "n/a", "n/a", "n/a"]
    assert "torch-tiled fwd+bwd" in targets[1]["missing"] and "numpy-naive" in targets[2]["missing"]
    assert all("n/a" in line for line in summary.target_lines({"targets": targets})[1:])


def test_writer_produces_json_markdown_and_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib (in the tests and bench envs)")
    timings, memory = synthetic(ours_forward=0.5)
    profile = {"impl": "torch-tiled", "n": 4096, "d": 64, "wall_s": 0.2, "ops_self_s": 0.15, "threads": 2,
               "top": [{"op": "aten::bmm", "self_s": 0.1, "calls": 16, "share": 2 / 3}], "reading": "bmm leads."}
    data = summary.summarise(timings, memory, settings=SETTINGS, profile=profile, notes=["a note"])
    paths = summary.write(data, tmp_path / "results", "bench-test")
    assert sorted(p.name for p in paths) == ["bench-test.json", "bench-test.md", "bench-test.png"]
    assert json.loads((tmp_path / "results" / "bench-test.json").read_text())["targets"][0]["verdict"] == "MISS"
    assert (tmp_path / "results" / "bench-test.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "results" / "bench-test.md").read_text()
    for expected in ("MISS  torch tiled forward vs SDPA flash forward at n=4096 d=64: 0.500", "aten::bmm",
                     "bmm leads.", "a note", "(bench-test.png)", "| 8192 | 64 | torch-tiled forward |"):
        assert expected in md
    text = summary.terminal_text(data)
    assert "PASS  torch tiled fwd+bwd" in text and "exponent" in text


def test_summary_renders_again_from_its_json(tmp_path, capsys):
    timings, memory = synthetic()
    data = summary.summarise(timings, memory, settings=SETTINGS)
    path = tmp_path / "bench-again.json"
    path.write_text(json.dumps(data))
    assert summary.main([str(path)]) == 0
    assert (tmp_path / "bench-again.md").exists()
    assert "targets" in capsys.readouterr().out
    assert summary.main([]) == 2
    assert not math.isnan(data["targets"][0]["value"])


def test_rows_timed_under_load_are_flagged():
    timings, memory = synthetic()
    timings[0]["load_1min"] = 3.5  # sdpa-flash forward at n=256 while others ran on a 2-CPU machine
    data = summary.summarise(timings, memory, settings=SETTINGS, environment={"cpus": 2})
    assert "n=256 d=64" in summary.loaded_note(data) and "n=1024" not in summary.loaded_note(data)
    assert "n=256 d=64" in summary.markdown(data) and "| 3.5 |" in summary.markdown(data)
    timings[0]["load_1min"] = 1.5
    assert summary.loaded_note(summary.summarise(timings, memory, settings=SETTINGS, environment={"cpus": 2})) is None


def test_a_run_with_spinning_processes_says_so_in_every_output():
    timings, memory = synthetic()
    busy = summary.summarise(timings, memory, settings={**SETTINGS, "busy_processes": 1})
    quiet = summary.summarise(timings, memory, settings=SETTINGS)
    for render in (summary.terminal_text, summary.markdown):
        assert "1 process(es) spinning" in render(busy) and "spinning" not in render(quiet)
