"""The GPU limits seed 002 § 3.2.1 records (32 KB of registers, 48 KB of shared memory), as the CUDA
toolchain and the device at hand state them.

ptxas knows each architecture's limits without a GPU. Asked to fit a kernel that wants more
registers than it can have into 1024-thread blocks (`__launch_bounds__(1024, 1)`), it gives
each thread its share of what one block may hold (it spills the rest). A kernel declaring
48 KB + 4 bytes of static shared memory it rejects, naming the per-block limit. On a GPU,
torch.cuda.get_device_properties reports the device's register file and per-block shared memory.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from impls.cuda.seed_kernel_compiler import CompilerUnavailable

BLOCK_THREADS = 1024
PTX_ARCH = "compute_75"  # the oldest architecture current toolkits build for; ptxas takes its PTX for every later one
REGISTER_HUNGRY = r"""
extern "C" __global__ void __launch_bounds__(1024, 1) hungry(const float* in, float* out) {
    float acc[96];
    #pragma unroll
    for (int i = 0; i < 96; i++) acc[i] = in[threadIdx.x + i * 1024];
    #pragma unroll
    for (int r = 0; r < 8; r++) {
        #pragma unroll
        for (int i = 0; i < 96; i++) acc[i] = acc[i] * acc[(i + r + 1) % 96] + 1.0f;
    }
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < 96; i++) s += acc[i] * (float)i;
    out[threadIdx.x] = s;
}
"""
SHARED_PROBE_BYTES = 48 * 1024 + 4
STATIC_SHARED = r"""
extern "C" __global__ void staged(const float* in, float* out) {
    __shared__ float tile[FLOATS];
    for (int i = threadIdx.x; i < FLOATS; i += blockDim.x) tile[i] = in[i];
    __syncthreads();
    out[threadIdx.x] = tile[(FLOATS - 1 - threadIdx.x) % FLOATS];
}
""".replace("FLOATS", str(SHARED_PROBE_BYTES // 4))


class DeviceUnavailable(RuntimeError):
    """No CUDA device (or no torch that can describe one) here."""


@dataclass(frozen=True)
class DeviceLimits:
    name: str
    arch: str
    registers_per_sm: int  # 32-bit registers
    shared_memory_per_block: int  # bytes a block gets without opting in


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise CompilerUnavailable(f"{name} is not on PATH")
    return path


def architectures() -> tuple[str, ...]:
    """The real architectures (sm_XX) this toolkit's nvcc can build for."""
    listed = subprocess.run([_tool("nvcc"), "--list-gpu-code"], capture_output=True, text=True, timeout=60)
    return tuple(code for code in listed.stdout.split() if re.fullmatch(r"sm_\d+", code))


def _ptxas_logs(source: str) -> dict[str, str]:
    """ptxas -v's log (stdout and stderr) for `source` on every architecture."""
    ptxas, logs = _tool("ptxas"), {}
    with tempfile.TemporaryDirectory() as work:
        cu, ptx = Path(work) / "probe.cu", Path(work) / "probe.ptx"
        cu.write_text(source)
        subprocess.run([_tool("nvcc"), "--ptx", f"-arch={PTX_ARCH}", str(cu), "-o", str(ptx)],
                       check=True, capture_output=True, timeout=300)
        for arch in architectures():
            done = subprocess.run([ptxas, "-v", f"-arch={arch}", str(ptx), "-o", str(Path(work) / f"{arch}.cubin")],
                                  capture_output=True, text=True, timeout=300)
            logs[arch] = done.stdout + done.stderr
    return logs


def registers_per_thread() -> dict[str, int]:
    """Registers ptxas gives each thread of a 1024-thread block of a register-hungry kernel, per architecture."""
    return {arch: int(re.search(r"Used (\d+) registers", log).group(1))
            for arch, log in _ptxas_logs(REGISTER_HUNGRY).items()}


def static_shared_limits() -> dict[str, int | None]:
    """The static shared memory per block ptxas allows, per architecture (None: it accepted SHARED_PROBE_BYTES)."""
    limits = {}
    for arch, log in _ptxas_logs(STATIC_SHARED).items():
        found = re.search(r"too much shared data \(0x[0-9a-f]+ bytes, (0x[0-9a-f]+) max\)", log)
        limits[arch] = int(found.group(1), 16) if found else None
    return limits


def device_limits() -> DeviceLimits:
    """What torch says about CUDA device 0."""
    try:
        import torch
    except ImportError as exc:
        raise DeviceUnavailable(f"reading the device's limits needs torch ({exc})") from None
    if not torch.cuda.is_available():
        raise DeviceUnavailable("no CUDA device here")
    props = torch.cuda.get_device_properties(0)
    missing = [a for a in ("regs_per_multiprocessor", "shared_memory_per_block") if not hasattr(props, a)]
    if missing:
        raise DeviceUnavailable(f"torch {torch.__version__} does not report {', '.join(missing)}")
    return DeviceLimits(props.name, f"sm_{props.major}{props.minor}", props.regs_per_multiprocessor,
                        props.shared_memory_per_block)
