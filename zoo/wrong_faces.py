"""Deliberately wrong varlen and kv-cache attention (issue 22), one mistake each, written as an outside user would
(CONTRACT 1's varlen and kv-cache faces: plain functions, capabilities as an attribute, no import of the suite).
zoo/defects.py says what each models.

Every function is `_varlen` or `_kv_cache`, correct, with one thing changed through a hook, so the mistake is the
only difference a property can see. Causal is aligned bottom-right in every sequence, as FlashAttention does.
"""

import math

import numpy as np


def _attend(q, k, v, scale, causal, offset=None, empty=0.0, mods=None):
    """One sequence: q (n_q, heads, d), k and v (n_k, heads_kv, dim) -> out (n_q, heads, d_v) and lse (heads, n_q).
    `offset`: where query i's diagonal meets the keys (bottom-right by default); `empty`: a keyless row's output;
    `mods`: _Mods of this sequence (its sinks are the caller's: a split must not count them)."""
    n_q, heads, d = q.shape
    n_k = k.shape[0]
    if n_k == 0:
        return np.full((n_q, heads, v.shape[2]), empty, q.dtype), np.full((heads, n_q), -np.inf)
    group = heads // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) * (1 / math.sqrt(d) if scale is None else float(scale))
    shift = n_k - n_q if offset is None else offset
    distance = np.arange(n_q)[:, None] + shift - np.arange(n_k)[None, :]  # i + offset - j
    allowed = distance >= 0 if causal else np.ones((n_q, n_k), bool)
    if mods is not None:
        scores, band = mods.applied(scores, distance, causal)
        allowed = allowed & band
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    seen = np.isfinite(top)
    e = np.exp(scores - np.where(seen, top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    v = np.where(allowed.any(axis=0)[:, None, None], v, 0.0)  # a value no query sees is never multiplied
    out = np.einsum("hqk,khd->qhd", e / np.where(seen, total, 1.0), v)
    with np.errstate(divide="ignore"):
        lse = np.where(seen, top + np.log(np.where(seen, total, 1.0)), -np.inf)[..., 0]
    return out.astype(q.dtype), lse


class _Mods:
    """The score modifications of one sequence, FlashAttention's: softcap * tanh(s / softcap), then
    -slope * |i + offset - j|, a window left <= i + offset - j <= -right (negative: unbounded) and sinks in the
    denominator. The hooks: window_shift moves the window's diagonal (by a packed position), alibi_shift the
    ALiBi distance's (by a cache slot)."""

    def __init__(self, window_size=None, softcap=0.0, slopes=None, sinks=None, window_shift=0, alibi_shift=0):
        if window_size is not None and (not isinstance(window_size, tuple | list) or len(window_size) != 2
                                        or not all(isinstance(x, int) for x in window_size)):
            raise ValueError(f"window_size must be two ints (left, right), got {window_size!r}")
        if not math.isfinite(softcap):
            raise ValueError(f"softcap must be finite, got {softcap!r}")
        for name, x in (("alibi_slopes", slopes), ("sinks", sinks)):
            if x is not None and np.isnan(x).any():
                raise ValueError(f"{name} holds NaN")
        self.window, self.softcap, self.slopes, self.sinks = window_size, softcap, slopes, sinks
        self.window_shift, self.alibi_shift = window_shift, alibi_shift

    def applied(self, scores, distance, causal):
        """The modified scores (heads, n_q, n_k) and the window's band (n_q, n_k)."""
        if self.softcap > 0:
            scores = self.softcap * np.tanh(scores / self.softcap)
        if self.slopes is not None:
            scores = scores - self.slopes[:, None, None] * np.abs(distance + self.alibi_shift)
        band = np.ones(distance.shape, bool)
        if self.window is not None:
            left, right = self.window
            moved = distance + self.window_shift
            band = ((moved <= left) | (left < 0)) & ((moved >= -right) | (right < 0) | causal)
        return scores, band

    def with_sinks(self, out, lse):
        """(out, lse) of a row with the sinks joined to its denominator: they carry no value."""
        if self.sinks is None:
            return out, lse
        sink = np.broadcast_to(self.sinks[:, None], lse.shape)
        total = np.logaddexp(lse, sink)
        with np.errstate(invalid="ignore"):
            kept = np.where(np.isneginf(lse) | np.isposinf(sink), 0.0, np.exp(lse - total))
        return (out * kept.T[:, :, None]).astype(out.dtype), total


def _sequence_mods(mods, i, **shifts):
    """Sequence i's _Mods from the call's keywords (slopes per head or per sequence)."""
    slopes = mods.get("alibi_slopes")
    if slopes is not None:
        slopes = np.asarray(slopes, np.float64)
        if slopes.ndim not in (1, 2):
            raise ValueError(f"alibi_slopes must be (heads,) or (batch, heads), got {slopes.shape}")
        slopes = slopes[i] if slopes.ndim == 2 else slopes
    sinks = mods.get("sinks")
    return _Mods(mods.get("window_size"), float(mods.get("softcap") or 0.0), slopes,
                 None if sinks is None else np.asarray(sinks, np.float64), **shifts)


def _int32(name, x):
    if getattr(x, "dtype", None) != np.int32 or np.ndim(x) != 1:
        raise ValueError(f"{name} must be a 1-D int32 array")
    return np.asarray(x, np.int64)


def _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, scale=None, causal=False,
            seqused_k=None, return_lse=False, mods=None, keys_of=None, offset_of=None, empty=0.0, window_shift_of=None):
    """Packed sequences, each attending alone under the score modifications `mods` (keywords); the hooks:
    keys_of(i, cu_k, used, total_k) -> its key slice, offset_of(i, cu_q, cu_k) -> its causal offset, `empty` the
    output of a sequence with no key, window_shift_of(i, cu_q, cu_k) -> where its window's diagonal moves."""
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"k {k.shape} and v {v.shape} must share their keys and heads")
    cu_q, cu_k = _int32("cu_seqlens_q", cu_seqlens_q), _int32("cu_seqlens_k", cu_seqlens_k)
    for name, cu, total in (("cu_seqlens_q", cu_q, len(q)), ("cu_seqlens_k", cu_k, len(k))):
        if len(cu) != len(cu_q) or cu[0] != 0 or np.any(np.diff(cu) < 0) or cu[-1] > total:
            raise ValueError(f"{name} must be batch + 1 non-decreasing offsets from 0 to at most {total}")
    if max_seqlen_q < np.diff(cu_q).max() or max_seqlen_k < np.diff(cu_k).max():
        raise ValueError("max_seqlen_q and max_seqlen_k must bound the sequences' lengths")
    used = np.diff(cu_k) if seqused_k is None else _int32("seqused_k", seqused_k)
    if np.any(used > np.diff(cu_k)):
        raise ValueError("seqused_k must not exceed a sequence's keys")
    out = np.zeros((len(q), q.shape[1], v.shape[2]), q.dtype)
    lse = np.full((q.shape[1], len(q)), -np.inf)
    for i in range(len(cu_q) - 1):
        rows = slice(cu_q[i], cu_q[i + 1])
        keys = keys_of(i, cu_k, used, len(k)) if keys_of else slice(cu_k[i], cu_k[i] + used[i])
        offset = offset_of(i, cu_q, cu_k) if offset_of else None
        shifts = {"window_shift": window_shift_of(i, cu_q, cu_k)} if window_shift_of else {}
        sequence_mods = _sequence_mods(mods or {}, i, **shifts)
        out[rows], lse[:, rows] = sequence_mods.with_sinks(
            *_attend(q[rows], k[keys], v[keys], scale, causal, offset, empty, sequence_mods))
    return (out, lse) if return_lse else out


