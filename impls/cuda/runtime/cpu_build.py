"""Building a .cu file for the CPU with g++ against impls/cuda/cpu/cuda_cpu.h, cached by source hash.

The kernel source is compiled as written with one textual change, the only CUDA construct a macro cannot
express: a line `extern __shared__ T name[];` becomes `T* name = (T*)cuda_cpu::dynamic_shared();` (same line,
so file:line in diagnostics and sanitizer reports are the original's). A generated table maps each entry (a
name expression, as CuPy and NVRTC take it) to a launch function.

Flavours:
- "plain": a shared library for ctypes; a block's threads run as fibers, shared memory is poisoned with NaN;
- "synccheck": the plain code as a standalone driver (impls/cuda/cpu/driver.cpp), for barrier diagnostics;
- "memcheck": the driver under AddressSanitizer (buffers allocated to their exact size);
- "racecheck": the driver under ThreadSanitizer, which keeps one thread state per fiber and sees only the
  kernel's own accesses and the happens-before edges its barriers make (impls/cuda/cpu/runtime.cpp);
- "overflowcheck": the driver under UBSan's signed-integer-overflow check, aborting at the first report.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from impls.cuda.runtime.launch import KernelSource

RUNTIME_DIR = Path(__file__).parents[1] / "cpu"
PROJECT = Path(__file__).resolve().parents[3]  # the kernels of impls/cuda/kernels are named relative to it
_RUNTIME_FILES = ("cuda_cpu.h", "runtime.cpp", "driver.cpp", "include/cuda_fp16.h", "include/cuda_bf16.h",
                  "include/mma.h")
_COMMON = ("-std=c++20", "-fno-strict-aliasing", "-Wno-unknown-pragmas", "-pthread")
FLAVOURS: dict[str, tuple[str, ...]] = {
    "plain": ("-O2", "-fPIC", "-shared"),
    "synccheck": ("-O2",),
    "memcheck": ("-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address", "-DCUDA_CPU_SANITIZED",
                 "-DCUDA_CPU_ASAN"),
    "racecheck": ("-O1", "-g", "-fsanitize=thread", "-DCUDA_CPU_SANITIZED", "-DCUDA_CPU_TSAN"),
    "overflowcheck": ("-O1", "-g", "-fsanitize=signed-integer-overflow", "-fno-sanitize-recover=all"),
}
_DYNAMIC_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?(?P<type>[\w:]+(?:\s+[\w:]+)*?)"
    r"\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?(?P<name>\w+)\s*\[\s*\]\s*;")


class CpuBuildUnavailable(RuntimeError):
    """No C++20 compiler here."""


class CpuBuildError(RuntimeError):
    """g++ rejected the kernel; the message holds its errors."""


def compiler() -> str:
    return os.environ.get("CXX", "g++")


def compiler_unavailable() -> str | None:
    """Why kernels cannot be executed on this CPU, or None."""
    if shutil.which(compiler()) is None:
        return f"no C++ compiler ({compiler()} is not on PATH): CUDA kernels cannot be executed on the CPU"
    return None


def cache_dir() -> Path:
    root = os.environ.get("ATTN_CUDA_CPU_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return Path(root) / "attention-spec" / "cuda-cpu"


def rewrite_dynamic_shared(source: str) -> str:
    """The one textual change: `extern __shared__ T name[];` -> a pointer to the launch's dynamic shared buffer."""
    return _DYNAMIC_SHARED.sub(
        lambda m: f"{m['type']}* {m['name']} = reinterpret_cast<{m['type']}*>(cuda_cpu::dynamic_shared());",
        source)


def _shown_path(path: Path) -> str:
    """The kernel's path in diagnostics and in the build's key: relative to the project for its own kernels, so
    that every clone and worktree of it shares one build (an absolute path made each fresh clone build anew)."""
    path = path.resolve()
    return str(path.relative_to(PROJECT)) if path.is_relative_to(PROJECT) else str(path)


def translation_unit(kernel: KernelSource) -> str:
    """The kernel, rewritten, with the launch table over its entries."""
    table = ",\n    ".join(f"&cuda_cpu::invoke<&{entry}>" for entry in kernel.entries)
    return (f"#line 1 \"{_shown_path(kernel.path)}\"\n{rewrite_dynamic_shared(kernel.text())}\n"
            "#line 1 \"cuda_cpu_launch_table\"\n"
            f"static const cuda_cpu::Invoke cuda_cpu_entries[] = {{\n    {table}\n}};\n"
            "extern \"C\" int cuda_cpu_launch(int entry, const unsigned* grid, const unsigned* block,\n"
            "                               std::size_t shared, void** params, std::uint64_t first,\n"
            "                               std::uint64_t count, char* diagnostics, std::size_t size) {\n"
            f"    if (entry < 0 || entry >= {len(kernel.entries)}) return -1;\n"
            "    return cuda_cpu_run(cuda_cpu_entries[entry], grid, block, shared, params, first, count,\n"
            "                        diagnostics, size);\n"
            "}\n")


def _key(kernel: KernelSource, flavour: str) -> str:
    digest = hashlib.sha256()
    for part in (translation_unit(kernel), flavour, " ".join(_COMMON + FLAVOURS[flavour]), compiler(),
                 *((RUNTIME_DIR / f).read_text() for f in _RUNTIME_FILES)):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def build(kernel: KernelSource, flavour: str) -> Path:
    """The built library ("plain") or driver executable (the checks) for `kernel`, from the cache if there."""
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}; valid: {', '.join(FLAVOURS)}")
    unavailable = compiler_unavailable()
    if unavailable:
        raise CpuBuildUnavailable(unavailable)
    suffix = ".so" if flavour == "plain" else ""
    target = cache_dir() / f"{kernel.name}-{flavour}-{_key(kernel, flavour)}{suffix}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        unit = Path(work) / f"{kernel.name}.cpp"
        unit.write_text(translation_unit(kernel))
        sources = [str(unit), str(RUNTIME_DIR / "runtime.cpp")]
        if flavour != "plain":
            sources.append(str(RUNTIME_DIR / "driver.cpp"))
        built = Path(work) / target.name
        command = [compiler(), *_COMMON, *FLAVOURS[flavour], "-include", str(RUNTIME_DIR / "cuda_cpu.h"),
                   "-I", str(RUNTIME_DIR / "include"), "-I", str(kernel.path.parent), *sources, "-o", str(built)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.splitlines()
            raise CpuBuildError(f"g++ could not build {kernel.path.name} ({flavour}):\n" + "\n".join(errors[:12]))
        os.replace(built, target)  # atomic: concurrent builders of the same key agree
    return target
