"""The blocks each rank of ring-flash-attn 0.1.8's three rings computes (ring_flash_attn_func,
zigzag_ring_flash_attn_func, stripe_flash_attn_func), forward and backward alike: which of its query rows and which
global key positions a step's kernel call takes, with or without the causal mask, and where the backward's dQ buffer
puts that block's share. The deviations of a sharded call read the group size and layout it ran on from the call
(Call.tiles[WORLD_SIZE] and [LAYOUT], harness.api.explain)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specs.deviations.base import Call
from specs.sharding import shard_positions

WORLD_SIZE = "world_size"  # the group size a sharded call ran on, in Call.tiles (harness.api.explain)
LAYOUT = "layout"  # the layout its shards had (specs.sharding.LAYOUTS), in Call.tiles


@dataclass(frozen=True)
class RingBlock:
    """One kernel call of a rank's step: the local query rows it takes (and the rows of out and dO its backward
    reads), the global key positions, whether the kernel masks them causally, and for the backward the dQ buffer rows
    its share is written to (zeroed first) and the dq rows that buffer is then added to (None for the first block:
    dq = buffer.to(float32))."""

    rows: slice
    keys: np.ndarray
    causal: bool
    buffer: slice
    into: slice | None


def _ring_steps(rank: int, world: int, causal: bool, keys: tuple[np.ndarray, ...], n_local: int):
    """ring_flash_attn_forward and _backward: step s takes the keys of rank r - s for every row (causal: steps
    0..r only, the mask on step 0's alone)."""
    every = slice(0, n_local)
    computed = range(rank + 1) if causal else range(world)
    return [RingBlock(every, keys[(rank - step) % world], causal and step == 0, every, None if step == 0 else every)
            for step in computed]


def _zigzag_steps(rank: int, world: int, keys: tuple[np.ndarray, ...], n_local: int):
    """The zigzag ring (causal): step 0 its own keys, masked; a step s <= r the first half of rank r - s's keys for
    every row; a later step all of them for the second half of the rows, its share written to the first half of the
    backward's buffer and added to the second half of dq."""
    half, every = n_local // 2, slice(0, n_local)
    steps = [RingBlock(every, keys[rank], True, every, None)]
    for step in range(1, world):
        source = keys[(rank - step) % world]
        steps.append(RingBlock(every, source[:len(source) // 2], False, every, every) if step <= rank else
                     RingBlock(slice(half, n_local), source, False, slice(0, half), slice(half, n_local)))
    return steps


def _stripe_steps(rank: int, world: int, keys: tuple[np.ndarray, ...], n_local: int):
    """The stripe ring (causal, every block masked): a step s <= r takes rank r - s's keys for every row; a later
    step all but their last for every row but the first, written to and added at those rows."""
    every, tail = slice(0, n_local), slice(1, n_local)
    return [RingBlock(every, keys[(rank - step) % world], True, every, None if step == 0 else every)
            if step <= rank else RingBlock(tail, keys[(rank - step) % world][:-1], True, tail, tail)
            for step in range(world)]


def rank_steps(layout: str, causal: bool, rank: int, world: int, keys: tuple[np.ndarray, ...], n_local: int):
    """The blocks of one rank. zigzag and stripe assert causal=True and tell a non-causal caller to use the ring;
    without a mask every key is read, so the ring's steps run on their shards (impls/peers/ring_flash_attn)."""
    if causal and layout == "zigzag":
        return _zigzag_steps(rank, world, keys, n_local)
    if causal and layout == "stripe":
        return _stripe_steps(rank, world, keys, n_local)
    return _ring_steps(rank, world, causal, keys, n_local)


def ring_schedule(call: Call) -> list[tuple[np.ndarray, list[RingBlock]]] | None:
    """For each rank of the group `call` ran on, the global query positions it holds and its blocks; None for a call
    that carries no group size (not a sharded call)."""
    world = call.tiles.get(WORLD_SIZE)
    if world is None:
        return None
    layout = call.tiles.get(LAYOUT, "contiguous")
    causal = bool(call.keywords.get("causal"))
    rows = shard_positions(call.q.shape[2], world, layout)
    keys = shard_positions(call.k.shape[2], world, layout)
    return [(rows[rank], rank_steps(layout, causal, rank, world, keys, len(rows[rank]))) for rank in range(world)]


def rank_dq(steps: Sequence[RingBlock], shares: Sequence[np.ndarray], n_local: int, *, aliased: bool) -> np.ndarray:
    """A rank's dq as ring-flash-attn's backward keeps it, from its blocks' dQ shares in step order (each (..., rows
    of its block, d), any leading axes): each share written to its buffer rows, `dq = buffer.to(float32)` after the
    first (the buffer itself where `aliased`: float32 inputs; else a copy), each later buffer added to its dq rows.
    A NaN share's rows stay NaN where it is added, and leave the aliased dq where a later share overwrites them."""
    buffer = np.zeros((*shares[0].shape[:-2], n_local, shares[0].shape[-1]))
    dq = None
    for step, share in zip(steps, shares, strict=True):
        buffer[..., step.buffer, :] = share
        if dq is None:
            dq = buffer if aliased else buffer.copy()
        else:
            dq[..., step.into, :] += buffer[..., step.buffer, :]
    return dq
