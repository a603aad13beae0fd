"""Seed 002 § 3.2: the hardware-facing code that is not itself an attention implementation.

MemoryAwareAttention (§ 3.2.1) as written; the CUDA kernels of § 3.2.2 and
§ 3.2.4 live verbatim in impls/cuda/ and are compiled by `compile_kernel` with
whichever CUDA compilers this machine has: NVRTC (the compiler CuPy's
RawKernel uses, through cupy-cuda12x[ctk]) and nvcc. Neither needs a GPU.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

KERNELS = {
    "attention_kernel": Path(__file__).with_name("cuda") / "seed002_attention_kernel.cu",
    "optimized_attention_kernel": Path(__file__).with_name("cuda") / "seed002_optimized_attention_kernel.cu",
}
ARCH = "compute_90"  # Hopper, the lent GPU's architecture; any would do for a compile check


class MemoryAwareAttention:
    def __init__(self, d_model, seq_len, device='cuda'):
        self.d_model = d_model
        self.seq_len = seq_len
        self.device = device

        # GPU内存大小分析
        self.register_size = 32 * 1024  # 32KB寄存器
        self.shared_memory_size = 48 * 1024  # 48KB共享内存
        self.global_memory_bandwidth = 900  # GB/s

    def analyze_memory_footprint(self, q, k, v):
        """分析内存占用"""
        q_size = q.numel() * 4  # 假设float32
        k_size = k.numel() * 4
        v_size = v.numel() * 4
        attention_matrix_size = q.shape[0] * q.shape[1] * k.shape[1] * 4

        total_size = q_size + k_size + v_size + attention_matrix_size

        print(f"Query内存: {q_size/1024/1024:.2f} MB")
        print(f"Key内存: {k_size/1024/1024:.2f} MB")
        print(f"Value内存: {v_size/1024/1024:.2f} MB")
        print(f"注意力矩阵: {attention_matrix_size/1024/1024:.2f} MB")
        print(f"总计内存: {total_size/1024/1024:.2f} MB")

        return total_size


class CompilerUnavailable(RuntimeError):
    """This machine has no such CUDA compiler."""


def _nvrtc(source: str, name: str) -> str | None:
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError as exc:
        raise CompilerUnavailable(f"NVRTC needs cupy-cuda12x[ctk] ({exc})") from None
    try:
        program = nvrtc.createProgram(source, f"{name}.cu", [], [])
    except Exception as exc:  # the NVRTC library itself is missing
        raise CompilerUnavailable(f"NVRTC could not be loaded: {exc}") from None
    try:
        nvrtc.compileProgram(program, [f"-arch={ARCH}"])
    except nvrtc.NVRTCError:
        return nvrtc.getProgramLog(program)
    return None


def _nvcc(source: str, name: str) -> str | None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CompilerUnavailable("nvcc is not on PATH")
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / f"{name}.cu"
        path.write_text(source)
        done = subprocess.run([nvcc, "--ptx", f"-arch={ARCH}", str(path), "-o", str(path.with_suffix(".ptx"))],
                              capture_output=True, text=True, timeout=300)
    return None if done.returncode == 0 else done.stderr


COMPILERS = {"nvrtc": _nvrtc, "nvcc": _nvcc}


def compile_kernel(name: str, compiler: str) -> str | None:
    """Compile a seed kernel as written; None on success, else the compiler's log."""
    return COMPILERS[compiler](KERNELS[name].read_text(), name)
