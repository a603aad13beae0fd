"""The tensor-core FlashAttention forward kernel (impls/cuda/kernels/flash_wmma.cu) as CONTRACT 1 records.

`run` checks the arguments, builds the launch and unpacks it; `flash_wmma_on_device` runs it on a CUDA device
through CuPy and `flash_wmma_on_cpu` runs the same .cu file on this CPU (impls/cuda/cpu). The kernel takes
float16 or bfloat16 q, k, v with head dims that are multiples of 16 up to 256: other head dims up to 256 are
padded with zeros here (a zero column adds exactly 0 to every q.k and gives a zero output column, sliced
off), larger ones are rejected. The default scale is 1/sqrt(d) of the unpadded d.
"""

from __future__ import annotations

import math

import numpy as np

from impls.cuda.cuda_records import cuda_records
from impls.cuda.geometry import TileGeometry
from impls.cuda.runtime.execute import execute
from impls.cuda.runtime.launch import KERNEL_DIR, KernelSource, Launch
from specs.validation import AttentionInputError, check_causal, check_mask, check_shapes, resolve_scale

C_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16"}
HEAD_DIM_CLASSES = (64, 128, 256)  # the kernel's D_MAX template argument: both d and d_v are at most it
HEAD_DIM_STEP = 16  # WMMA tiles are 16 wide
ROWS_PER_BLOCK = 64  # 4 warps of 16 query rows
THREADS = 128
INT32_MAX = 2**31 - 1


def entry(dtype: str, d_max: int) -> str:
    """The kernel's name expression for `dtype` and head-dim class `d_max` (256 is the template default)."""
    return f"flash_wmma<{C_TYPES[dtype]}>" if d_max == 256 else f"flash_wmma<{C_TYPES[dtype]}, {d_max}>"


KERNEL = KernelSource(KERNEL_DIR / "flash_wmma.cu",
                      tuple(entry(dtype, d_max) for dtype in C_TYPES for d_max in HEAD_DIM_CLASSES))


def key_tile(d_max: int) -> int:
    """Keys per K/V tile, as the kernel's Tile<D_MAX>::BC."""
    return 64 if d_max <= 128 else 32


