"""tools/gpu-check without a GPU: the dry run's JSON (every GPU step skipped with its reason, the plan in place),
launches planned through a device record of this test's own, the sanitizer step's flow with a stand-in
compute-sanitizer, and the parsing, shapes, time limits and table the GPU run relies on."""

from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace
from types import SimpleNamespace

import numpy as np
import pytest

from impls.cuda.runtime.on_device import planning
from impls.records import BUILTIN_TARGETS
from tools import gpu_check
from tools.bounded import run_bounded
from tools.gpu_bench import bench_step, configs, flops, shape_for
from tools.gpu_check import exit_code, result_path
from tools.gpu_plan import BF16, SMALL, Shape, Unsupported, device_records, plan, small_plan
from tools.gpu_properties import per_record
from tools.gpu_sanitize import TOOLS, parse, run_tool, sanitizer_step
from tools.gpu_table import table

ROOT = gpu_check.ROOT
KERNEL = """
template <typename T>
__global__ void tiny(const T* q, const T* k, const T* v, T* out, int size) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < size) out[i] = v[i];
}
"""
RECORD = '''
from pathlib import Path

import numpy as np

from impls.cuda.runtime.execute import execute
from impls.cuda.runtime.launch import KernelSource, Launch
from impls.cuda.cuda_records import cuda_records

KERNEL = KernelSource(Path(__file__).with_name("tiny.cu"), ("tiny<float>", "tiny<__half>", "tiny<__nv_bfloat16>"))
NAMES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}


def copy_v(q, k, v, *, scale=None, executor):
    out = np.full(v.shape, np.nan, dtype=v.dtype)
    launch = Launch(f"tiny<{NAMES[v.dtype.name]}>", (-(-v.size // 128), 1, 1), (128, 1, 1), 0,
                    (q, k, v, out, np.int32(v.size)))
    return execute(KERNEL, launch, executor)[3]


on_device, on_cpu = cuda_records("tiny-copy", copy_v, dtypes=("float32", "float16"))
'''


@pytest.fixture
def record(tmp_path):
    (tmp_path / "tiny.cu").write_text(KERNEL)
    (tmp_path / "tiny_record.py").write_text(RECORD)
    path = tmp_path / "tiny_record.py"
    return device_records((f"{path}:on_device", f"{path}:on_cpu"))


def test_dry_run_records_why_each_step_did_not_run(tmp_path):
    out = tmp_path / "dry.json"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu-check"), "--dry-run", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["dry_run"] and set(result["versions"]) >= {"torch", "cupy", "cuda_runtime", "cuda_driver", "nvrtc"}
    reason = result["device"].get("unavailable") or "dry run"
    assert reason.startswith(("no CUDA device", "cupy is not installed", "dry run"))
    for name in ("properties", "sanitizers", "benchmark"):
        assert result["steps"][name]["status"] == "skipped" and result["steps"][name]["reason"] == reason
    assert "--backend" in result["steps"]["properties"]["command"]
    assert len(result["steps"]["benchmark"]["plan"]) >= 2 * len(configs())  # the SDPA backends at least
    assert f"properties: skipped ({reason})" in done.stdout


