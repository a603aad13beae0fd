"""Variable-length batches beyond the seeds (issue 22): packed sequences, their cumulative lengths, and the oracle.

FlashAttention 2's flash_attn_varlen_func packs a batch of sequences of different lengths along one axis: q
(total_q, heads, d), k and v (total_k, heads_kv, d); sequence i holds rows cu_seqlens_q[i]:cu_seqlens_q[i + 1] of q
and cu_seqlens_k[i]:cu_seqlens_k[i + 1] of k and v (int32, batch + 1 entries, starting at 0, non-decreasing, the
last at most the tensor's length: rows past it belong to no sequence); max_seqlen_q/k bound the lengths;
FlashAttention 3's seqused_k (int32, batch) says how many of a sequence's keys are used, the rest never read.
Varlen attention is each sequence's own attention (specs.reference.attention), causal and the window aligned per
sequence; a sequence with no key gives output 0 and log-sum-exp -inf (its sink, with sinks), and one with no query
gives nothing. The log-sum-exp comes in FlashAttention's varlen layout, (heads, total_q).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from specs.fill import finite_garbage
from specs.reference import AttentionResult, attention
from specs.validation import AttentionInputError

VARLEN_ARGUMENTS = ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")  # positional, after q, k, v


@dataclass(frozen=True)
class Packing:
    """Where each sequence of a pack lies: its rows of q and its (used) rows of k and v."""

    cu_q: np.ndarray  # int64 copies of cu_seqlens_q, cu_seqlens_k
    cu_k: np.ndarray
    used_k: np.ndarray  # keys used per sequence (seqused_k, or the whole of each sequence)

    @property
    def batch(self) -> int:
        return len(self.cu_q) - 1

    def rows(self, i: int) -> slice:
        return slice(int(self.cu_q[i]), int(self.cu_q[i + 1]))

    def keys(self, i: int) -> slice:
        return slice(int(self.cu_k[i]), int(self.cu_k[i] + self.used_k[i]))

    def sequences(self) -> Iterator[tuple[int, slice, slice]]:
        for i in range(self.batch):
            yield i, self.rows(i), self.keys(i)

    def places(self, total: int, keys: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, position in it) of each of `total` packed rows of q (keys: of k and v): -1 and 0 for a row
        no sequence uses (past cu_seqlens[-1], or a key past seqused_k)."""
        sequence, position = np.full(total, -1, np.int64), np.zeros(total, np.int64)
        for i in range(self.batch):
            where = self.keys(i) if keys else self.rows(i)
            sequence[where], position[where] = i, np.arange(where.stop - where.start)
        return sequence, position


def int32_vector(name: str, value: object) -> np.ndarray:
    dtype = getattr(value, "dtype", None)
    if dtype is None or str(dtype).rpartition(".")[2] != "int32":
        raise AttentionInputError(f"{name} must be an int32 array, got {type(value).__name__} of dtype {dtype}")
    array = np.asarray(value)
    if array.ndim != 1:
        raise AttentionInputError(f"{name} must be 1-D, got shape {array.shape}")
    return array.astype(np.int64)


def check_cu_seqlens(name: str, value: object, total: int) -> np.ndarray:
    """cu_seqlens against the protocol: int32, 1-D, at least 2 entries, from 0, non-decreasing, the last at most
    `total` (the packed tensor's length); an AttentionInputError naming `name` otherwise."""
    cu = int32_vector(name, value)
    if len(cu) < 2:
        raise AttentionInputError(f"{name} must have batch + 1 >= 2 entries, got {len(cu)}")
    if cu[0] != 0:
        raise AttentionInputError(f"{name} must start at 0, got {int(cu[0])}")
    drops = np.flatnonzero(np.diff(cu) < 0)
    if drops.size:
        i = int(drops[0])
        raise AttentionInputError(f"{name} must be non-decreasing, but {name}[{i + 1}] = {int(cu[i + 1])} < "
                                  f"{name}[{i}] = {int(cu[i])}")
    if cu[-1] > total:
        raise AttentionInputError(f"{name}[-1] = {int(cu[-1])} is past the packed tensor's {total} rows")
    return cu


def check_packing(total_q: int, total_k: int, cu_seqlens_q: object, cu_seqlens_k: object, max_seqlen_q: object,
                  max_seqlen_k: object, seqused_k: object = None) -> Packing:
    """The packing's arguments against the protocol (each error names its argument), as a Packing."""
    cu_q = check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, total_q)
    cu_k = check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, total_k)
    if len(cu_q) != len(cu_k):
        raise AttentionInputError(f"cu_seqlens_q has {len(cu_q)} entries and cu_seqlens_k {len(cu_k)}: both must "
                                  "be batch + 1")
    for name, bound, lengths in (("max_seqlen_q", max_seqlen_q, np.diff(cu_q)),
                                 ("max_seqlen_k", max_seqlen_k, np.diff(cu_k))):
        if isinstance(bound, bool) or not isinstance(bound, int | np.integer):
            raise AttentionInputError(f"{name} must be an int, got {type(bound).__name__}")
        if bound < lengths.max():
            raise AttentionInputError(f"{name} = {bound} is less than the longest sequence, {int(lengths.max())}")
    used = np.diff(cu_k)
    if seqused_k is not None:
        used_given = int32_vector("seqused_k", seqused_k)
        if used_given.shape != (len(cu_k) - 1,):
            raise AttentionInputError(f"seqused_k must have one entry per sequence ({len(cu_k) - 1}), got "
                                      f"{used_given.shape[0]}")
        wrong = np.flatnonzero((used_given < 0) | (used_given > used))
        if wrong.size:
            i = int(wrong[0])
            raise AttentionInputError(f"seqused_k[{i}] = {int(used_given[i])} is outside 0..{int(used[i])}, the "
                                      "sequence's keys")
        used = used_given
    return Packing(cu_q, cu_k, used)


