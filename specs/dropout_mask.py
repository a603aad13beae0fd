"""The dropout mask as a pure function of (seed, batch, head, row, column): the protocol's `dropout_seed`.

Seed 000 § Fused Attention (Softmax -> Dropout -> MatMul) and § Flash Attention
(`flash_attention(q, k, v, dropout_p=0.1, ...)`). A kernel that tiles the weights
cannot draw its mask from a stream, or the mask would depend on the tile order: it
hashes the element's position with the seed, as FlashAttention does with Philox.
Here the hash is a chain of 32-bit integer mixers (xor-shift, multiply by an odd
constant, twice per step), one step per coordinate, written with operators that
NumPy int64 arrays and torch int64 tensors share (multipliers below 2^31, so no
product of a 32-bit value overflows int64). One function therefore gives every
backend the same mask, for any block of positions, in any order.

An element is dropped when the top 24 bits of its hash, read as u in [0, 1), fall
below p rounded to a multiple of 2^-24 (`drop_probability`), and kept elements
are scaled by 1 / (1 - p), p being the requested rate.
"""

from __future__ import annotations

import numbers

import numpy as np

from specs.validation import AttentionInputError

_LOW_32 = 0xFFFFFFFF
_MULTIPLIERS = (0x21F0AAAD, 0x735A2D97)  # odd, below 2^31: a 32-bit x times one fits int64
_UNIFORM_BITS = 24


def check_dropout(p: object, seed: object = 0) -> tuple[float, int]:
    """(p, seed) validated: 0 <= p < 1, seed an int in [0, 2^64)."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= float(p) < 1.0:
        raise AttentionInputError(f"dropout_p must be a number in [0, 1), got {p!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= int(seed) < 2**64:
        raise AttentionInputError(f"dropout_seed must be an int in [0, 2**64), got {seed!r}")
    return float(p), int(seed)


def drop_threshold(p: float) -> int:
    """Hashes whose top 24 bits are below this are dropped."""
    return round(p * 2**_UNIFORM_BITS)


def drop_probability(p: float) -> float:
    """The exact probability that one element is dropped at requested rate p (within 2^-25 of p)."""
    return drop_threshold(p) / 2**_UNIFORM_BITS


def _mix(x):
    for multiplier in _MULTIPLIERS:
        x = x ^ (x >> 16)
        x = (x * multiplier) & _LOW_32
    return x ^ (x >> 15)


def _seed_key(seed: int) -> int:
    return int(_mix(np.int64(seed & _LOW_32) ^ _mix(np.int64(seed >> 32))))


def row_keys(seed: int, batch, head, row):
    """The hash of (seed, batch, head, row): int64 arrays or tensors, broadcast together."""
    x = _mix(batch ^ _seed_key(seed))
    x = _mix(x ^ head)
    return _mix(x ^ row)


def keep_from_row_keys(keys, column, p: float):
    """Keep (True) or drop for the elements at `column` of the rows whose keys are given."""
    return (_mix(keys ^ column) >> (32 - _UNIFORM_BITS)) >= drop_threshold(p)


def keep_mask(seed: int, p: float, shape: tuple[int, int, int, int], *, row_offset: int = 0,
              column_offset: int = 0) -> np.ndarray:
    """The keep mask of the (batch, heads, rows, columns) block starting at (row_offset, column_offset)."""
    p, seed = check_dropout(p, seed)
    b, h, n, m = (np.arange(size, dtype=np.int64) for size in shape)
    keys = row_keys(seed, b[:, None, None, None], h[None, :, None, None], row_offset + n[None, None, :, None])
    return keep_from_row_keys(keys, column_offset + m[None, None, None, :], p)
