"""Running a kernel launch on this CPU (impls/cuda/cpu): in process through ctypes, or as a standalone driver
process under a checker (barriers, AddressSanitizer, ThreadSanitizer, UBSan), fed the same arguments.

Either way every array argument the kernel gets is copied first, so the caller's arrays are never written (as
with a copy to a device), and the arguments after the launch come back.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from impls.cuda.runtime.cpu_build import build
from impls.cuda.runtime.launch import KernelSource, Launch

CHECKERS = ("synccheck", "memcheck", "racecheck", "overflowcheck")
_SCALARS = {np.dtype(np.int32): (ctypes.c_int32, "i32"), np.dtype(np.int64): (ctypes.c_int64, "i64"),
            np.dtype(np.float32): (ctypes.c_float, "f32")}
_SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=66",
    "TSAN_OPTIONS": "halt_on_error=1:exitcode=66:report_signal_unsafe=0",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=66",
}
_REPORT_START = re.compile(r"^(==\d+==ERROR: AddressSanitizer|WARNING: ThreadSanitizer|.*runtime error:)", re.M)


class KernelLaunchError(RuntimeError):
    """The launch could not run: an invalid configuration, or a deadlock between the block's threads."""


class KernelDefect(AssertionError):
    """A checker found a defect in the kernel: its report (sanitizer output or barrier diagnostics)."""

    def __init__(self, checker: str, kernel: str, entry: str, report: str):
        self.checker, self.kernel, self.entry, self.report = checker, kernel, entry, report
        super().__init__(f"{checker} on {kernel} ({entry}):\n{report}")


@dataclass(frozen=True)
class CpuRun:
    args: tuple[np.ndarray | np.generic, ...]
    diagnostics: tuple[str, ...]  # barrier divergence found while the launch completed


def _copies(launch: Launch, unbacked: frozenset[int] = frozenset()) -> list[np.ndarray | np.generic]:
    """The launch's arguments, each array copied, but those in `unbacked` (never read or written: passed as is)."""
    copied = []
    for i, arg in enumerate(launch.args):
        if isinstance(arg, np.ndarray):
            copied.append(arg if i in unbacked else np.array(arg, order="C", copy=True))
        elif arg.dtype in _SCALARS:
            copied.append(arg)
        else:
            raise TypeError(f"{launch.entry}: argument {i} is a {arg.dtype} scalar; kernels take np.int32, "
                            "np.int64 or np.float32 values")
    return copied


@functools.cache
def _library(kernel: KernelSource) -> ctypes.CDLL:
    library = ctypes.CDLL(str(build(kernel, "plain")))
    library.cuda_cpu_launch.restype = ctypes.c_int
    library.cuda_cpu_launch.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                                        ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                                        ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t]
    return library


def _entry_index(kernel: KernelSource, launch: Launch) -> int:
    if launch.entry not in kernel.entries:
        raise ValueError(f"{kernel.name} has no entry {launch.entry!r}; entries: {', '.join(kernel.entries)}")
    return kernel.entries.index(launch.entry)


def run_on_cpu(kernel: KernelSource, launch: Launch) -> tuple[np.ndarray | np.generic, ...]:
    """The launch in this process (fibers, the plain build); raises KernelLaunchError if it cannot complete."""
    return run_on_cpu_with_diagnostics(kernel, launch).args


def run_on_cpu_with_diagnostics(kernel: KernelSource, launch: Launch, first_block: int = 0,
                                block_count: int = 0) -> CpuRun:
    index = _entry_index(kernel, launch)
    args = _copies(launch)
    holders = [ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else _SCALARS[a.dtype][0](a.item())
               for a in args]
    params = (ctypes.c_void_p * max(len(holders), 1))(*[ctypes.addressof(h) for h in holders])
    diagnostics = ctypes.create_string_buffer(1 << 16)
    status = _library(kernel).cuda_cpu_launch(
        index, (ctypes.c_uint * 3)(*launch.grid), (ctypes.c_uint * 3)(*launch.block), launch.shared_bytes, params,
        first_block, block_count, diagnostics, len(diagnostics))
    lines = tuple(diagnostics.value.decode(errors="replace").splitlines())
    if status != 0:
        raise KernelLaunchError(f"{kernel.path.name} ({launch.entry}) did not complete on the CPU:\n" +
                                "\n".join(lines))
    return CpuRun(tuple(args), lines)


def run_checked(kernel: KernelSource, launch: Launch, checker: str, *, first_block: int = 0, block_count: int = 0,
                unbacked: frozenset[int] = frozenset(), timeout_s: float = 120.0) -> tuple:
    """The launch in a driver process built for `checker`; raises KernelDefect with the report if the checker
    reports anything (a sanitizer error, or barrier diagnostics for synccheck). Pointer arguments whose
    index is in `unbacked` get a zero-filled 1-element buffer (to run the last blocks of a launch too large
    to hold, for overflowcheck)."""
    if checker not in CHECKERS:
        raise ValueError(f"unknown checker {checker!r}; valid: {', '.join(CHECKERS)}")
    index = _entry_index(kernel, launch)
    driver = build(kernel, checker)
    args = _copies(launch, unbacked)  # an unbacked buffer can be far larger than memory: never touched
    with tempfile.TemporaryDirectory() as work:
        lines = [f"entry {index}", "grid {} {} {}".format(*launch.grid), "block {} {} {}".format(*launch.block),
                 f"shared {launch.shared_bytes}", f"blocks {first_block} {block_count}"]
        paths: dict[int, Path] = {}
        for i, arg in enumerate(args):
            if isinstance(arg, np.ndarray):
                if i in unbacked:
                    lines.append(f"ptr {arg.itemsize} -")
                    continue
                paths[i] = Path(work) / f"arg{i}.bin"
                paths[i].write_bytes(arg.tobytes())
                lines.append(f"ptr {arg.nbytes} {paths[i]}")
            else:
                kind = _SCALARS[arg.dtype][1]
                lines.append(f"{kind} {float(arg).hex() if kind == 'f32' else int(arg)}")
        manifest = Path(work) / "launch.txt"
        manifest.write_text("\n".join(lines) + "\n")
        done = subprocess.run([str(driver), str(manifest)], capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, **_SANITIZER_ENV})
        report = _report(done.stderr, done.returncode, checker)
        if report:
            raise KernelDefect(checker, kernel.path.name, launch.entry, report)
        for i, path in paths.items():
            args[i] = np.frombuffer(path.read_bytes(), dtype=args[i].dtype).reshape(args[i].shape).copy()
    return tuple(args)


def _report(stderr: str, status: int, checker: str) -> str | None:
    """What the driver process reported: a sanitizer report from its first line, the barrier diagnostics
    (synccheck's finding; the other checkers report them only when the launch could not complete), or how it
    died; None for a clean run."""
    found = _REPORT_START.search(stderr)
    if found:
        return _trimmed(stderr[found.start():])
    diagnostics = [line.removeprefix("cuda-cpu: ") for line in stderr.splitlines() if line.startswith("cuda-cpu: ")]
    if diagnostics and (checker == "synccheck" or status != 0):
        return "\n".join(diagnostics)
    if status != 0:
        return _trimmed(stderr) or f"the driver exited with status {status}"
    return None


def _trimmed(report: str, lines: int = 40) -> str:
    kept = report.strip().splitlines()
    return "\n".join(kept[:lines] + ([f"... ({len(kept) - lines} more lines)"] if len(kept) > lines else []))
