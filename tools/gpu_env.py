"""Step 1 of gpu-check: the device, the date and the versions of what the check runs on."""

from __future__ import annotations

import datetime
import glob
import importlib
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _probe(read: Callable[[], object]) -> object:
    """The value, or "unavailable: why" when reading it raises."""
    try:
        return read()
    except Exception as exc:
        return f"unavailable: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")


def device() -> dict:
    """Device 0 as CuPy sees it, or {"unavailable": why}."""
    from impls.cuda.cuda_records import device_unavailable

    reason = device_unavailable()
    if reason:
        return {"unavailable": reason}
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"name": name, "sm": f"sm_{props['major']}{props['minor']}",
            "memory_gib": round(props["totalGlobalMem"] / 2**30, 1), "multiprocessors": props["multiProcessorCount"],
            "count": cupy.cuda.runtime.getDeviceCount()}


def _cuda_version(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}" if number else "none (no CUDA driver)"


def _module_version(name: str) -> Callable[[], str]:
    return lambda: importlib.import_module(name).__version__


def find_sanitizer() -> str | None:
    """compute-sanitizer on PATH, under CUDA_HOME / CUDA_PATH, or under /usr/local/cuda*."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    roots = [os.environ.get(key) for key in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    roots += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for root in filter(None, roots):
        for candidate in (Path(root) / "bin" / "compute-sanitizer",
                          Path(root) / "compute-sanitizer" / "compute-sanitizer"):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def _sanitizer_version() -> str:
    path = find_sanitizer()
    if path is None:
        raise FileNotFoundError("compute-sanitizer is not on PATH nor under /usr/local/cuda*")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    found = re.search(r"Version (\S+)", out)
    return f"{found[1] if found else out.strip().splitlines()[-1]} ({path})"


def versions() -> dict:
    def nvrtc() -> str:
        from impls.cuda.runtime.nvrtc import version

        return version()

    def torch_cuda() -> str:
        import torch

        return f"{torch.version.cuda} (cuDNN {torch.backends.cudnn.version()})"

    return {
        "python": platform.python_version(),
        **{name: _probe(_module_version(name)) for name in ("numpy", "torch", "cupy", "scipy", "hypothesis",
                                                              "pytest", "pytest_benchmark")},
        "torch_cuda": _probe(torch_cuda),
        "cuda_runtime": _probe(lambda: _cuda_version(importlib.import_module("cupy").cuda.runtime.runtimeGetVersion())),
        "cuda_driver": _probe(lambda: _cuda_version(importlib.import_module("cupy").cuda.runtime.driverGetVersion())),
        "nvrtc": _probe(nvrtc),
        "compute_sanitizer": _probe(_sanitizer_version),
    }


def commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def now() -> datetime.datetime:
    # timezone.utc, not datetime.UTC: the lent machine's Python may predate 3.11
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)  # noqa: UP017


def environment() -> dict:
    """Step 1: {"date", "host", "commit", "device", "versions"}."""
    found = _probe(device)
    return {"date": now().isoformat(), "host": platform.node(), "commit": _probe(commit),
            "device": found if isinstance(found, dict) else {"unavailable": found}, "versions": versions()}
