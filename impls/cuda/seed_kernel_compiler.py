"""Compiling the seed 002 kernels as written (§ 3.2.2 and § 3.2.4, verbatim in impls/seeds/seed_code/cuda/) with
whichever CUDA compilers this machine has: NVRTC with the launcher's options (impls/cuda/runtime/nvrtc.py) and nvcc.
Neither needs a GPU.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import impls.seeds.seed_code
from impls.cuda.runtime import nvrtc
from impls.cuda.runtime.launch import KernelSource

_SEED_KERNELS = Path(impls.seeds.seed_code.__file__).parent / "cuda"
KERNELS = {
    "attention_kernel": _SEED_KERNELS / "seed002_attention_kernel.cu",
    "optimized_attention_kernel": _SEED_KERNELS / "seed002_optimized_attention_kernel.cu",
}
ARCH = "compute_90"  # nvcc's target: Hopper, the lent GPU's architecture; any would do for a compile check


class CompilerUnavailable(RuntimeError):
    """This machine has no such CUDA compiler."""


def _nvrtc(source: Path, name: str) -> str | None:
    try:
        nvrtc.compile_kernel(KernelSource(source, (name,)), nvrtc.ARCHITECTURES[-1])
    except nvrtc.NvrtcUnavailable as exc:
        raise CompilerUnavailable(str(exc)) from None
    except nvrtc.CompileError as exc:
        return str(exc)
    return None


def _nvcc(source: Path, name: str) -> str | None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CompilerUnavailable("nvcc is not on PATH")
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / f"{name}.cu"
        path.write_text(source.read_text())
        done = subprocess.run([nvcc, "--ptx", f"-arch={ARCH}", str(path), "-o", str(path.with_suffix(".ptx"))],
                              capture_output=True, text=True, timeout=300)
    return None if done.returncode == 0 else done.stderr


COMPILERS = {"nvrtc": _nvrtc, "nvcc": _nvcc}


def compile_kernel(name: str, compiler: str) -> str | None:
    """Compile a seed kernel as written; None on success, else the compiler's log."""
    return COMPILERS[compiler](KERNELS[name], name)
