"""Seed 002 § 3.2's hardware Python as written, checked: the memory-footprint formula against the tensors attention
holds (by dtype and layout), the peak memory the "memory-optimised" blockwise classes add as the sequence doubles,
and the "hardware-aware" block size against the device and the shared memory it records."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import pytest
from hypothesis import strategies as st

from harness.api.peak_memory import MeasurementUnavailable, Probe, growth, peak_bytes
from impls.seeds.seed_code.seed002_memory_aware import MemoryAwareAttention

torch = pytest.importorskip("torch", reason="the seed's hardware code works on torch tensors")

from impls.seeds.seed_code.seed002_blockwise import HardwareAwareAttention  # noqa: E402  (needs torch)

Formula = Callable[[object, object, object], int]
SEED_FORMULA: Formula = MemoryAwareAttention(d_model=64, seq_len=64).analyze_memory_footprint
SEED_FLOAT_BYTES = 4  # 假设float32


def attention_tensors(q, k, v) -> dict:
    """The tensors the seed's own three-line attention (seed 000 § 注意力机制的Q、K、V, sqrt_dim = sqrt(d_k))
    holds at once: its inputs, the scores, the softmax weights and the output."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return {"Q": q, "K": k, "V": v, "scores": scores, "weights": weights, "output": torch.matmul(weights, v)}


def footprint_shortfall(formula: Formula, q, k, v) -> str | None:
    """Seed 002 § 3.2.1: how `formula(q, k, v)` misses the bytes the attention tensors take, or None."""
    sizes = {name: t.numel() * t.element_size() for name, t in attention_tensors(q, k, v).items()}
    held, counted = sum(sizes.values()), formula(q, k, v)
    if counted == held:
        return None
    layout = ", ".join(f"{name} {size}" for name, size in sizes.items())
    found = (f"for {str(q.dtype).removeprefix('torch.')} inputs q {tuple(q.shape)}, k {tuple(k.shape)}: the formula "
             f"gives {counted} bytes, the three-line attention holds {held} ({layout})")
    if counted == held - sizes["weights"] - sizes["output"]:
        return (f"{found}: it leaves out the softmax weights (a second n_q x n_k tensor beside the scores) "
                "and the output")
    return found


def dtype_blindness(formula: Formula, shapes: tuple[tuple[int, ...], ...], dtype) -> str | None:
    """A footprint in bytes scales with the element size: `formula` on `dtype` inputs against float32 ones."""
    counted = {t: formula(*(torch.zeros(shape, dtype=t) for shape in shapes)) for t in (dtype, torch.float32)}
    itemsize, float32_size = (torch.empty((), dtype=t).element_size() for t in (dtype, torch.float32))
    if counted[dtype] * float32_size == counted[torch.float32] * itemsize:
        return None
    found = (f"the formula gives {counted[dtype]} bytes for {dtype} inputs of shapes {shapes} and "
             f"{counted[torch.float32]} for float32 ones")
    if counted[dtype] == counted[torch.float32]:
        return f"{found}: it counts 4 bytes per element whatever the dtype ({dtype} takes {itemsize})"
    return found


def layout_mismatch(formula: Formula, q, k, v) -> str | None:
    """[batch, heads, seq, dim] inputs are batch * heads independent (seq, dim) problems: the same tensors
    as the seed's (batch, seq, d_model) convention with batch * heads rows, so the same footprint."""
    counted = formula(q, k, v)
    flat = formula(*(x.reshape(-1, *x.shape[2:]) for x in (q, k, v)))
    if counted == flat:
        return None
    batch, heads = q.shape[:2]
    found = (f"for [batch, heads, seq, dim] inputs q {tuple(q.shape)}, k {tuple(k.shape)}: the formula gives "
             f"{counted} bytes, for the same tensors as (batch * heads, seq, dim) {flat}")
    inputs = sum(x.numel() for x in (q, k, v)) * SEED_FLOAT_BYTES
    if counted - inputs == batch * heads * heads * SEED_FLOAT_BYTES:
        return (f"{found}: its attention matrix q.shape[0] * q.shape[1] * k.shape[1] is batch * heads * heads "
                "here, not batch * heads * seq_q * seq_k")
    return found


def seed_tensors(lead: tuple[int, ...], n_q: int, n_k: int, d: int, dtype=torch.float32):
    return tuple(torch.zeros(lead + (n, d), dtype=dtype) for n in (n_q, n_k, n_k))


