"""Ulysses (DeepSpeed's sequence parallelism) over torch.distributed (issue 39), and attention over keys gathered from
every rank: two more ways to shard attention, each differentiable through torch.distributed.nn's collectives.

Ulysses: each rank holds a contiguous shard of the sequence for every head. An all-to-all swaps that for every
position of heads / W heads; each rank runs our tiled FlashAttention over the whole sequence for its heads; a second
all-to-all swaps back. The heads must divide among the ranks (refused by name otherwise); kv heads that do not are
repeated to one per query head first (GQA read as MHA, which gives the same attention).

All-gather: each rank gathers every rank's keys and values (padded to the longest shard, the padding masked) and
attends its own queries to all of them at their global positions: a correct sharded attention written without a
ring, checked beside it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as collectives

from impls.distributed.ring import gathered_lengths, global_positions, masked_attention, visibility
from impls.score_mod_checks import checked_mods
from impls.torch.torch_flash import flash_attention_tiled
from specs.validation import AttentionInputError, resolve_scale


def _swap(pieces: list[torch.Tensor], shapes: list[tuple[int, ...]], group) -> list[torch.Tensor]:
    """All-to-all: piece j goes to rank j; the piece received from rank j has shapes[j]."""
    received = [pieces[0].new_empty(shape) for shape in shapes]
    return list(collectives.all_to_all(received, [p.contiguous() for p in pieces], group=group))


class GatherAlongRanks(torch.autograd.Function):
    """Every rank's tensor (one shape), in rank order; the backward sums each piece's gradient over the ranks that
    used it (an all-reduce, which gloo has) and keeps this rank's."""

    @staticmethod
    def forward(ctx, x, group):
        pieces = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(pieces, x.contiguous(), group=group)
        ctx.group = group
        return tuple(pieces)

    @staticmethod
    def backward(ctx, *grads):
        total = torch.stack(grads)
        dist.all_reduce(total, group=ctx.group)
        return total[dist.get_rank(ctx.group)], None


class UlyssesPlan:
    """One call's two all-to-alls (gloo's sends pieces of one size, forward and backward: each padded to the longest
    shard); the zoo's wrong Ulysses overrides one."""

    def __init__(self, group, batch: int, lengths_q: list[int], lengths_k: list[int]) -> None:
        self.group, self.batch = group, batch
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.lengths_q, self.lengths_k = lengths_q, lengths_k

    def to_heads(self, x, lengths):
        """(batch, heads, this rank's positions, dim) -> (batch, heads / W, every position, dim)."""
        share, longest = x.shape[1] // self.world, max(lengths)
        pieces = list(torch.nn.functional.pad(x, (0, 0, 0, longest - x.shape[2])).split(share, dim=1))
        received = _swap(pieces, [(self.batch, share, longest, x.shape[3])] * self.world, self.group)
        return torch.cat([piece[:, :, :n] for piece, n in zip(received, lengths, strict=True)], dim=2)

    def to_sequence(self, x, lengths):
        """The inverse: (batch, heads / W, every position, dim) -> (batch, heads, this rank's positions, dim)."""
        longest = max(lengths)
        pieces = [torch.nn.functional.pad(piece, (0, 0, 0, longest - piece.shape[2]))
                  for piece in x.split(lengths, dim=2)]
        received = _swap(pieces, [(self.batch, x.shape[1], longest, x.shape[3])] * self.world, self.group)
        return torch.cat(received, dim=1)[:, :, :lengths[self.rank]]


def ulysses_face(plan_type: type[UlyssesPlan] = UlyssesPlan):
    """The sharded face of Ulysses whose all-to-alls are `plan_type`'s."""

    def ulysses_attention(q, k, v, *, group, scale=None, causal=False, window_size=None, softcap=0.0,
                          return_lse=False):
        """Ulysses over this rank's shards (the module's docstring)."""
        mods = checked_mods(q, k, v, window_size=window_size, softcap=softcap)
        world, heads = dist.get_world_size(group), q.shape[1]
        if heads % world:
            raise AttentionInputError(f"Ulysses divides the {heads} query heads among {world} ranks: heads must be "
                                      "divisible by the group size")
        if k.shape[1] % world:
            k, v = (x.repeat_interleave(heads // k.shape[1], dim=1) for x in (k, v))
        plan = plan_type(group, q.shape[0], gathered_lengths(q.shape[2], group), gathered_lengths(k.shape[2], group))
        out, lse = flash_attention_tiled(*(plan.to_heads(x, lengths) for x, lengths in
                                           ((q, plan.lengths_q), (k, plan.lengths_k), (v, plan.lengths_k))),
                                         scale=scale, causal=bool(causal), window_size=mods.window,
                                         softcap=mods.softcap, return_lse=True)
        out = plan.to_sequence(out, plan.lengths_q)
        lse = plan.to_sequence(lse[..., None], plan.lengths_q)[..., 0]
        return (out, lse) if return_lse else out

    return ulysses_attention


def allgather_attention(q, k, v, *, group, scale=None, causal=False, window_size=None, softcap=0.0,
                        return_lse=False):
    mods = checked_mods(q, k, v, window_size=window_size, softcap=softcap)
    rows, n_q = global_positions(q.shape[2], group, "contiguous")
    keys, n_k = global_positions(k.shape[2], group, "contiguous")
    longest = max(len(held) for held in keys)

    def gathered(x):
        padded = torch.nn.functional.pad(x, (0, 0, 0, longest - x.shape[2]))
        return torch.cat([piece[:, :, :len(held)] for piece, held in
                          zip(GatherAlongRanks.apply(padded, group), keys, strict=True)], dim=2)

    visible = visibility(rows[dist.get_rank(group)], np.concatenate(keys), n_q, n_k, bool(causal), "top_left",
                         mods.window)
    every_k, every_v = gathered(k), gathered(v)  # every rank takes part, queries or not
    out, lse = masked_attention(q, every_k, every_v, visible, resolve_scale(scale, q.shape[-1]), mods.softcap)
    return (out, lse) if return_lse else out
