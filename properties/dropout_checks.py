"""Dropout's calls and the pairs its independence is tested on (seed 000 § Fused Attention: Softmax -> Dropout ->
MatMul): the keywords that ask an implementation for dropout, head sizes that read weights back through one-hot
values, and the disjoint position pairs whose keeps must agree as independent coins do."""

from __future__ import annotations

import functools

import numpy as np

DROPOUT_P = 0.1  # the seed's dropout_p
SEED = 40_000  # the fixed draws of the per-position test and of the random pairs


def dropout_call(variant, seed: int, p: float = DROPOUT_P) -> dict:
    """Trial.call's keywords that ask for dropout at rate p with this seed: `dropout_seed`, or the global
    generators seeded where the call runs when the implementation has no such keyword."""
    if variant.capabilities.dropout_seed:
        return {"dropout_p": p, "dropout_seed": seed}
    return {"dropout_p": p, "global_seed": seed}


def one_hot_head_dims(variant, n_k: int) -> dict:
    """d and d_v: 8, or n_k for an implementation that takes d_v = d only (value_dim False; flash-attn's), whose
    one-hot values need d_v >= n_k."""
    size = 8 if variant.capabilities.value_dim else n_k
    return {"d": size, "d_v": size}


def offset_pairs(shape: tuple[int, ...], offset: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint pairs (x, x + offset) of flat positions: along the first axis the offset moves (by L > 0), x
    lies in an even block of L, so no position is in two pairs and, for iid keeps, the agreements are iid."""
    axis = next(a for a, step in enumerate(offset) if step)
    grids = np.indices(shape)
    inside = np.all([(g + step >= 0) & (g + step < n) for g, step, n in zip(grids, offset, shape, strict=True)],
                    axis=0)
    first = np.flatnonzero(inside & ((grids[axis] // offset[axis]) % 2 == 0))
    moved = [index + step for index, step in zip(np.unravel_index(first, shape), offset, strict=True)]
    return first, np.ravel_multi_index(moved, shape)


@functools.cache
def pair_families(shape: tuple[int, int, int, int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The pairs whose agreement is tested: neighbouring batches, heads at every lag, rows and columns at lags
    1 .. n / 2, diagonals (i + L, j + L) and anti-diagonals (i + L, j - L) at those lags, and a random matching
    of all positions (a fixed permutation, paired off)."""
    b, h, n_q, n_k = shape
    offsets = {"batch +1": (1, 0, 0, 0), **{f"head +{lag}": (0, lag, 0, 0) for lag in range(1, h)}}
    for lag in range(1, min(n_q, n_k) // 2 + 1):
        offsets.update({f"row +{lag}": (0, 0, lag, 0), f"column +{lag}": (0, 0, 0, lag),
                        f"diagonal (row +{lag}, column +{lag})": (0, 0, lag, lag),
                        f"anti-diagonal (row +{lag}, column -{lag})": (0, 0, lag, -lag)})
    families = {name: offset_pairs(shape, offset) for name, offset in offsets.items() if b > 1 or offset[0] == 0}
    order = np.random.default_rng(SEED).permutation(b * h * n_q * n_k)
    half = order.size // 2
    families["random pairs of positions"] = (order[:half], order[half:2 * half])
    return families
