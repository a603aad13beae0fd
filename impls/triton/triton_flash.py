"""FlashAttention-2 in Triton (impls/triton/flash_kernels.py): the launches, the checks and autograd; the records
`triton-flash` and `triton-flash-bottom-right` are impls/triton/triton_flash_records.py's.

Seed 000 § Flash Attention: the forward keeps each query row's running maximum and sum over key tiles and saves
the LSE; the backward recomputes each tile's weights from it, dK and dV by key tiles, dQ by query tiles. Causal in
either alignment, GQA, n_q != n_k, d_v != d, the LSE, the window and softcap, and dropout whose mask is
specs.dropout_mask's pure function of (seed, batch, head, row, column), as the kernels hash it.

Without a GPU the kernels run under Triton's interpreter on CPU tensors (impls/triton/__init__.py chooses it
before they are decorated, protocol.triton_interpreter); with one they run natively, unchanged: the inputs are
copied to the GPU and the results back. Each input and output sits inside a buffer with NaN margins
(impls/triton/guarded_buffers.py): the interpreter checks no bounds, so an unmasked load shows as a NaN and an
unmasked store as a written margin.

bfloat16 never enters an interpreted kernel: the interpreter keeps it as raw 16-bit patterns and converts it by
its own bit arithmetic, which truncates float32 to bfloat16 instead of rounding it and turns a subnormal into
another number either way (4.08e-41 stored as 9.09e-39; tests/triton/test_triton_record.py shows both).
There the inputs cross as float32 (the kernels widen every load to float32 anyway) and the output is rounded to
bfloat16 by torch, to nearest as a GPU's conversion does; on a GPU the kernels load and store bfloat16 themselves.
"""

from __future__ import annotations

import math
from types import ModuleType

import torch
import triton

from impls.torch.torch_flash import FlashPlan
from impls.triton import flash_kernels
from impls.triton.guarded_buffers import check_margins, guarded_copy, guarded_empty
from impls.triton.triton_flash_records import MIN_BLOCK
from protocol.triton_interpreter import interpreting
from specs.dropout_mask import drop_threshold
from specs.validation import AttentionInputError

LOG2_E = 1.0 / math.log(2.0)


