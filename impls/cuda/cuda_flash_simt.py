"""A FlashAttention-2 style forward kernel on CUDA cores (impls/cuda/kernels/flash_simt.cu), as records of
CONTRACT 1: `cuda-flash-simt` (top-left causal alignment) and `cuda-flash-simt-bottom-right`, each on the
device and on the CPU (impls/cuda/cuda_records.py). The kernel takes the alignment as an offset, so both records
run the same code."""

from __future__ import annotations

import numpy as np

from impls.cuda.cuda_records import cuda_records
from impls.cuda.geometry import TileGeometry
from impls.cuda.runtime.execute import execute
from impls.cuda.runtime.launch import KERNEL_DIR, KernelSource, Launch
from specs.score_mods import causal_window, check_score_mods
from specs.validation import AttentionInputError, AttentionShape, check_causal, check_mask, check_shapes, resolve_scale

KERNEL = KernelSource(KERNEL_DIR / "flash_simt.cu", ("flash_forward<float>", "flash_forward<__half>"))
STORAGE = {np.dtype(np.float32): "float", np.dtype(np.float16): "__half"}
MAX_DIM = 256  # the kernel's register accumulators cover 8 columns per lane
MAX_WARPS, ROWS_PER_WARP, BLOCK_COLS = 4, 4, 32  # the kernel's constants
MAX_GRID_YZ = 65535
# lane j owns output columns j, j + 32, ...: one column up to d_v = 32, all eight register chunks at 256
HEAD_DIM_CLASSES = (32, MAX_DIM)


def check_inputs(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> AttentionShape:
    """The protocol's shape rules plus the kernels': float32 or float16, one dtype, head dims <= 256."""
    shape = check_shapes(q, k, v, finite=False)
    if q.dtype not in STORAGE:
        raise AttentionInputError(f"q has dtype {q.dtype}; these kernels take float32 or float16")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise AttentionInputError(f"q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    for name, size in (("d", shape.d), ("d_v", shape.d_v)):
        if size > MAX_DIM:
            raise AttentionInputError(f"{name}={size} exceeds the kernel's maximum head dimension {MAX_DIM}")
    for name, size in (("heads", shape.heads), ("batch", shape.batch)):
        if size > MAX_GRID_YZ:
            raise AttentionInputError(f"{name}={size} exceeds the grid's limit of {MAX_GRID_YZ} blocks")
    return shape


def mask_arguments(mask: np.ndarray | None, shape: AttentionShape) -> tuple[np.ndarray | np.generic, ...]:
    """(has_mask, mask as uint8, strides for batch, head, row, key): a broadcast dimension has stride 0;
    without a mask a one-byte dummy."""
    if check_mask(mask, shape) is None:
        return (np.uint8([0]), np.int32(0)) + (np.int32(0),) * 4
    full = np.ascontiguousarray(mask.reshape((1,) * (4 - mask.ndim) + mask.shape), dtype=np.uint8)
    if full.size >= 2**31:
        raise AttentionInputError(f"mask of {full.size} elements is past the kernel's int32 strides")
    strides = tuple(np.int32(0 if size == 1 else stride) for size, stride in zip(full.shape, full.strides,
                                                                                 strict=True))
    return (full, np.int32(1)) + strides


def flash_simt(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float | None = None, causal: bool = False,
               mask: np.ndarray | None = None, return_lse: bool = False, causal_alignment: str = "top_left",
               window_size: tuple[int, int] | None = None, softcap: float = 0.0, executor: str,
               kernel: KernelSource = KERNEL):
    """Attention by flash_simt.cu (or a copy of it with the same parameters, `kernel`); (out, lse) with
    return_lse, lse float32 (natural log, -inf: no key). The window and the cap as the protocol defines them
    (specs.score_mods), in the alignment's offset; causal is the window's right bound 0."""
    shape = check_inputs(q, k, v)
    check_causal(causal, causal_alignment)
    mods = check_score_mods(shape, window_size=window_size, softcap=softcap)
    left, right = causal_window(mods.window, bool(causal)) or (-1, -1)
    s = resolve_scale(scale, shape.d)
    mask_array, has_mask, *mask_strides = mask_arguments(mask, shape)
    offset = 0 if causal_alignment == "top_left" else shape.n_k - shape.n_q
    out = np.full(shape.out_shape, np.nan, dtype=q.dtype)  # NaN: an element the kernel does not write shows
    lse = np.full(shape.out_shape[:3], np.nan, dtype=np.float32)
    warps = min(MAX_WARPS, -(-shape.n_q // ROWS_PER_WARP))  # no idle warps for a short query
    rows = warps * ROWS_PER_WARP
    launch = Launch(
        entry=f"flash_forward<{STORAGE[q.dtype]}>",
        grid=(-(-shape.n_q // rows), shape.heads, shape.batch),
        block=(32 * warps, 1, 1),
        shared_bytes=4 * (rows * shape.d + BLOCK_COLS * (shape.d + 1) + BLOCK_COLS * shape.d_v),
        args=(*(np.ascontiguousarray(x) for x in (q, k, v)), out, lse, mask_array,
              *(np.int32(n) for n in (shape.heads, shape.heads_kv, shape.n_q, shape.n_k, shape.d, shape.d_v)),
              np.float32(s), np.float32(mods.softcap), np.int32(offset), np.int32(left), np.int32(right), has_mask,
              *mask_strides),
    )
    result = execute(kernel, launch, executor)
    return (result[3], result[4]) if return_lse else result[3]


def flash_simt_top_left(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float | None = None,
                        causal: bool = False, mask: np.ndarray | None = None, return_lse: bool = False,
                        window_size: tuple[int, int] | None = None, softcap: float = 0.0, executor: str):
    """flash_simt.cu, top-left causal alignment (query i sees keys j <= i)."""
    return flash_simt(q, k, v, scale=scale, causal=causal, mask=mask, return_lse=return_lse,
                      causal_alignment="top_left", window_size=window_size, softcap=softcap, executor=executor)


def flash_simt_bottom_right(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, scale: float | None = None,
                            causal: bool = False, mask: np.ndarray | None = None, return_lse: bool = False,
                            window_size: tuple[int, int] | None = None, softcap: float = 0.0, executor: str):
    """flash_simt.cu, bottom-right causal alignment (query i sees keys j <= i + n_k - n_q)."""
    return flash_simt(q, k, v, scale=scale, causal=causal, mask=mask, return_lse=return_lse,
                      causal_alignment="bottom_right", window_size=window_size, softcap=softcap, executor=executor)


# blocks of up to MAX_WARPS * ROWS_PER_WARP rows of one head; K/V tiles of BLOCK_COLS keys whatever the head dim
GEOMETRY = TileGeometry(dict.fromkeys(HEAD_DIM_CLASSES, BLOCK_COLS), MAX_WARPS * ROWS_PER_WARP)
CAPABILITIES = dict(lse=True, fused=True, geometry=GEOMETRY)
flash_simt_on_device, flash_simt_on_cpu = cuda_records(
    "flash-simt", flash_simt_top_left, causal_alignment="top_left", dtypes=("float32", "float16"), **CAPABILITIES)
# The alignment is one integer offset whatever the storage type: the bottom-right records run float32 only (the
# float16 entry is the top-left records' and tests/unit/test_cuda_kernels_simt.py's), which keeps a CPU variant,
# about 45 s of the main job, out of it.
flash_simt_bottom_right_on_device, flash_simt_bottom_right_on_cpu = cuda_records(
    "flash-simt-bottom-right", flash_simt_bottom_right, causal_alignment="bottom_right", dtypes=("float32",),
    **CAPABILITIES)
