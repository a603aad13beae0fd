"""Ring attention over torch.distributed, contiguous or zigzag (issue 39; seed 000 § Flash Attention's tiled output
equals the global output, a tile per process).

Each rank holds its queries and one block of keys and values. W steps pass the blocks around the ring (isend to the
next rank, irecv from the previous); at each step a rank attends its queries to the block it holds with our tiled
FlashAttention (impls.torch.torch_flash.flash_attention_tiled), the block's visibility (causal, window) read from
the global positions of both sides (specs.sharding), and merges the partial results through their log-sum-exp:
lse = log(sum_b exp(lse_b)), out = sum_b exp(lse_b - lse) out_b. Partials are kept in float32 (float64 for float64)
and the output rounded once, as split-k kernels do.

The backward passes the blocks around again, each with dK and dV accumulators that arrive home after W steps. A
block's share of the merged output is w_b = exp(lse_b - lse), so the cotangents reaching its partial result are
w_b dO for out_b and w_b (<dO, out_b - out> + dLSE) for lse_b; the tiled kernel's own backward turns them into the
block's dQ, dK, dV.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from impls.score_mod_checks import checked_mods
from impls.torch.torch_flash import flash_attention_tiled
from specs.score_mods import causal_window, window_visible
from specs.sharding import shard_positions
from specs.validation import resolve_scale

ACCUMULATION = {torch.float64: torch.float64}  # every other dtype: float32


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return ACCUMULATION.get(dtype, torch.float32)


def gathered_lengths(length: int, group) -> list[int]:
    """Every rank's shard length along the sequence, in rank order."""
    mine = torch.tensor([length], dtype=torch.int64)
    lengths = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(lengths, mine, group=group)
    return [int(x) for x in lengths]


def global_positions(length: int, group, layout: str) -> tuple[list[np.ndarray], int]:
    """Each rank's global positions under `layout`, and the sequence's length, from the ranks' shard lengths."""
    lengths = gathered_lengths(length, group)
    n = sum(lengths)
    positions = list(shard_positions(n, len(lengths), layout))
    if [len(p) for p in positions] != lengths:
        raise ValueError(f"shard lengths {lengths} are not the {layout} layout of {n} positions")
    return positions, n


def visibility(rows: np.ndarray, keys: np.ndarray, n_q: int, n_k: int, causal: bool, alignment: str,
               window: tuple[int, int] | None) -> torch.Tensor:
    """(len(rows), len(keys)): may the query at global position rows[i] see the key at keys[j]."""
    offset = n_k - n_q if alignment == "bottom_right" else 0
    window = causal_window(window, causal)
    past = keys[None, :] - (rows[:, None] + offset)
    visible = np.ones(past.shape, bool) if window is None else window_visible(past, window)
    return torch.from_numpy(visible)


def masked_attention(q, k, v, visible, scale: float, softcap: float):
    """(out, lse) of q against keys k, v under `visible` (rows x keys) with our tiled kernel, reading only the keys some
    row sees: a key no row sees is never read, so a NaN in it reaches no gradient (as a causal kernel skips the tiles
    past every row's horizon); no key seen gives 0 and -inf."""
    seen = visible.any(dim=0)
    if q.shape[2] == 0 or not seen.any():
        out = q.new_zeros(q.shape[:3] + (v.shape[-1],))
        return out, q.new_full(q.shape[:3], -torch.inf)
    if not seen.all():
        k, v, visible = k[:, :, seen], v[:, :, seen], visible[:, seen]
    return flash_attention_tiled(q, k, v, scale=scale, mask=visible[None, None], softcap=softcap, return_lse=True)