class _Launch:
    """One call's kernel arguments: the shapes, the scale in base 2, the window, the cap, dropout, the tiles."""

    def __init__(self, plan: FlashPlan, device: torch.device, kernels: ModuleType):
        self.plan = plan
        self.device = device
        self.kernels = kernels
        left, right = plan.window or (-1, -1)
        p = plan.dropout_p
        self.scalars = (plan.n_q, plan.n_k, plan.d, plan.d_v, plan.heads, plan.group, plan.scale * LOG2_E,
                        plan.softcap * LOG2_E, plan.offset, left, right, plan.block_rows, plan.block_cols,
                        drop_threshold(p), 1.0 / (1.0 - p))
        self.blocks = dict(BLOCK_M=_power_of_two(plan.block_rows), BLOCK_N=_power_of_two(plan.block_cols),
                           HEAD_DIM=_power_of_two(plan.d), VALUE_DIM=_power_of_two(plan.d_v),
                           SOFTCAP=plan.softcap > 0, DROPOUT=p > 0)
        tile = max(self.blocks["BLOCK_M"], self.blocks["BLOCK_N"])
        self.margin = tile * max(self.blocks["HEAD_DIM"], self.blocks["VALUE_DIM"])  # one tile's reach past an edge
        keys = plan.row_keys if plan.row_keys is not None else torch.zeros((1,), dtype=torch.int64)
        self.row_keys = self.input(keys)

    def input(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        return guarded_copy(x, self.margin, crossing_dtype(dtype or x.dtype), self.device)

    def output(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return guarded_empty(shape, dtype, self.margin, self.device)

    def grid(self, length: int, block: int) -> tuple[int, int]:
        return (triton.cdiv(length, block), self.plan.batch * self.plan.heads)

    def checked(self, **outputs: torch.Tensor) -> None:
        for name, tensor in outputs.items():
            check_margins(name, tensor, self.margin)


def crossing_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a tensor of `dtype` has inside the kernels: float32 for bfloat16 under the interpreter (the module
    docstring says why), `dtype` otherwise."""
    return torch.float32 if dtype == torch.bfloat16 and interpreting() else dtype


def _power_of_two(size: int) -> int:
    return triton.next_power_of_2(max(MIN_BLOCK, size))


def _forward(launch: _Launch, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    plan = launch.plan
    out = launch.output((plan.batch, plan.heads, plan.n_q, plan.d_v), crossing_dtype(q.dtype))
    lse = launch.output((plan.batch, plan.heads, plan.n_q), torch.float32)
    if plan.n_q and plan.batch * plan.heads:
        launch.kernels.flash_forward[launch.grid(plan.n_q, plan.block_rows)](
            launch.input(q), launch.input(k), launch.input(v), out, lse, launch.row_keys, *launch.scalars,
            **launch.blocks)
    launch.checked(out=out, lse=lse)
    return out.to(q.dtype), lse


def _backward(launch: _Launch, q, k, v, out, lse, d_out, d_lse) -> tuple[torch.Tensor, ...]:
    """dQ, dK, dV (float32 until the end): D = rowsum(dO * O) - dLSE, LSE in base 2 (+inf for a row with no key:
    its weights exp2(S - inf) are 0)."""
    plan = launch.plan
    row_dot = (d_out.float() * out.float()).sum(dim=-1)
    if d_lse is not None:
        row_dot = row_dot - d_lse.float()
    lse_log2 = torch.where(lse == -math.inf, math.inf, lse * LOG2_E)
    inputs = (launch.input(q), launch.input(k), launch.input(v), launch.input(d_out), launch.input(lse_log2),
              launch.input(row_dot), launch.row_keys)
    d_q = launch.output((plan.batch, plan.heads, plan.n_q, plan.d), torch.float32)
    d_k = launch.output((plan.batch, plan.heads, plan.n_k, plan.d), torch.float32)
    d_v = launch.output((plan.batch, plan.heads, plan.n_k, plan.d_v), torch.float32)
    if plan.n_q and plan.n_k and plan.batch * plan.heads:
        launch.kernels.flash_backward_keys[launch.grid(plan.n_k, plan.block_cols)](*inputs, d_k, d_v,
                                                                                   *launch.scalars, **launch.blocks)
        launch.kernels.flash_backward_queries[launch.grid(plan.n_q, plan.block_rows)](*inputs, d_q,
                                                                                      *launch.scalars,
                                                                                      **launch.blocks)
    else:  # no tile: every gradient is 0
        for gradient in (d_q, d_k, d_v):
            gradient.zero_()
    launch.checked(dq=d_q, dk=d_k, dv=d_v)
    d_k = d_k * math.log(2.0)  # the kernels' queries carry the scale's log2(e): dK = scale dS^T Q
    d_q = d_q * plan.scale
    kv_shape = (plan.batch, plan.heads_kv, plan.group)
    return (d_q.to(q.dtype), d_k.view(*kv_shape, plan.n_k, plan.d).sum(dim=2).to(k.dtype),
            d_v.view(*kv_shape, plan.n_k, plan.d_v).sum(dim=2).to(v.dtype))


class _TritonFlashFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, launch: _Launch):
        out, lse = _forward(launch, q, k, v)
        ctx.launch = launch
        ctx.save_for_backward(q, k, v, out, lse)
        return out.to(q.device), lse.to(q.device)

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        launch = ctx.launch
        d_out = d_out.to(launch.device)
        d_lse = None if d_lse is None else d_lse.to(launch.device)
        grads = _backward(launch, q, k, v, out, lse, d_out, d_lse)
        return (*(g.to(x.device) for g, x in zip(grads, (q, k, v), strict=True)), None)


DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def triton_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
                     causal: bool = False, causal_alignment: str = "top_left", dropout_p: float = 0.0,
                     dropout_seed: int | None = None, block_rows: int = 64, block_cols: int = 64,
                     return_lse: bool = False, window_size: tuple[int, int] | None = None, softcap: float = 0.0,
                     kernels: ModuleType = flash_kernels):
    """Attention of q (batch, heads, n_q, d), k (batch, heads_kv, n_k, d), v (batch, heads_kv, n_k, d_v) in
    float32, float16 or bfloat16 by the Triton kernels. causal_alignment "top_left": query i sees keys j <= i;
    "bottom_right": j <= i + n_k - n_q. block_rows and block_cols are any positive sizes (a kernel lays its tile
    over the next power of two, at least 16, and masks the rest). dropout_seed selects the mask
    (specs.dropout_mask); None draws one from torch's default generator. Differentiable in q, k, v; with
    return_lse, (out, lse), lse (batch, heads, n_q) float32 in natural log, -inf for a row with no visible key
    (whose output is 0). `kernels`: a module with the same three kernels (a changed copy of flash_kernels)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if isinstance(x, torch.Tensor) and x.dtype not in DTYPES:
            raise AttentionInputError(f"{name} has dtype {x.dtype}; the Triton kernels take float32, float16 or "
                                      "bfloat16")
    if dropout_seed is None and dropout_p:
        dropout_seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
    plan = FlashPlan(q, k, v, scale=scale, causal=bool(causal), causal_alignment=causal_alignment, mask=None,
                     dropout_p=dropout_p, dropout_seed=dropout_seed, block_rows=block_rows, block_cols=block_cols,
                     mods=dict(window_size=window_size, softcap=softcap))
    for name, size in (("block_rows", block_rows), ("block_cols", block_cols)):
        if isinstance(size, int) and not isinstance(size, bool) and size < MIN_BLOCK:
            raise AttentionInputError(f"{name}={size}: the kernels' tiles are at least {MIN_BLOCK} (tl.dot's "
                                      "smallest on a GPU)")
    device = q.device if interpreting() or q.is_cuda else torch.device("cuda")
    out, lse = _TritonFlashFunction.apply(q, k, v, _Launch(plan, device, kernels))
    return (out, lse) if return_lse else out