SIZES = dict(n_q=st.integers(1, 64), n_k=st.integers(1, 64), d=st.integers(1, 32))


# Peak memory of one call as seq doubles (batch 1, one head, d = 16: the seq x seq float32 matrix, 16 MB
# then 64 MB, dominates whatever else a call holds). A call holding O(seq) grows 2x, one holding the
# matrix 4x; the midpoint 3 separates them. The control, numpy-tiled with 256-row query blocks against
# all keys at once (256 x seq scores), is linear by construction: measured the same way it must stay
# below 3, or the measurement cannot tell the two apart here.
MEMORY_SEQ = (2048, 4096)
QUADRATIC_GROWTH = 3.0
CONTROL = Probe("impls.numpy.numpy_tiled:tiled_attention", MEMORY_SEQ,
                kwargs={"block_rows": 256, "block_cols": 1 << 20})


BLOCKWISE = {
    "MemoryOptimizedAttention.tiled_attention": Probe("impls.seeds.seed002_tiled:memory_optimized_tiled_attention",
                                                      MEMORY_SEQ),
    "HardwareAwareAttention.hardware_optimized_attention": Probe("impls.seeds.seed002_tiled:hardware_aware_attention",
                                                                 MEMORY_SEQ),
}


def quadratic_memory(name: str, extra: tuple[int, ...], control_growth: float) -> str | None:
    """Seed 002 § 3.2.3 (分块注意力计算，优化内存访问): why `extra` (bytes a call added at its peak, per
    MEMORY_SEQ) is not linear in seq, or None; `control_growth` is the linear control's, for the message."""
    if growth(extra) < QUADRATIC_GROWTH:
        return None
    return (f"peak memory of {name} grows {growth(extra):.2f}x when seq doubles from {MEMORY_SEQ[0]} to "
            f"{MEMORY_SEQ[-1]} ({extra[0]} -> {extra[-1]} bytes; the linear control {control_growth:.2f}x): "
            "it grows like the seq x seq attention_matrix the loop fills and returns")


@cache
def blockwise_peaks() -> dict[str, tuple[int, ...]]:
    try:
        return peak_bytes({**BLOCKWISE, "control": CONTROL})
    except MeasurementUnavailable as exc:
        pytest.skip(str(exc))


BLOCK_GRID = tuple((d_model, seq_len) for d_model in (16, 32, 64, 128, 256, 512)
                   for seq_len in (1, 64, 512, 513, 1024, 1025, 4096, 16384))


DEVICES = ("cuda", "cpu")


def hardware_blindness(cls: type = HardwareAwareAttention) -> str | None:
    """Seed 002 § 3.2.5 (根据硬件特性调整参数): None if the 'cuda' and 'cpu' instances, which record different
    hardware, choose different blocks somewhere on BLOCK_GRID; else why the choice ignores the hardware."""
    blocks = {device: [cls(d, n, device=device).calculate_optimal_block_size(d, n) for d, n in BLOCK_GRID]
              for device in DEVICES}
    if blocks["cuda"] != blocks["cpu"]:
        return None
    cuda, cpu = (cls(64, 64, device=device) for device in DEVICES)
    return (f"the 'cuda' instance (warp size {cuda.warp_size}, {cuda.max_shared_memory} bytes of shared memory) "
            f"and the 'cpu' one (warp size {cpu.warp_size}, {cpu.max_shared_memory} bytes) choose the same block "
            f"for all {len(BLOCK_GRID)} (d_model, seq_len) pairs with d_model 16-512 and seq_len 1-16384, "
            "so the hardware parameters are never consulted")


def block_overflow(module, d_model: int, seq_len: int) -> str | None:
    """Why the block `module` chooses does not fit the shared memory it records (float32 Q, K, V), or None.
    A block longer than the sequence holds only seq_len rows."""
    block = module.calculate_optimal_block_size(d_model, seq_len)
    working_set = 3 * min(block, seq_len) * d_model * 4
    if working_set <= module.max_shared_memory:
        return None
    return (f"device={module.device!r}, seq_len={seq_len}, d_model={d_model}: block {block} needs {working_set} "
            f"bytes of Q, K, V, more than the {module.max_shared_memory} bytes of shared memory the class records")