def merge_weights(lse_b: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """exp(lse_b - lse), 0 where the block has no visible key (lse_b = -inf, and then lse may be -inf too)."""
    return torch.where(torch.isneginf(lse_b), 0.0, torch.exp(lse_b - torch.where(torch.isneginf(lse), 0.0, lse)))


def rotate(tensors: list[torch.Tensor], group) -> list[torch.Tensor]:
    """Send each tensor to the next rank of the ring and receive the previous rank's (shapes may differ)."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if world == 1:
        return tensors
    after, before = (dist.get_global_rank(group, (rank + step) % world) for step in (1, -1))
    shapes = [torch.tensor(x.shape, dtype=torch.int64) for x in tensors]
    received_shapes = [torch.zeros_like(s) for s in shapes]
    _exchange(shapes, received_shapes, after, before, group)
    received = [x.new_empty(tuple(int(d) for d in s)) for x, s in zip(tensors, received_shapes, strict=True)]
    _exchange([x.contiguous() for x in tensors], received, after, before, group)
    return received


def _exchange(sending, receiving, after: int, before: int, group) -> None:
    operations = [dist.P2POp(dist.isend, x, after, group) for x in sending]
    operations += [dist.P2POp(dist.irecv, x, before, group) for x in receiving]
    for request in dist.batch_isend_irecv(operations):
        request.wait()


class RingPlan:
    """One call: the group, each side's global positions, the modifications; and the three steps a ring gets right
    or wrong (the zoo's wrong rings override one each): where a rank's positions are, how a block's partial result
    merges in, and which cotangents reach a block's partial result in the backward."""

    def __init__(self, q, k, v, group, layout: str, scale, causal: bool, alignment: str, window, softcap) -> None:
        mods = checked_mods(q, k, v, window_size=window, softcap=softcap)
        self.group, self.layout = group, layout
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.rows, self.n_q = self.positions(q.shape[2])
        self.keys, self.n_k = self.positions(k.shape[2])
        self.scale = resolve_scale(scale, q.shape[-1])
        self.causal, self.alignment, self.window, self.softcap = bool(causal), alignment, mods.window, mods.softcap

    def positions(self, length: int) -> tuple[list[np.ndarray], int]:
        """Each rank's global positions along a sequence of which this rank holds `length`."""
        return global_positions(length, self.group, self.layout)

    def owner(self, step: int) -> int:
        """Whose block this rank holds after `step` rotations."""
        return (self.rank - step) % self.world

    def visible(self, step: int) -> torch.Tensor:
        return visibility(self.rows[self.rank], self.keys[self.owner(step)], self.n_q, self.n_k, self.causal,
                          self.alignment, self.window)

    def attend(self, q, k, v, step: int):
        return masked_attention(q, k, v, self.visible(step), self.scale, self.softcap)

    @staticmethod
    def merge(out, lse, out_b, lse_b):
        """The running result with one more block's: lse = log(exp(lse) + exp(lse_b)), each output weighted by its
        share."""
        merged = torch.logaddexp(lse, lse_b)
        return (merge_weights(lse, merged)[..., None] * out + merge_weights(lse_b, merged)[..., None] * out_b,
                merged)

    def block_cotangents(self, step: int, weight, out_b, out, d_out, d_lse):
        """What reaches the partial result (out_b, lse_b) of the block held after `step` rotations from the merged
        (out, lse): w_b dO and w_b (<dO, out_b - out> + dLSE), w_b = exp(lse_b - lse)."""
        return weight[..., None] * d_out, weight * (((out_b - out) * d_out).sum(-1) + d_lse)


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan: RingPlan):
        wide = accumulation_dtype(q.dtype)
        qw, block = q.to(wide), [k.to(wide), v.to(wide)]
        out = qw.new_zeros(q.shape[:3] + (v.shape[-1],))
        lse = qw.new_full(q.shape[:3], -torch.inf)
        for step in range(plan.world):
            out, lse = plan.merge(out, lse, *plan.attend(qw, *block, step))
            if step < plan.world - 1:
                block = rotate(block, plan.group)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.plan = plan
        return out.to(q.dtype), lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        plan = ctx.plan
        wide = out.dtype
        qw, d_out = q.to(wide), d_out.to(wide)
        d_lse = torch.zeros_like(lse) if d_lse is None else d_lse.to(wide)
        dq = torch.zeros_like(qw)
        block = [k.to(wide), v.to(wide), torch.zeros(k.shape, dtype=wide), torch.zeros(v.shape, dtype=wide)]
        for step in range(plan.world):
            with torch.enable_grad():
                leaves = [x.detach().requires_grad_(True) for x in (qw, block[0], block[1])]
                out_b, lse_b = plan.attend(*leaves, step)
            g_out, g_lse = plan.block_cotangents(step, merge_weights(lse_b.detach(), lse), out_b.detach(), out,
                                                 d_out, d_lse)
            if out_b.requires_grad:
                grads = torch.autograd.grad((out_b, lse_b), leaves, (g_out, g_lse), allow_unused=True)
                parts = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves, strict=True)]
                dq, block[2], block[3] = dq + parts[0], block[2] + parts[1], block[3] + parts[2]
            block = rotate(block, plan.group)  # the W-th rotation brings each block's dK, dV home
        return dq.to(q.dtype), block[2].to(k.dtype), block[3].to(v.dtype), None


def ring_face(layout: str, plan_type: type[RingPlan] = RingPlan):
    """The sharded face of a ring over `layout` whose steps are `plan_type`'s."""

    def ring_attention(q, k, v, *, group, scale=None, causal=False, window_size=None, softcap=0.0,
                       return_lse=False):
        """Ring attention of this rank's shards (the module's docstring)."""
        plan = plan_type(q, k, v, group, layout, scale, causal, "top_left", window_size, softcap)
        out, lse = RingAttention.apply(q, k, v, plan)
        return (out, lse) if return_lse else out

    ring_attention.__qualname__ = f"ring_attention_{layout}"
    return ring_attention
