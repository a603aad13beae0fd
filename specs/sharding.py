"""How a sequence is laid across the W ranks of a process group for context parallelism (issue 39; beyond the seeds:
seed 000 § Flash Attention's "tiled output equals global output", one level up, a tile per process).

Three layouts, each a function of (n, W) alone, for the queries and for the keys (with their own n):
- "contiguous": rank r holds the r-th of W consecutive chunks, the first n % W chunks one position longer
  (np.array_split's rule), so n need not be divisible by W; with n < W the last ranks hold nothing. Ring attention
  and Ulysses take their inputs this way.
- "zigzag" (head-tail): the sequence is cut into 2W chunks by the same rule and rank r holds chunks r and
  2W - 1 - r, in that order, so that under causal masking every rank has about the same work.
- "stripe": rank r holds positions r, r + W, r + 2W, ... (ring-flash-attention's stripe attention: W chunks of one
  position each, dealt round the ranks), the first n % W ranks one position more.

A sharded implementation declares its layout (Capabilities.sharding); one that needs equal shards says so
(Capabilities.even_shards) and is given, on W > 1 ranks, only n divisible by W (contiguous, stripe) or 2W (zigzag).
"""

from __future__ import annotations

import numpy as np

from specs.validation import AttentionInputError

LAYOUTS = ("contiguous", "zigzag", "stripe")
WORLD_SIZES = (2, 3, 4)  # the process groups a sharded implementation is checked on


def _check(n: int, world: int, layout: str) -> None:
    if layout not in LAYOUTS:
        raise AttentionInputError(f"sharding layout must be one of {LAYOUTS}, got {layout!r}")
    if isinstance(world, bool) or not isinstance(world, int | np.integer) or world < 1:
        raise AttentionInputError(f"world size must be a positive integer, got {world!r}")
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise AttentionInputError(f"sequence length must be a non-negative integer, got {n!r}")


def chunks(n: int, world: int, layout: str) -> int:
    """How many consecutive chunks the layout cuts a sequence into."""
    _check(n, world, layout)
    return 2 * world if layout == "zigzag" else world


def shard_positions(n: int, world: int, layout: str) -> tuple[np.ndarray, ...]:
    """For each rank, the global positions it holds, in the order it holds them."""
    if layout == "stripe":
        _check(n, world, layout)
        return tuple(np.arange(rank, n, world) for rank in range(world))
    pieces = np.array_split(np.arange(n), chunks(n, world, layout))
    if layout == "contiguous":
        return tuple(pieces)
    return tuple(np.concatenate([pieces[r], pieces[2 * world - 1 - r]]) for r in range(world))


def divides_evenly(n: int, world: int, layout: str) -> bool:
    """Whether every chunk of the layout has the same length (what an even_shards implementation needs)."""
    return n % chunks(n, world, layout) == 0


def shard(x: np.ndarray, world: int, layout: str, axis: int = 2) -> list[np.ndarray]:
    """x's positions along `axis` (the sequence axis of (batch, heads, n, d)) split among the ranks."""
    return [np.take(x, positions, axis=axis) for positions in shard_positions(x.shape[axis], world, layout)]


def unshard(pieces: list[np.ndarray], n: int, layout: str, axis: int = 2) -> np.ndarray:
    """The inverse of `shard`: each rank's positions put back in global order."""
    positions = shard_positions(n, len(pieces), layout)
    for rank, (piece, held) in enumerate(zip(pieces, positions, strict=True)):
        if piece.shape[axis] != len(held):
            raise AttentionInputError(f"rank {rank} returned {piece.shape[axis]} positions along axis {axis}, but "
                                      f"holds {len(held)} of the {n} ({layout} layout, {len(pieces)} ranks)")
    order = np.argsort(np.concatenate(positions), kind="stable")
    return np.take(np.concatenate(pieces, axis=axis), order, axis=axis)


def shards_exchanged(n: int, world: int, layout: str, shift: int) -> np.ndarray:
    """The order of n positions that hands rank r what rank (r + shift) % W held, each shard's own order kept
    (`x[..., order, :]`): ring attention on keys so exchanged merges the same blocks, in another order. Needs
    shards of one length (divides_evenly)."""
    if not divides_evenly(n, world, layout):
        raise AttentionInputError(f"n={n} does not split into equal {layout} shards on {world} ranks: shards of "
                                  "different lengths cannot be exchanged")
    positions = shard_positions(n, world, layout)
    order = np.empty(n, dtype=np.int64)
    for rank, held in enumerate(positions):
        order[held] = positions[(rank + shift) % world]
    return order
