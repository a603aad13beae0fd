"""Seed 002 § 3.2.2 and § 3.2.4: the two CUDA kernels, repaired only so that NVRTC compiles them
(impls/cuda/kernels/seed002_*_repaired.cu), as records on a CUDA device and on the CPU.

The seed gives no launch code. Both kernels index q, k, v as (batch, seq_len, d_model) and take one query row
per thread, `seq_idx = blockIdx.y * blockDim.x + threadIdx.x`, so the launch the kernels imply is a grid of
(batch, ceil(seq_len / threads)) blocks of `block_threads` threads. The shared-memory kernel stores, for each
thread, its q row and (one row further) its k row: 2 * block_threads * d_model floats of dynamic shared memory.
Self-attention with one head only: (batch, heads) is flattened into the seed's batch axis, n_q = n_k, d_v = d.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from impls.cuda.cuda_records import cuda_records
from impls.cuda.geometry import TileGeometry
from impls.cuda.runtime.execute import execute
from impls.cuda.runtime.launch import KERNEL_DIR, KernelSource, Launch

NAIVE = KernelSource(KERNEL_DIR / "seed002_attention_kernel_repaired.cu", ("attention_kernel",))
SHARED_MEMORY = KernelSource(KERNEL_DIR / "seed002_optimized_attention_kernel_repaired.cu",
                             ("optimized_attention_kernel",))
DEFAULT_THREADS = 128


def seed_launch(kernel: KernelSource, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                block_threads: int = DEFAULT_THREADS) -> Launch:
    """The launch the seed's indexing implies, over (batch * heads) flattened sequences."""
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"the seed 002 kernels take q, k, v of one shape (self-attention, one head per batch "
                         f"row, d_v = d): got {q.shape}, {k.shape}, {v.shape}")
    if not 1 <= block_threads <= 1024:
        raise ValueError(f"block_threads must be 1..1024 (threads of a CUDA block), got {block_threads}")
    batch, heads, n, d = q.shape
    flat = [np.ascontiguousarray(x, dtype=np.float32).reshape(batch * heads, n, d) for x in (q, k, v)]
    output = np.zeros_like(flat[0])
    scratch = np.zeros(batch * heads * n * n, np.float32) if kernel is NAIVE else np.zeros(1, np.float32)
    shared = 2 * block_threads * d * 4 if kernel is SHARED_MEMORY else 0
    sizes = (np.int32(batch * heads), np.int32(n), np.int32(d))
    return Launch(kernel.entries[0], (batch * heads, -(-n // block_threads), 1), (block_threads, 1, 1), shared,
                  (*flat, output, *sizes, scratch))


def run_seed_kernel(kernel: KernelSource, q: np.ndarray, k: np.ndarray, v: np.ndarray, *,
                    block_threads: int = DEFAULT_THREADS, executor: str) -> np.ndarray:
    """The kernel's output for q, k, v (batch, heads, n, d)."""
    launch = seed_launch(kernel, q, k, v, block_threads)
    return execute(kernel, launch, executor)[3].reshape(v.shape)


def _naive(q, k, v, *, block_threads: int = DEFAULT_THREADS, executor: str):
    return run_seed_kernel(NAIVE, q, k, v, block_threads=block_threads, executor=executor)


def _shared_memory(q, k, v, *, block_threads: int = DEFAULT_THREADS, executor: str):
    return run_seed_kernel(SHARED_MEMORY, q, k, v, block_threads=block_threads, executor=executor)


# one query row per thread, DEFAULT_THREADS rows a block, every key read in one pass (no key tiles)
_SEED_CAPABILITIES = dict(dtypes=("float32",), gqa=False, cross=False, value_dim=False,
                          tile_keywords=("block_threads",), geometry=TileGeometry({64: None}, DEFAULT_THREADS))
naive_kernel_on_device, naive_kernel_on_cpu = cuda_records("seed002-naive-kernel", _naive, **_SEED_CAPABILITIES)
shared_memory_kernel_on_device, shared_memory_kernel_on_cpu = cuda_records(
    "seed002-shared-memory-kernel", _shared_memory, **_SEED_CAPABILITIES)
SEED_RUNS = {"naive": partial(run_seed_kernel, NAIVE), "shared-memory": partial(run_seed_kernel, SHARED_MEMORY)}