def packing_of(q: object, k: object, v: object, cu_seqlens_q: object, cu_seqlens_k: object, max_seqlen_q: object,
               max_seqlen_k: object, seqused_k: object = None) -> Packing:
    """check_packing for packed q, k and v of any array kind, which must be (total, heads, dim)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if np.ndim(x) != 3:
            raise AttentionInputError(f"{name} must be packed (total, heads, dim), got shape {np.shape(x)}")
    return check_packing(np.shape(q)[0], np.shape(k)[0], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         seqused_k)


def sequence_kwargs(kwargs: dict, i: int) -> dict:
    """One sequence's keywords: ALiBi slopes of shape (batch, heads) give it their row i."""
    slopes = kwargs.get("alibi_slopes")
    if slopes is not None and np.ndim(slopes) == 2:
        return {**kwargs, "alibi_slopes": slopes[i]}
    return kwargs


def to_dense(x: np.ndarray) -> np.ndarray:
    """One sequence's (n, heads, dim) rows as the dense face's (1, heads, n, dim)."""
    return np.ascontiguousarray(x.transpose(1, 0, 2))[None]


def varlen_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, packing: Packing, *,
                     causal_alignment: str = "bottom_right", **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """The oracle: (out (total_q, heads, d_v), lse (heads, total_q)), each sequence attending on its own
    (specs.reference.attention, float64 NumPy, `kwargs` its keywords); rows in no sequence are 0 and -inf."""
    heads, d_v = q.shape[1], v.shape[2]
    out = np.zeros((q.shape[0], heads, d_v))
    lse = np.full((heads, q.shape[0]), -np.inf)
    sinks = kwargs.get("sinks")
    for i, rows, keys in packing.sequences():
        if rows.stop == rows.start:
            continue
        if keys.stop == keys.start:  # no key: output 0, log-sum-exp the sink's (-inf without one)
            lse[:, rows] = -np.inf if sinks is None else np.asarray(sinks, np.float64)[:, None]
            continue
        result: AttentionResult = attention(to_dense(q[rows]), to_dense(k[keys]), to_dense(v[keys]),
                                            causal_alignment=causal_alignment, **sequence_kwargs(kwargs, i))
        out[rows] = result.out[0].transpose(1, 0, 2)
        lse[:, rows] = result.lse[0]
    return out, lse


@dataclass(frozen=True)
class PackedInputs:
    """A pack built from dense arrays (pack_sequences): the varlen face's positional arrays and keywords."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    cu_seqlens_q: np.ndarray
    cu_seqlens_k: np.ndarray
    max_seqlen_q: int
    max_seqlen_k: int
    seqused_k: np.ndarray | None

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.q, self.k, self.v, self.cu_seqlens_q, self.cu_seqlens_k

    @property
    def keywords(self) -> dict:
        used = {} if self.seqused_k is None else {"seqused_k": self.seqused_k}
        return {"max_seqlen_q": self.max_seqlen_q, "max_seqlen_k": self.max_seqlen_k, **used}

    def packing(self) -> Packing:
        return check_packing(len(self.q), len(self.k), *self.arrays[3:], self.max_seqlen_q, self.max_seqlen_k,
                             self.seqused_k)


def pack_sequences(q: np.ndarray, k: np.ndarray, v: np.ndarray, lengths_q: list[int], lengths_k: list[int], *,
                   unused_k: int = 0, tail: int = 0, fill: str = "nan") -> PackedInputs:
    """Sequence b of the pack: the first lengths_q[b] queries and lengths_k[b] keys of dense batch entry b, then
    `unused_k` keys past seqused_k (when unused_k > 0); `tail` rows follow cu_seqlens[-1]. What those unused
    positions hold: `fill` "nan", or "garbage", finite values of ordinary size no row may read (an implementation
    that reads them changes its output: specs.fill)."""
    if fill not in ("nan", "garbage"):
        raise ValueError(f"fill is 'nan' or 'garbage', got {fill!r}")

    def unused(n: int, x: np.ndarray) -> np.ndarray:
        block = np.full((n, x.shape[1], x.shape[3]), np.nan, x.dtype)
        return block if fill == "nan" else finite_garbage(block)

    def packed(x: np.ndarray, lengths: list[int], extra: int) -> np.ndarray:
        rows = [part for b, n in enumerate(lengths) for part in (x[b, :, :n].swapaxes(0, 1), unused(extra, x))]
        return np.concatenate([*rows, unused(tail, x)])

    counts_k = [n + unused_k for n in lengths_k]
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n, dtype=np.int64)]).astype(np.int32) for n in (lengths_q, counts_k))
    return PackedInputs(packed(q, lengths_q, 0), packed(k, lengths_k, unused_k), packed(v, lengths_k, unused_k),
                        cu_q, cu_k, max(lengths_q), max(counts_k),
                        np.asarray(lengths_k, np.int32) if unused_k else None)