def shared_bytes(d: int, d_v: int, d_max: int) -> int:
    """Dynamic shared memory of one block, region by region as the kernel carves it (each 128-aligned):
    Q, K, V (rows padded by 8 elements), S (rows padded by 4 floats; P lives in it), per-row floats, 4 flags."""
    keys = key_tile(d_max)
    regions = (ROWS_PER_BLOCK * (d + 8) * 2, keys * (d + 8) * 2, keys * (d_v + 8) * 2,
               ROWS_PER_BLOCK * (keys + 4) * 4, ROWS_PER_BLOCK * 4, 4 * 4)
    return sum(-(-size // 128) * 128 for size in regions)


def _dtype_name(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> str:
    names = {getattr(getattr(x, "dtype", None), "name", None) for x in (q, k, v)}
    if len(names) != 1 or not names <= set(C_TYPES):
        found = ", ".join(str(getattr(x, "dtype", type(x).__name__)) for x in (q, k, v))
        raise AttentionInputError(f"flash-wmma takes q, k, v all float16 or all bfloat16; got {found}")
    return names.pop()


def _padded_dim(name: str, size: int) -> int:
    if size > HEAD_DIM_CLASSES[-1]:
        raise AttentionInputError(f"flash-wmma supports head dims up to {HEAD_DIM_CLASSES[-1]} (the output "
                                  f"accumulators of a row tile live in registers); got {name}={size}")
    return -(-size // HEAD_DIM_STEP) * HEAD_DIM_STEP


def _as_kernel_input(x: np.ndarray, width: int) -> np.ndarray:
    """C-contiguous 2-byte elements with the last axis zero-padded to `width`, as uint16 bits."""
    bits = np.ascontiguousarray(x).view(np.uint16)
    if bits.shape[-1] == width:
        return bits
    padded = np.zeros(bits.shape[:-1] + (width,), dtype=np.uint16)
    padded[..., :bits.shape[-1]] = bits
    return padded


def _mask_arguments(mask: np.ndarray | None) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The mask as uint8 bytes (a 1-byte placeholder when absent) and its element strides over
    (batch, heads, n_q, n_k), 0 along the axes it broadcasts."""
    if mask is None:
        return np.ones(1, dtype=np.uint8), (0, 0, 0, 0)
    full = np.ascontiguousarray(mask.reshape((1,) * (4 - mask.ndim) + mask.shape)).view(np.uint8)
    if full.size > INT32_MAX:
        raise AttentionInputError(f"flash-wmma takes masks of up to 2^31 - 1 elements, got {full.size}")
    return full, tuple(0 if n == 1 else s for n, s in zip(full.shape, full.strides, strict=True))


def run(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float | None = None, causal: bool = False,
        mask: np.ndarray | None = None, return_lse: bool = False, executor: str):
    """softmax(scale q k^T) v by the WMMA kernel on `executor`; with return_lse, also the float32 log-sum-exp."""
    return flash_wmma(q, k, v, scale=scale, causal=causal, mask=mask, return_lse=return_lse, executor=executor)


def flash_wmma(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float | None = None, causal: bool = False,
               mask: np.ndarray | None = None, return_lse: bool = False, executor: str,
               kernel: KernelSource = KERNEL):
    """`run` by flash_wmma.cu or by a copy of it with the same entries and parameters (`kernel`)."""
    dtype = _dtype_name(q, k, v)
    shape = check_shapes(q, k, v, finite=False)
    check_causal(causal, "top_left")
    check_mask(mask, shape)
    s = resolve_scale(scale, shape.d)
    d, d_v = _padded_dim("d", shape.d), _padded_dim("d_v", shape.d_v)
    d_max = next(c for c in HEAD_DIM_CLASSES if max(d, d_v) <= c)
    if shape.heads_kv > 65535 or shape.batch > 65535:
        raise AttentionInputError(f"flash-wmma launches (heads_kv, batch) as grid y and z, each at most 65535; "
                                  f"got heads_kv={shape.heads_kv}, batch={shape.batch}")
    mask_bytes, mask_strides = _mask_arguments(mask)
    out = np.zeros((shape.batch, shape.heads, shape.n_q, d_v), dtype=np.uint16)
    lse = np.zeros((shape.batch, shape.heads, shape.n_q), dtype=np.float32)
    blocks = -(-shape.group * shape.n_q // ROWS_PER_BLOCK)
    launch = Launch(
        entry=entry(dtype, d_max), grid=(blocks, shape.heads_kv, shape.batch), block=(THREADS, 1, 1),
        shared_bytes=shared_bytes(d, d_v, d_max),
        args=(_as_kernel_input(q, d), _as_kernel_input(k, d), _as_kernel_input(v, d_v), mask_bytes, out, lse,
              *(np.int32(n) for n in (shape.heads, shape.heads_kv, shape.n_q, shape.n_k, d, d_v)),
              np.float32(s * math.log2(math.e)), np.int32(bool(causal)), np.int32(0), np.int32(mask is not None),
              *(np.int32(n) for n in mask_strides)))
    results = execute(kernel, launch, executor)
    result = np.ascontiguousarray(results[4][..., :shape.d_v]).view(q.dtype)
    return (result, results[5]) if return_lse else result


# a block holds 64 of the group x n_q (query head, position) rows of a kv head; K/V tiles per head-dim class
GEOMETRY = TileGeometry({d_max: key_tile(d_max) for d_max in HEAD_DIM_CLASSES}, ROWS_PER_BLOCK, rows_span_group=True)
flash_wmma_on_device, flash_wmma_on_cpu = cuda_records(
    "flash-wmma", run, dtypes=("float16", "bfloat16"), lse=True, causal_alignment="top_left", fused=True,
    geometry=GEOMETRY)
