"""Every CUDA kernel the project compiles, in one list: the report's `kernels` section (ptxas resources per
architecture) and tools/gpu-check (sanitizers, benchmarks) read it.

Add a kernel here when its .cu file lands; tests/unit/test_kernel_resources.py fails while a file under
impls/cuda/kernels/ is missing from KERNELS.
"""

from __future__ import annotations

from pathlib import Path

import impls.seeds.seed_code
from impls.cuda import cuda_flash_simt, cuda_flash_wmma, cuda_paged_decode
from impls.cuda.cuda_seed002_kernels import NAIVE, SHARED_MEMORY
from impls.cuda.runtime.launch import KERNEL_DIR, KernelSource

SEED_DIR = Path(impls.seeds.seed_code.__file__).parent / "cuda"

# impls/cuda/kernels/: the project's own kernels, as their records launch them
PROJECT: tuple[KernelSource, ...] = (cuda_flash_simt.KERNEL, cuda_flash_wmma.KERNEL, cuda_paged_decode.KERNEL)

# The seed 002 kernels repaired so that they compile and run (their records launch these).
SEED_REPAIRED: tuple[KernelSource, ...] = (NAIVE, SHARED_MEMORY)

# The seed 002 kernels verbatim (§ 3.2.2, § 3.2.4): compiled as written, so their compile errors are reported.
SEED_AS_WRITTEN: tuple[KernelSource, ...] = (
    KernelSource(SEED_DIR / "seed002_attention_kernel.cu", ("attention_kernel",)),
    KernelSource(SEED_DIR / "seed002_optimized_attention_kernel.cu", ("optimized_attention_kernel",)),
)

KERNELS: tuple[KernelSource, ...] = PROJECT + SEED_REPAIRED + SEED_AS_WRITTEN


def uncatalogued(directory: Path = KERNEL_DIR) -> list[str]:
    """The .cu files under `directory` that KERNELS does not list."""
    listed = {kernel.path.resolve() for kernel in KERNELS}
    return sorted(path.name for path in directory.glob("*.cu") if path.resolve() not in listed)