def _merge(parts):
    """Split-KV partials [(out, lse)] merged through their log-sum-exp."""
    lses = np.stack([lse for _, lse in parts])
    top = lses.max(axis=0)
    shift = np.where(np.isfinite(top), top, 0.0)
    weights = np.where(np.isposinf(top), np.isposinf(lses), np.exp(lses - shift))  # +inf: a sink's, every weight
    total = weights.sum(axis=0)
    out = sum(w.T[:, :, None] * o for w, (o, _) in zip(weights, parts, strict=True))
    with np.errstate(divide="ignore"):
        lse = np.where(np.isposinf(top), np.inf, np.log(total) + shift)
        return out / np.where(total > 0, total, 1.0).T[:, :, None], lse


def _kv_cache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens, cache_batch_idx=None, cache_leftpad=None,
              block_table=None, scale=None, causal=False, num_splits=1, return_lse=False, mods=None, write_at=0,
              after_append=None, first_slot=None, row_of=None, page_of=None, merge=_merge, alibi_shift_of=None,
              sinks_per_split=False, seqlen_of=None):
    """A decode step: append at cache_seqlens, then attend over the slots in `num_splits` splits under the score
    modifications `mods` (keywords). The hooks: write_at shifts the append, after_append(cache, b, end) runs after
    it, first_slot(b, leftpad) is where keys start, row_of(b, rows) the cache row, page_of(b, page, table, pool
    size) the physical page, `merge` the split merge, alibi_shift_of(b, leftpad) moves ALiBi's distance,
    sinks_per_split joins the sinks to every split's denominator instead of the merged one, and seqlen_of(b, seqlens)
    is the cache_seqlens entry a sequence attends up to."""
    batch, n_q, heads, _ = q.shape
    n_new = 0 if k is None else k.shape[1]
    seqlens = _int32("cache_seqlens", cache_seqlens)
    leftpad = np.zeros(batch, np.int64) if cache_leftpad is None else _int32("cache_leftpad", cache_leftpad)
    rows = np.arange(batch) if cache_batch_idx is None else _int32("cache_batch_idx", cache_batch_idx)
    page = k_cache.shape[1]
    capacity = page * (block_table.shape[1] if block_table is not None else 1)
    if np.any(seqlens + n_new > capacity):
        raise ValueError("cache_seqlens plus the new keys must fit the cache")

    def where(b, slots):
        if block_table is None:
            return (row_of(b, rows) if row_of else rows[b]), slots
        pages = np.array([page_of(b, p, block_table, len(k_cache)) if page_of else block_table[b, p]
                          for p in slots // page], np.int64)
        if np.any((pages < 0) | (pages >= len(k_cache))):
            raise ValueError(f"block_table row {b} names a page outside the cache")
        return pages, slots % page

    for b in range(batch if n_new else 0):
        slots = np.arange(seqlens[b], seqlens[b] + n_new) + write_at
        k_cache[where(b, slots)], v_cache[where(b, slots)] = k[b], v[b]
        if after_append:
            end = seqlens[b] + n_new
            after_append(k_cache, v_cache, where, b, end, capacity if block_table is None else -(-end // page) * page)
    out = np.zeros((batch, n_q, heads, v_cache.shape[3]), q.dtype)
    lse = np.full((batch, heads, n_q), -np.inf)
    for b in range(batch):
        start = first_slot(b, leftpad) if first_slot else leftpad[b]
        slots = np.arange(start, (seqlen_of(b, seqlens) if seqlen_of else seqlens[b]) + n_new)
        shifts = {"alibi_shift": alibi_shift_of(b, leftpad)} if alibi_shift_of else {}
        sequence_mods = _sequence_mods(mods or {}, b, **shifts)
        if not len(slots):
            out[b], lse[b] = sequence_mods.with_sinks(out[b], lse[b])
            continue
        parts = []
        for part in np.array_split(np.arange(len(slots)), min(num_splits, len(slots))):
            keys, values = k_cache[where(b, slots[part])], v_cache[where(b, slots[part])]
            shift = part[0] + n_q - len(slots)  # bottom-right over the whole sequence, not the split
            split = _attend(q[b], keys, values, scale, causal, -shift, mods=sequence_mods)
            parts.append(sequence_mods.with_sinks(*split) if sinks_per_split else split)
        merged = merge(parts)
        out[b], lse[b] = merged if sinks_per_split else sequence_mods.with_sinks(*merged)
    return (out, lse) if return_lse else out


_VARLEN = {"dtypes": ("float64",), "faces": ("varlen",), "causal_alignment": "bottom_right", "lse": True}
_KV_CACHE = {"dtypes": ("float64",), "faces": ("kvcache",), "causal_alignment": "bottom_right", "lse": True}


def _varlen_face(**hooks):
    def face(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, scale=None, causal=False,
             seqused_k=None, return_lse=False, window_size=None, softcap=0.0, alibi_slopes=None, sinks=None):
        mods = {"window_size": window_size, "softcap": softcap, "alibi_slopes": alibi_slopes, "sinks": sinks}
        return _varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale=scale, causal=causal,
                       seqused_k=seqused_k, return_lse=return_lse, mods=mods, **hooks)

    face.attention_capabilities = _VARLEN
    return face


def _kv_cache_face(**hooks):
    def face(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens, cache_batch_idx=None, cache_leftpad=None,
             block_table=None, scale=None, causal=False, num_splits=1, return_lse=False, window_size=None,
             softcap=0.0, alibi_slopes=None, sinks=None):
        mods = {"window_size": window_size, "softcap": softcap, "alibi_slopes": alibi_slopes, "sinks": sinks}
        return _kv_cache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                         cache_leftpad=cache_leftpad, block_table=block_table, scale=scale, causal=causal,
                         num_splits=num_splits, return_lse=return_lse, mods=mods, **hooks)

    face.attention_capabilities = _KV_CACHE
    return face


# -- varlen ----------------------------------------------------------------------------------------------------
varlen_keys_off_by_one = _varlen_face(keys_of=lambda i, cu, used, total: slice(cu[i], min(cu[i] + used[i] + 1, total)))
varlen_keys_off_by_one.__doc__ = "cu_seqlens_k read one key too far: each sequence sees the next one's first key"

varlen_last_sequence_to_the_end = _varlen_face(
    keys_of=lambda i, cu, used, total: slice(cu[i], total if i == len(cu) - 2 else cu[i] + used[i]))
varlen_last_sequence_to_the_end.__doc__ = "the last sequence's keys run to the end of the tensor, past cu_seqlens_k[-1]"

varlen_seqused_k_ignored = _varlen_face(keys_of=lambda i, cu, used, total: slice(cu[i], cu[i + 1]))
varlen_seqused_k_ignored.__doc__ = "seqused_k is accepted and ignored: keys past it are read"

varlen_causal_on_packed_index = _varlen_face(offset_of=lambda i, cu_q, cu_k: int(cu_q[i] - cu_k[i]))
varlen_causal_on_packed_index.__doc__ = "causal compares packed positions, not positions within the sequence"

varlen_empty_sequence_nan = _varlen_face(empty=np.nan)
varlen_empty_sequence_nan.__doc__ = "a sequence with no key gives NaN (0 / 0) instead of 0"


# -- kv cache --------------------------------------------------------------------------------------------------
def _clear_past(k_cache, v_cache, where, b, end, limit):
    """Zero the sequence's slots from its last key to `limit` (its row's end, or its last page's)."""
    slots = np.arange(end, limit)
    if len(slots):
        k_cache[where(b, slots)], v_cache[where(b, slots)] = 0.0, 0.0


cache_append_one_slot_late = _kv_cache_face(write_at=1)
cache_append_one_slot_late.__doc__ = "the new keys are written one slot past cache_seqlens"

cache_clears_slots_past_the_end = _kv_cache_face(after_append=_clear_past)
cache_clears_slots_past_the_end.__doc__ = "the append zeroes the row's slots past the new keys, which it must not touch"

cache_leftpad_ignored = _kv_cache_face(first_slot=lambda b, leftpad: 0)
cache_leftpad_ignored.__doc__ = "cache_leftpad is accepted and ignored: the padding slots are attended to"

cache_batch_idx_ignored = _kv_cache_face(row_of=lambda b, rows: b)
cache_batch_idx_ignored.__doc__ = "cache_batch_idx is accepted and ignored: sequence b reads cache row b"


def _reads_every_table_entry(b, page, table, pool):
    """The pool is indexed with the sequence's whole block_table row (a prefetch of every entry), then the page is
    taken from it."""
    return np.arange(pool)[table[b]][page]


block_table_read_past_pages = _kv_cache_face(page_of=_reads_every_table_entry)
block_table_read_past_pages.__doc__ = "every block_table entry of a sequence is read, past the pages it uses"

pages_assumed_contiguous = _kv_cache_face(page_of=lambda b, page, table, pool: table[b, 0] + page)
pages_assumed_contiguous.__doc__ = "a sequence's pages are taken as consecutive from its first: page order ignored"


def _minus_inf_as_zero(parts):
    return _merge([(out, np.where(np.isfinite(lse), lse, 0.0)) for out, lse in parts])


split_minus_inf_lse_as_zero = _kv_cache_face(merge=_minus_inf_as_zero)
split_minus_inf_lse_as_zero.__doc__ = "a split that sees no key (log-sum-exp -inf) is merged with log-sum-exp 0"


def _averaged(parts):
    seen = np.array([np.isfinite(lse) for _, lse in parts], np.float64)  # (splits, heads, n_q)
    total = np.maximum(seen.sum(axis=0), 1.0)
    out = sum((w / total).T[:, :, None] * o for w, (o, _) in zip(seen, parts, strict=True))
    return out, _merge(parts)[1]


num_splits_averaged = _kv_cache_face(merge=_averaged)
num_splits_averaged.__doc__ = "the outputs of the splits a row sees are averaged, not weighted by their log-sum-exp"

cache_equal_lengths_only = _kv_cache_face(seqlen_of=lambda b, seqlens: seqlens[0])
cache_equal_lengths_only.__doc__ = ("every sequence attends up to the first one's cache_seqlens: right only when all "
                                    "lengths are equal (the dense properties catch it through the adapter's decoy)")

varlen_equal_lengths_only = _varlen_face(
    keys_of=lambda i, cu, used, total: slice(cu[i], min(cu[i] + int(np.diff(cu).max()), total)))
varlen_equal_lengths_only.__doc__ = ("every sequence's keys are taken to be the longest one's: right only when all "
                                     "lengths are equal (the dense properties catch it through the adapter's decoys)")


# -- score modifications inside a pack or a cache ----------------------------------------------------------------
# the band's diagonal at packed query cu_q[i] + i and key cu_k[i] + j: moved by (cu_q[i] + n_q) - (cu_k[i] + n_k)
varlen_window_on_packed_positions = _varlen_face(window_shift_of=lambda i, cu_q, cu_k: int(cu_q[i + 1] - cu_k[i + 1]))
varlen_window_on_packed_positions.__doc__ = ("the window's band is placed on packed positions, not on positions "
                                             "within the sequence (causal is right)")

cache_alibi_from_slot_zero = _kv_cache_face(alibi_shift_of=lambda b, leftpad: -int(leftpad[b]))
cache_alibi_from_slot_zero.__doc__ = ("ALiBi's key positions are cache slots, counted from slot 0 through the left "
                                      "padding, not from the sequence's first key")

cache_sinks_in_every_split = _kv_cache_face(sinks_per_split=True)
cache_sinks_in_every_split.__doc__ = ("each split's softmax takes the sinks, so a split-KV merge counts them "
                                      "num_splits times")
