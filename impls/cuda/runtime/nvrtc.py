"""Compiling the kernels with NVRTC, the compiler CuPy's RawModule uses, with the launcher's own options.

No GPU is needed: NVRTC comes with cupy-cuda12x's toolkit wheels (nvidia-cuda-nvrtc-cu12), the CUDA headers
the kernels include (cuda_fp16.h, cuda_bf16.h, mma.h) with nvidia-cuda-runtime-cu12 and nvidia-cuda-nvcc-cu12,
or with a CUDA installation (CUDA_PATH, /usr/local/cuda). Compiling to a cubin with `-Xptxas=-v` makes ptxas
report each kernel's registers, shared memory and spills, which `resources` reads.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

from impls.cuda.runtime.launch import KernelSource

ARCHITECTURES = ("sm_80", "sm_90")  # A100 and H100/H200: the GPUs FlashAttention-2 and -3 target
BASE_OPTIONS = ("-std=c++17",)  # no --use_fast_math: exact expf and IEEE division, as the tolerance model assumes


class NvrtcUnavailable(RuntimeError):
    """No NVRTC (or no CUDA headers) on this machine."""


class CompileError(RuntimeError):
    """NVRTC rejected the source; the message is its log."""


def include_dirs() -> tuple[str, ...]:
    """CUDA header directories: the pip toolkit wheels first, then a CUDA installation."""
    found = []
    for package in ("nvidia.cuda_runtime", "nvidia.cuda_nvcc"):
        try:
            spec = importlib.util.find_spec(package)
        except ModuleNotFoundError:
            spec = None
        for root in (spec.submodule_search_locations or []) if spec else []:
            found.append(Path(root) / "include")
    for root in (os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            found.append(Path(root) / "include")
    return tuple(dict.fromkeys(str(d) for d in found if (d / "cuda_fp16.h").is_file() or (d / "crt").is_dir()))


def options(arch: str | None = None) -> tuple[str, ...]:
    """The options the launcher gives NVRTC (and CuPy's RawModule): ours, the include directories, the arch."""
    chosen = BASE_OPTIONS + tuple(f"-I{d}" for d in include_dirs())
    return chosen + ((f"-arch={arch}",) if arch else ())


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel on one architecture."""

    kernel: str
    arch: str
    registers: int
    shared_bytes: int  # static shared memory (dynamic shared memory is a launch parameter)
    spill_stores: int
    spill_loads: int
    stack_bytes: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError as exc:
        raise NvrtcUnavailable(f"NVRTC needs cupy-cuda12x and nvidia-cuda-nvrtc-cu12 ({exc})") from None
    return nvrtc


def version() -> str:
    """NVRTC's version, e.g. "12.9"."""
    nvrtc = _nvrtc()
    try:
        major, minor = nvrtc.getVersion()
    except Exception as exc:  # the library itself is missing or cannot be loaded
        raise NvrtcUnavailable(f"NVRTC could not be loaded: {exc}") from None
    return f"{major}.{minor}"


def compile_kernel(kernel: KernelSource, arch: str) -> tuple[bytes, dict[str, str], str]:
    """The cubin, each entry's lowered (mangled) name, and NVRTC's log (ptxas -v included)."""
    nvrtc = _nvrtc()
    source = kernel.text()  # a missing file is the kernel's error, not NVRTC's
    try:
        program = nvrtc.createProgram(source, kernel.path.name, [], [])
    except Exception as exc:
        raise NvrtcUnavailable(f"NVRTC could not be loaded: {exc}") from None
    for entry in kernel.entries:
        nvrtc.addNameExpression(program, entry)
    try:
        nvrtc.compileProgram(program, list(options(arch)) + ["-Xptxas=-v"])
    except nvrtc.NVRTCError:
        raise CompileError(nvrtc.getProgramLog(program)) from None
    lowered = {entry: nvrtc.getLoweredName(program, entry) for entry in kernel.entries}
    return nvrtc.getCUBIN(program), lowered, nvrtc.getProgramLog(program)


_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>\w+)'")
_NUMBERS = {
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "registers": re.compile(r"Used (\d+) registers"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
}


def resources(kernel: KernelSource, arch: str) -> list[Resources]:
    """ptxas's resource report for every entry of `kernel` on `arch`, by name expression."""
    _, lowered, log = compile_kernel(kernel, arch)
    by_mangled = {mangled: entry for entry, mangled in lowered.items()}
    starts = list(_ENTRY.finditer(log))
    ends = [m.start() for m in starts[1:]] + [len(log)]
    sections = [(m, log[m.end():end]) for m, end in zip(starts, ends, strict=True)]
    found = []
    for match, body in sections:
        if match["name"] not in by_mangled:
            continue
        numbers = {key: int(m.group(1)) if (m := pattern.search(body)) else 0 for key, pattern in _NUMBERS.items()}
        found.append(Resources(by_mangled[match["name"]], match["arch"], **numbers))
    return found