def test_device_records_are_found_and_planned_without_a_gpu(record):
    assert [impl.name for impl in record] == ["cuda-tiny-copy"]  # the CPU record is not a device record
    planned, skipped = small_plan(record)
    assert [p.label for p in planned] == ["cuda-tiny-copy[float16] tiny:tiny<__half>",
                                          "cuda-tiny-copy[float32] tiny:tiny<float>"]
    assert skipped == []
    twice, skipped = small_plan(record + record)  # the same launches are sanitized once
    assert [p.label for p in twice] == [p.label for p in planned]
    assert [s["reason"] for s in skipped] == [f"the same launches as cuda-tiny-copy[{dtype}]"
                                              for dtype in ("float16", "float32")]
    first = planned[0]
    assert first.inputs == {0: "q", 1: "k", 2: "v"} and first.output == 3
    assert first.launch.grid == (-(-np.prod(SMALL.dims) // 128), 1, 1)
    with planning() as launches:
        pass
    assert launches == []


def test_bfloat16_without_ml_dtypes_launches_the_twin_entry(record, monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes now raises ImportError
    impl = record[0]
    stand_in = SimpleNamespace(name=impl.name, fn=impl.fn, capabilities=SimpleNamespace(dtypes=("bfloat16",)))
    (launch,) = plan(stand_in, "bfloat16", Shape(1, 1, 8, 4))
    assert launch.launch.entry == f"tiny<{BF16}>" and "float16" in launch.via
    with pytest.raises(Unsupported, match="declares dtypes float32, float16, not bfloat16"):
        plan(impl, "bfloat16", Shape(1, 1, 8, 4))


def test_plan_reports_a_record_that_rejects_the_shape(record):
    def rejects(q, k, v):
        raise ValueError("d=4 is too small")

    impl = SimpleNamespace(name="picky", fn=rejects, capabilities=SimpleNamespace(dtypes=("float16",)))
    with pytest.raises(Unsupported, match="d=4 is too small"):
        plan(impl, "float16", Shape(1, 1, 8, 4))


def test_the_builtin_device_records_load():
    assert all(impl.backend == "cupy" for impl in device_records(BUILTIN_TARGETS))


SANITIZER = """#!/bin/sh
# stands in for compute-sanitizer: --tool T --print-limit N, then the command
shift 4
echo "========= COMPUTE-SANITIZER"
"$@"
echo "========= ERROR SUMMARY: {errors} errors"
"""


def _fake_sanitizer(tmp_path, errors: int) -> str:
    path = tmp_path / f"sanitizer-{errors}"
    path.write_text(SANITIZER.format(errors=errors))
    path.chmod(0o755)
    return str(path)


def test_a_clean_sanitizer_run_gives_every_kernel_zero(record, tmp_path):
    pytest.importorskip("cupy", reason="each launch's failure is the driver's, reported through cupy")
    labels = [p.label for p in small_plan(record)[0]]
    outcome = run_tool(_fake_sanitizer(tmp_path, 0), "memcheck", [record[0].target], labels, 60)
    assert outcome["error_summary"] == 0 and set(outcome["kernels"]) == set(labels)
    for kernel in outcome["kernels"].values():  # no device here: the driver reports each launch's failure
        assert kernel["errors"] is None and "cudaError" in kernel["launch_failed"]


def test_errors_are_isolated_per_kernel(record, tmp_path):
    labels = [p.label for p in small_plan(record)[0]]
    outcome = run_tool(_fake_sanitizer(tmp_path, 2), "racecheck", [record[0].target], labels, 60)
    assert outcome["error_summary"] == 2
    for kernel in outcome["kernels"].values():  # each launch again, alone: its own ERROR SUMMARY
        assert kernel["errors"] == 2 and "attributed" not in kernel


def test_the_tool_limit_leaves_kernels_unreached(record, tmp_path):
    labels = [p.label for p in small_plan(record)[0]]
    outcome = run_tool(_fake_sanitizer(tmp_path, 1), "synccheck", [record[0].target], labels, 0.5)
    assert outcome["timed_out"] or outcome["error_summary"] == 1
    assert all(k.get("reason") == "skipped: time" for k in outcome["kernels"].values())


def test_sanitizer_output_is_read_per_launch():
    output = "\n".join([
        "========= COMPUTE-SANITIZER", "@@launch a[float16] k:e", "========= Invalid __global__ read of size 2",
        "=========     at e+0x10", "@@done a[float16] k:e", "@@launch b[float32] k:f",
        "@@failed b[float32] k:f: CUDARuntimeError: cudaErrorLaunchFailure", "========= ERROR SUMMARY: 1 error"])
    parsed = parse(output)
    assert parsed["summary"] == 1 and parsed["done"] == ["a[float16] k:e"]
    assert parsed["failed"] == {"b[float32] k:f": "CUDARuntimeError: cudaErrorLaunchFailure"}
    assert parsed["lines"]["a[float16] k:e"] == ["========= Invalid __global__ read of size 2",
                                                 "=========     at e+0x10"]
    assert parse("killed")["summary"] is None


def test_without_compute_sanitizer_the_step_says_so(record, monkeypatch):
    monkeypatch.setattr("tools.gpu_sanitize.find_sanitizer", lambda: None)
    step = sanitizer_step(record, None, 25)
    assert step["status"] == "skipped" and step["reason"].startswith("compute-sanitizer not found")
    assert len(step["plan"]) == 2 and "seed002_attention_kernel.cu:attention_kernel" in step["not_launched"]
    assert sanitizer_step(record, "no CUDA device: x", 25)["tools"] == {}
    assert TOOLS == ("memcheck", "racecheck", "synccheck")


def test_benchmark_shapes_and_plan(record):
    assert [shape_for(n, 128).dims for n in (1024, 4096, 16384)] == [(64, 16, 1024, 128), (16, 16, 4096, 128),
                                                                       (1, 16, 16384, 128)]
    assert flops(shape_for(4096, 128)) == flops(shape_for(16384, 128)) == 4 * 256 * 4096**2 * 128
    step = bench_step(record, "no CUDA device: x", 75)
    assert step["status"] == "skipped" and step["results"] == []
    mine = [row for row in step["plan"] if row["impl"] == "cuda-tiny-copy"]
    assert len(mine) == len(configs())
    assert {row.get("status") for row in mine if row["dtype"] == "bfloat16"} == {"unsupported"}
    assert all(row["kernel"] == "tiny:tiny<__half>" for row in mine if row["dtype"] == "float16")


def test_time_limit_interrupts_then_kills():
    # the child takes SIGINT as Python does by default even where its parent ignores it (a shell's background job)
    script = ("import signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\ntry:\n"
              "    time.sleep(60)\nexcept KeyboardInterrupt:\n    print('interrupted', flush=True)\n")
    finished = run_bounded([sys.executable, "-c", script], 1.0, grace_s=5)
    assert finished.timed_out and "interrupted" in finished.output and finished.seconds < 10
    stubborn = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)\n"
    assert run_bounded([sys.executable, "-c", stubborn], 0.5, grace_s=0.5).returncode == -9


def test_verdicts_per_record():
    report = {"verdicts": [
        {"claim": "rows-sum-to-one", "impl": "cuda-x[float16]", "status": "pass"},
        {"claim": "tiled-equals-global", "impl": "cuda-x[float16]", "status": "fail", "declared": False,
         "detail": "worst element 3\nmore"},
        {"claim": "causal-mask-zeroes-future", "impl": "cuda-x[float16]", "status": "fail", "declared": True}]}
    entry = per_record(report)["cuda-x[float16]"]
    assert (entry["pass"], entry["fail"]) == (1, 2)
    assert entry["failing_claims"] == [{"claim": "tiled-equals-global", "status": "fail",
                                        "detail": "worst element 3"}]
    assert entry["declared_failures"] == ["causal-mask-zeroes-future"]


def _result(**steps) -> dict:
    return {"dry_run": False, "date": "2026-11-30T15:00:00+00:00", "seconds": 1.0, "device_records": [],
            "device": {"name": "NVIDIA H200", "sm": "sm_90", "memory_gib": 139.8}, "versions": {}, "steps": steps}


def test_exit_status_path_and_table(tmp_path):
    ran = _result(properties={"status": "ran", "summary": {"unexpected_fail": 0, "error": 0}},
                  sanitizers={"status": "ran", "tools": {"memcheck": {"error_summary": 0, "kernels": {
                      "k": {"errors": 0}}}}},
                  benchmark={"status": "ran", "results": [
                      {"n": 1024, "d": 64, "dtype": "float16", "impl": "torch-sdpa-flash", "status": "ok",
                       "tflops": 300.0, "ratio_to_flash": 1.0},
                      {"n": 1024, "d": 64, "dtype": "bfloat16", "impl": "cuda-x", "status": "unsupported",
                       "reason": "declares float16"}]})
    assert exit_code(ran) == 0
    assert result_path(ran, None) == ROOT / "benchmarks" / "results" / "gpu-check-2026-11-30T1500-nvidia-h200.json"
    assert result_path({**ran, "dry_run": True}, None).parent != ROOT / "benchmarks" / "results"
    lines = "\n".join(table(ran))
    assert "NVIDIA H200 (sm_90" in lines and "300.0" in lines and "declares float16" in lines
    ran["steps"]["sanitizers"]["tools"]["memcheck"]["kernels"]["k"]["errors"] = 3
    assert exit_code(ran) == 1
    assert exit_code({**_result(), "device": {"unavailable": "no CUDA device"}}) == 2


def test_a_step_that_raises_is_recorded(record, monkeypatch, tmp_path):
    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr("tools.gpu_bench.bench_step", broken)
    options = Namespace(dry_run=True, out=tmp_path / "r.json", skip=["properties"], budget_s=60.0,
                        properties_s=10.0, sanitizer_s=5.0, benchmark_s=5.0)
    result, path = gpu_check.run(options, records=record)
    assert result["steps"]["properties"]["reason"] == "skipped: --skip"
    assert result["steps"]["benchmark"] == {**result["steps"]["benchmark"], "status": "error"}
    assert "boom" in result["steps"]["benchmark"]["reason"]
    assert json.loads(path.read_text())["device_records"] == ["cuda-tiny-copy"]
