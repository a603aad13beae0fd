"""ptxas's resources of every catalogued CUDA kernel (impls/cuda/kernel_catalogue.py) on every architecture of
impls/cuda/runtime/nvrtc.py: the report's `kernels` section (its form: harness.reporting.kernel_resources, which
renders it).

Without NVRTC, `unavailable` says why and the lists are empty; a kernel that does not compile is an entry of
`errors` (the first error lines of NVRTC's log), never an exception. A pytest plugin (registered by conftest.py
and the package's entry point): the run asks for the section through the `pytest_attention_kernel_resources` hook.

What ptxas reports is a pure function of the source, the entries, NVRTC's version and the options (the include
directories and the architecture among them: a directory of a Python environment by the CUDA wheels' versions, not
by where the environment lives), so it is kept on disk under that key, beside the CPU builds
(impls.cuda.runtime.cpu_build.cache_dir): a run compiles a kernel for the report only when one of those changed
(24 compiles, 23 s in the controller at the end of a run on a 2-core machine, otherwise).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from impls.cuda.runtime.cpu_build import cache_dir
from impls.cuda.runtime.launch import KernelSource
from impls.cuda.runtime.nvrtc import (
    ARCHITECTURES,
    CompileError,
    NvrtcUnavailable,
    Resources,
    options,
    resources,
    version,
)

ROOT = Path(__file__).resolve().parents[2]  # the clone (or site-packages): sources are named from here


def _source(kernel: KernelSource) -> str:
    path = kernel.path.resolve()
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


def first_errors(log: str, limit: int = 4) -> str:
    """The first `limit` lines of a compiler log that name an error (else its first lines)."""
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return "\n".join((errors or lines)[:limit])


def kernel_section(kernels: Iterable[KernelSource] | None = None,
                   architectures: Iterable[str] = ARCHITECTURES) -> dict:
    """ptxas's numbers for every entry of `kernels` (default: the catalogue) on every architecture."""
    if kernels is None:
        from impls.cuda.kernel_catalogue import KERNELS

        kernels = KERNELS
    architectures = list(architectures)
    section = {"compiler": None, "architectures": architectures, "unavailable": None, "entries": [], "errors": []}
    try:
        section["compiler"] = f"NVRTC {version()}"
        for kernel in kernels:
            for arch in architectures:
                _compile_one(kernel, arch, section)
    except NvrtcUnavailable as exc:
        return {**section, "compiler": None, "unavailable": str(exc), "entries": [], "errors": []}
    return section


CUDA_WHEELS = ("nvidia-cuda-runtime-cu12", "nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvrtc-cu12")  # their headers


def _keyed_options(arch: str) -> list[str]:
    """NVRTC's options as the key holds them: a header directory inside a Python environment by its place in the
    environment and the versions of the CUDA wheels that provide it, not by where the environment lives (each
    fresh clone's tox environment would otherwise compile every kernel again, 23 s)."""
    keyed = []
    for option in options(arch):
        before, marker, inside = option.partition("site-packages/")
        keyed.append(f"-I<site-packages>/{inside}" if marker and before.startswith("-I") else option)
    wheels = [f"{name} {_version(name)}" for name in CUDA_WHEELS]
    return keyed + wheels


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def stored_resources(kernel: KernelSource, arch: str) -> list[Resources]:
    """nvrtc.resources(kernel, arch), read from the disk cache when this source, these entries, this NVRTC and these
    options were compiled before (a CompileError too: its log is kept)."""
    key = hashlib.sha256(json.dumps([version(), _keyed_options(arch), kernel.entries, kernel.text()]).encode())
    key = key.hexdigest()
    path = cache_dir().parent / "nvrtc-resources" / f"{kernel.name}-{arch}-{key[:24]}.json"
    if path.is_file():
        stored = json.loads(path.read_text())
    else:
        try:
            stored = {"resources": [r.as_dict() for r in resources(kernel, arch)]}
        except CompileError as exc:
            stored = {"error": str(exc)}
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as handle:
            json.dump(stored, handle)
        os.replace(handle.name, path)  # whole or absent: another process may read it meanwhile
    if "error" in stored:
        raise CompileError(stored["error"])
    return [Resources(**found) for found in stored["resources"]]


def _compile_one(kernel: KernelSource, arch: str, section: dict) -> None:
    source = _source(kernel)
    try:
        found = stored_resources(kernel, arch)
    except NvrtcUnavailable:
        raise
    except CompileError as exc:
        section["errors"].append({"source": source, "arch": arch, "error": first_errors(str(exc))})
        return
    except Exception as exc:  # an unreadable file, a name expression NVRTC cannot lower: the kernel's failure
        section["errors"].append({"source": source, "arch": arch, "error": f"{type(exc).__name__}: {exc}"})
        return
    reported = {r.kernel for r in found}
    for r in sorted(found, key=lambda r: kernel.entries.index(r.kernel)):
        numbers = {key: value for key, value in dataclasses.asdict(r).items() if key not in ("kernel", "arch")}
        section["entries"].append({"source": source, "entry": r.kernel, "arch": r.arch, **numbers})
    for entry in kernel.entries:
        if entry not in reported:
            section["errors"].append({"source": source, "arch": arch,
                                      "error": f"ptxas reported no resources for {entry}"})


def pytest_attention_kernel_resources() -> dict:
    """The hook's answer: the catalogue's section, compiled now (seconds; the run asks once, in the controller)."""
    return kernel_section()
