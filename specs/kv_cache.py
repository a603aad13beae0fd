"""KV caches beyond the seeds (issue 22): a decode step appends keys to a cache and attends over it.

FlashAttention's flash_attn_with_kvcache (seed 001 § 2.4 describes the paged cache): q (batch, n_q, heads, d);
k_cache, v_cache (batch_cache, capacity, heads_kv, d / d_v), or, with a `block_table` (batch, pages per sequence),
a pool of pages (pages, page_size, heads_kv, d / d_v) where logical slot t of sequence b is slot t % page_size of
page block_table[b, t // page_size]. Sequence b uses cache row cache_batch_idx[b] (b without it; not with pages).
New keys and values k, v (batch, n_new, heads_kv, d / d_v), when given, are written at slots cache_seqlens[b] ..
cache_seqlens[b] + n_new - 1 before attending, in place: the cache after the call holds them there and nothing
else changed. Sequence b then attends over slots cache_leftpad[b] .. cache_seqlens[b] + n_new - 1, causal aligned
bottom-right (the newest query sees every key); slots outside them, and block_table entries past the pages they
need, are never read. `num_splits` is how many key splits a decode kernel merges through their log-sum-exp: any
number gives the same attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specs.reference import attention
from specs.validation import AttentionInputError
from specs.varlen import int32_vector, sequence_kwargs, to_dense

KVCACHE_KEYWORDS = ("cache_seqlens", "cache_batch_idx", "cache_leftpad", "block_table", "num_splits")


@dataclass(frozen=True)
class CacheLayout:
    """Where each sequence's keys live in the cache, and which slots a call writes and reads."""

    seqlens: np.ndarray  # int64 (batch,): slots filled before the call
    n_new: int
    rows: np.ndarray  # cache row of each sequence (contiguous caches)
    leftpad: np.ndarray  # int64 (batch,)
    block_table: np.ndarray | None  # int64 (batch, pages per sequence), or None
    page_size: int  # the capacity itself for a contiguous cache

    @property
    def batch(self) -> int:
        return len(self.seqlens)

    def slots(self, b: int) -> range:
        """The logical slots sequence b attends over (after the append)."""
        return range(int(self.leftpad[b]), int(self.seqlens[b]) + self.n_new)

    def written(self, b: int) -> range:
        return range(int(self.seqlens[b]), int(self.seqlens[b]) + self.n_new)

    def where(self, b: int, slots: range) -> tuple[np.ndarray, np.ndarray]:
        """(first, second) cache indices of logical `slots` of sequence b."""
        t = np.arange(slots.start, slots.stop)
        if self.block_table is None:
            return np.full(t.shape, self.rows[b]), t
        return self.block_table[b, t // self.page_size], t % self.page_size

    def pages_needed(self, b: int) -> int:
        return -(-(int(self.seqlens[b]) + self.n_new) // self.page_size)


def _cache_array(name: str, x: object) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) != 4:
        raise AttentionInputError(f"{name} must be a 4-D array, got {type(x).__name__} of shape {shape}")
    return tuple(shape)


def check_kv_cache(q: object, k_cache: object, v_cache: object, k: object = None, v: object = None, *,
                   cache_seqlens: object = None, cache_batch_idx: object = None, cache_leftpad: object = None,
                   block_table: object = None) -> CacheLayout:
    """The kv-cache call's arguments against the protocol (each error names its argument), as a CacheLayout."""
    batch, _, heads, d = _cache_array("q", q)
    kc, vc = _cache_array("k_cache", k_cache), _cache_array("v_cache", v_cache)
    if kc[:3] != vc[:3]:
        raise AttentionInputError(f"k_cache {kc} and v_cache {vc} must share their first three axes")
    if kc[3] != d:
        raise AttentionInputError(f"k_cache has head dim {kc[3]} but q has {d}")
    if heads % kc[2]:
        raise AttentionInputError(f"heads={heads} is not a multiple of the cache's heads_kv={kc[2]}")
    if (k is None) != (v is None):
        raise AttentionInputError("k and v must be given together (new keys and their values) or not at all")
    n_new = 0
    if k is not None:
        ks, vs = _cache_array("k", k), _cache_array("v", v)
        if ks[0] != batch or ks[2:] != kc[2:] or vs[:3] != ks[:3] or vs[3] != vc[3]:
            raise AttentionInputError(f"k {ks} and v {vs} must be (batch={batch}, n_new, heads_kv={kc[2]}, "
                                      f"d={kc[3]} / d_v={vc[3]})")
        n_new = ks[1]
    if cache_seqlens is None:
        raise AttentionInputError("cache_seqlens is required: the number of filled slots of each sequence")
    seqlens = int32_vector("cache_seqlens", cache_seqlens)
    if seqlens.shape != (batch,) or (seqlens < 0).any():
        raise AttentionInputError(f"cache_seqlens must be {batch} non-negative int32 (one per sequence), got "
                                  f"{seqlens.tolist()}")
    leftpad = np.zeros(batch, np.int64)
    if cache_leftpad is not None:
        leftpad = int32_vector("cache_leftpad", cache_leftpad)
        if leftpad.shape != (batch,) or (leftpad < 0).any() or (leftpad > seqlens).any():
            raise AttentionInputError(f"cache_leftpad must be {batch} int32 between 0 and cache_seqlens, got "
                                      f"{leftpad.tolist()}")
    rows = np.arange(batch)
    table = None
    if block_table is not None:
        if cache_batch_idx is not None:
            raise AttentionInputError("cache_batch_idx and block_table exclude each other: a paged cache maps "
                                      "sequences to pages through block_table")
        table = np.asarray(block_table)
        if str(getattr(block_table, "dtype", "")).rpartition(".")[2] != "int32" or table.ndim != 2 \
                or table.shape[0] != batch:
            raise AttentionInputError(f"block_table must be int32 (batch={batch}, pages per sequence), got "
                                      f"{getattr(block_table, 'dtype', None)} of shape {table.shape}")
        table = table.astype(np.int64)
        page_size, capacity = kc[1], table.shape[1] * kc[1]
    else:
        if cache_batch_idx is not None:
            rows = int32_vector("cache_batch_idx", cache_batch_idx)
            if rows.shape != (batch,) or (rows < 0).any() or (rows >= kc[0]).any():
                raise AttentionInputError(f"cache_batch_idx must be {batch} cache rows in 0..{kc[0] - 1}, got "
                                          f"{rows.tolist()}")
            if n_new and len(set(rows.tolist())) != batch:
                raise AttentionInputError(f"cache_batch_idx {rows.tolist()} repeats a row that new keys are "
                                          "written to")
        elif kc[0] < batch:
            raise AttentionInputError(f"k_cache has {kc[0]} rows for {batch} sequences")
        page_size = capacity = kc[1]
    full = np.flatnonzero(seqlens + n_new > capacity)
    if full.size:
        b = int(full[0])
        raise AttentionInputError(f"cache_seqlens[{b}] = {int(seqlens[b])} plus {n_new} new keys is past the "
                                  f"cache's {capacity} slots")
    layout = CacheLayout(seqlens, n_new, rows, leftpad, table, page_size)
    if table is not None:
        for b in range(batch):
            used = table[b, :layout.pages_needed(b)]
            bad = np.flatnonzero((used < 0) | (used >= kc[0]))
            if bad.size:
                p = int(bad[0])
                raise AttentionInputError(f"block_table[{b}, {p}] = {int(used[p])} is not a page of the cache "
                                          f"(0..{kc[0] - 1}), and sequence {b} uses that page")
    return layout


def appended(cache: np.ndarray, new: np.ndarray | None, layout: CacheLayout) -> np.ndarray:
    """A copy of `cache` with the new keys (or values) written where the call must write them."""
    after = cache.copy()
    if new is not None:
        for b in range(layout.batch):
            after[layout.where(b, layout.written(b))] = new[b]
    return after


def kv_cache_attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, k: np.ndarray | None,
                       v: np.ndarray | None, layout: CacheLayout, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """The oracle: (out (batch, n_q, heads, d_v), lse (batch, heads, n_q)), float64, each sequence's dense attention
    (specs.reference.attention, bottom-right) over its slots of the cache after the append."""
    k_after, v_after = appended(k_cache, k, layout), appended(v_cache, v, layout)
    batch, n_q, heads, _ = q.shape
    out = np.zeros((batch, n_q, heads, v_cache.shape[3]))
    lse = np.full((batch, heads, n_q), -np.inf)
    sinks = kwargs.get("sinks")
    for b in range(batch):
        slots = layout.slots(b)
        if not len(slots) or not n_q:
            if sinks is not None:
                lse[b] = np.asarray(sinks, np.float64)[:, None]
            continue
        where = layout.where(b, slots)
        result = attention(to_dense(q[b]), to_dense(k_after[where]), to_dense(v_after[where]),
                           causal_alignment="bottom_right", **sequence_kwargs(kwargs, b))
        out[b] = result.out[0].transpose(1, 0, 2)
        lse[b] = result.lse[0]
    return out, lse


UNUSED_SLOTS = 2  # spare slots past every sequence's last key, and spare pages in a pool
OUT_OF_RANGE_PAGE = 1000  # past the pool: block_table entries past a sequence's pages hold the pool's size + this


@dataclass(frozen=True)
class CacheInputs:
    """A kv-cache call built from dense arrays (build_cache): its arrays, its keywords and where things lie."""

    q: np.ndarray  # (batch, n_q, heads, d)
    k_cache: np.ndarray
    v_cache: np.ndarray
    k: np.ndarray | None  # (batch, n_new, heads_kv, d), None when there are no new keys
    v: np.ndarray | None
    keywords: dict
    layout: CacheLayout

    @property
    def arrays(self) -> tuple[np.ndarray | None, ...]:
        return self.q, self.k_cache, self.v_cache, self.k, self.v

    def expected_caches(self) -> tuple[np.ndarray, np.ndarray]:
        """The caches as the call must leave them: the new keys and values appended, nothing else changed."""
        return appended(self.k_cache, self.k, self.layout), appended(self.v_cache, self.v, self.layout)


def build_cache(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, lengths_k: list[int], n_new: int,
                leftpad: list[int] | None = None, spare_rows: int | None = None, page_size: int | None = None,
                seed: int = 0) -> CacheInputs:
    """Sequence b of dense batch entry b: its first lengths_k[b] keys and values, the last n_new of them as the new
    keys to append, the others already in the cache from slot leftpad[b] on. Every slot outside them holds NaN, and
    UNUSED_SLOTS spare slots follow the longest. spare_rows (cache_batch_idx): the sequences use cache rows in
    reverse order among that many spare rows of finite values. page_size (block_table): the slots lie in pages of
    that size, shuffled in a pool with UNUSED_SLOTS spare pages, and one more block_table column past each
    sequence's pages holds an index outside the pool."""
    batch = q.shape[0]
    pad = np.asarray(leftpad if leftpad is not None else [0] * batch, np.int64)
    lengths = np.asarray(lengths_k, np.int64)
    seqlens = pad + lengths - n_new
    capacity = int((pad + lengths).max()) + UNUSED_SLOTS
    rng = np.random.default_rng(seed)
    rows = np.arange(batch)
    table = None
    if page_size is not None:
        per_sequence = -(-capacity // page_size)
        count = batch * per_sequence + UNUSED_SLOTS
        table = rng.permutation(count)[:batch * per_sequence].reshape(batch, per_sequence)
        table = np.concatenate([table, np.full((batch, 1), count + OUT_OF_RANGE_PAGE)], axis=1)
        slots = (count, page_size)
    else:
        count = batch + (spare_rows or 0)
        if spare_rows is not None:
            rows = count - 1 - np.arange(batch)
        slots = (count, capacity)
    layout = CacheLayout(seqlens, n_new, rows, pad, table, page_size or capacity)
    caches = []
    for x in (k, v):
        cache = np.full((*slots, x.shape[1], x.shape[3]), np.nan, x.dtype)
        if spare_rows and page_size is None:
            spare = np.setdiff1d(np.arange(count), rows)
            cache[spare] = rng.standard_normal((len(spare), capacity, x.shape[1], x.shape[3]))
        for b in range(batch):
            cache[layout.where(b, range(int(pad[b]), int(seqlens[b])))] = x[b, :, :lengths[b] - n_new].swapaxes(0, 1)
        caches.append(cache)
    new = [np.ascontiguousarray(np.stack([x[b, :, lengths[b] - n_new:lengths[b]].swapaxes(0, 1)
                                          for b in range(batch)])) if n_new else None for x in (k, v)]
    keywords = {"cache_seqlens": seqlens.astype(np.int32)}
    if leftpad is not None:
        keywords["cache_leftpad"] = pad.astype(np.int32)
    if spare_rows is not None and page_size is None:
        keywords["cache_batch_idx"] = rows.astype(np.int32)
    if table is not None:
        keywords["block_table"] = table.astype(np.int32)
    return CacheInputs(np.ascontiguousarray(q.swapaxes(1, 2)), caches[0], caches[1], new[0], new[1], keywords, layout)
