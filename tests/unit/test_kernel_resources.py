"""The report's `kernels` section (impls.cuda.resources computes it, harness.reporting.kernel_resources renders it):
ptxas's numbers for a small kernel of this test's own, a compile error recorded per kernel, the reason when NVRTC
is missing, and when a run pays for it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harness.engine.verdicts import RunState
from harness.reporting.kernel_resources import html_section, markdown_lines, summary_line, wanted
from harness.reporting.report import build_report, write_report
from impls.cuda import resources as kernel_resources
from impls.cuda.kernel_catalogue import KERNELS, uncatalogued
from impls.cuda.runtime.launch import KernelSource
from impls.cuda.runtime.nvrtc import ARCHITECTURES, NvrtcUnavailable, resources, version

SOURCE = """
__global__ void heavy(const float* x, float* y, int n) {
    __shared__ float tile[256];
    float local[64];
    for (int i = 0; i < 64; ++i) local[i] = x[(threadIdx.x + i) % n];
    tile[threadIdx.x % 256] = local[(int)x[0] & 63];  // a dynamic index: the array lives on the stack
    __syncthreads();
    y[threadIdx.x] = tile[(threadIdx.x + 1) % 256];
}

template <typename T>
__global__ void scaled(const T* x, T* y, T s) { y[threadIdx.x] = x[threadIdx.x] * s; }
"""


def _nvrtc_or_skip() -> None:
    try:
        version()
    except NvrtcUnavailable as exc:
        pytest.skip(str(exc))


def test_every_kernel_file_is_catalogued():
    assert not uncatalogued(), f"add these impls/cuda/kernels files to impls/cuda/kernel_catalogue.py: {uncatalogued()}"
    assert len({k.path for k in KERNELS}) == len(KERNELS)


def test_numbers_parse_for_every_entry_and_architecture(tmp_path):
    _nvrtc_or_skip()
    (tmp_path / "tiny.cu").write_text(SOURCE)
    (tmp_path / "broken.cu").write_text("__global__ void broken(float* y) { y[0] = undeclared; }\n")
    kernels = [KernelSource(tmp_path / "tiny.cu", ("heavy", "scaled<float>")),
               KernelSource(tmp_path / "broken.cu", ("broken",))]
    section = kernel_resources.kernel_section(kernels)
    assert section["unavailable"] is None and section["compiler"].startswith("NVRTC ")
    assert section["architectures"] == list(ARCHITECTURES)
    got = {(e["entry"], e["arch"]): e for e in section["entries"]}
    assert set(got) == {(entry, arch) for entry in ("heavy", "scaled<float>") for arch in ARCHITECTURES}
    for (entry, _), numbers in got.items():
        assert numbers["registers"] > 0
        assert numbers["source"].endswith("tiny.cu")
        if entry == "heavy":
            assert numbers["shared_bytes"] == 256 * 4 and numbers["stack_bytes"] >= 64 * 4
    assert [(e["arch"], e["source"].endswith("broken.cu")) for e in section["errors"]] == [
        (arch, True) for arch in ARCHITECTURES]
    assert all("undeclared" in e["error"] for e in section["errors"])
    assert "2 compile errors" in summary_line(section)
    assert any("`heavy`" in line for line in markdown_lines(section))
    assert "<code>scaled&lt;float&gt;</code>" in html_section(section)


def test_without_nvrtc_the_section_says_why(monkeypatch, tmp_path):
    def missing() -> str:
        raise NvrtcUnavailable("NVRTC needs cupy-cuda12x (no module named cupy_backends)")

    monkeypatch.setattr(kernel_resources, "version", missing)
    section = kernel_resources.kernel_section([KernelSource(tmp_path / "tiny.cu", ("heavy",))])
    assert section["unavailable"].startswith("NVRTC needs cupy-cuda12x")
    assert section["entries"] == [] and section["errors"] == [] and section["compiler"] is None
    assert "not compiled (NVRTC needs" in summary_line(section)
    assert "Not compiled: NVRTC needs" in "\n".join(markdown_lines(section))


def _state(*collected: tuple[str, str, str], backends: dict[str, str] | None = None) -> RunState:
    variants = [SimpleNamespace(name=name, impl=SimpleNamespace(backend=backend))
                for name, backend in (backends or {}).items()]
    state = RunState(variants, [], {})
    for slug, subject, prop in collected:
        state.collected[(slug, subject)].add(prop)
    return state


def test_only_runs_that_touch_cuda_compile():
    numpy_run = _state(("rows-sum-to-one", "numpy-reference[float64]", "properties.test_probability::test_rows"),
                       backends={"numpy-reference[float64]": "numpy"})
    assert not wanted(numpy_run)
    assert wanted(_state(("cuda-naive-kernel", "seed002-cuda", "properties.test_seed_kernels::test_naive")))
    assert wanted(_state(("rows-sum-to-one", "cuda-x[float16]", "properties.test_probability::test_rows"),
                         backends={"cuda-x[float16]": "cupy"}))


def test_the_report_carries_the_section(tmp_path):
    section = {"compiler": None, "architectures": list(ARCHITECTURES), "unavailable": "no NVRTC here",
               "entries": [], "errors": []}
    report = build_report(_state(), 0.0, kernels=section)
    assert report["kernels"] == section
    write_report(report, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["kernels"] == section
    for name in ("report.md", "report.html"):
        assert "Not compiled: no NVRTC here" in (tmp_path / name).read_text()
    assert build_report(_state(), 0.0)["kernels"] is None


def test_the_numbers_are_kept_on_disk_by_source_entries_compiler_and_options(tmp_path, monkeypatch):
    """A second run reads what the first compiled; a changed source, and only that, is compiled again; a compile
    error is kept with its log."""
    _nvrtc_or_skip()
    monkeypatch.setenv("ATTN_CUDA_CPU_CACHE", str(tmp_path / "cache"))
    compiled = []
    monkeypatch.setattr(kernel_resources, "resources",
                        lambda kernel, arch: compiled.append((kernel.name, arch)) or resources(kernel, arch))
    (tmp_path / "tiny.cu").write_text(SOURCE)
    (tmp_path / "broken.cu").write_text("__global__ void broken(float* y) { y[0] = undeclared; }\n")
    kernels = [KernelSource(tmp_path / "tiny.cu", ("heavy", "scaled<float>")),
               KernelSource(tmp_path / "broken.cu", ("broken",))]
    first = kernel_resources.kernel_section(kernels)
    assert len(compiled) == 2 * len(ARCHITECTURES)
    assert kernel_resources.kernel_section(kernels) == first and len(compiled) == 2 * len(ARCHITECTURES)
    (tmp_path / "tiny.cu").write_text(SOURCE.replace("float local[64]", "float local[32]"))
    changed = kernel_resources.kernel_section(kernels)
    assert len(compiled) == 3 * len(ARCHITECTURES) and {name for name, _ in compiled[-2:]} == {"tiny"}
    assert changed["errors"] == first["errors"] and changed["entries"] != first["entries"]


def test_the_key_does_not_hold_where_the_environment_lives(monkeypatch):
    """Two clones' tox environments give NVRTC the same headers from different places: one key (each fresh clone
    compiled every kernel again for the report before). The wheels' versions are in it instead."""
    places = ["/a/clone/.tox/report/lib/python3.11/site-packages", "/another/.tox/x/lib/python3.11/site-packages"]
    keys = []
    for place in places:
        monkeypatch.setattr(kernel_resources, "options",
                            lambda arch, place=place: ("-std=c++17", f"-I{place}/nvidia/cuda_runtime/include",
                                                       "-I/usr/local/cuda/include", f"-arch={arch}"))
        keys.append(kernel_resources._keyed_options("sm_90"))
    assert keys[0] == keys[1] and not any("clone" in option for option in keys[0])
    assert "-I/usr/local/cuda/include" in keys[0] and any(o.startswith("nvidia-cuda-runtime-cu12 ") for o in keys[0])
