"""The correct zoo of the varlen and kv-cache faces (issue 22): attention written in unusual but legitimate ways,
as an outside user would (CONTRACT 1's faces, no import of the suite). Every applicable property, the dense ones
through the suite's adapters included, must pass on each (tests/suite_run/test_zoo.py).

Shared conventions: causal aligned bottom-right within each sequence; a row with no visible key gives 0 and
log-sum-exp -inf; a value no query sees is never multiplied (it may be NaN padding). varlen_padded_and_masked and
split_kv_uneven take FlashAttention's score modifications too: softcap * tanh(s / softcap), ALiBi's
-slope * |i + n_k - n_q - j|, a window left <= i + n_k - n_q - j <= -right (negative: unbounded), sinks.
"""

import itertools
import math

import numpy as np

_FLOAT = ("float64", "float32")


def _masked_attention(q, k, v, allowed, scale, softcap=0.0, bias=None, sinks=None):
    """Dense (batch, heads, n_q, d) attention under a boolean `allowed` (batch, 1, n_q, n_k), in q's precision;
    returns the output and the log-sum-exp. The scores are capped by `softcap`, then `bias` is added; `sinks`
    (heads,) join as one more key whose value is 0."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = (q @ k.swapaxes(-1, -2)) * q.dtype.type(s)
    if softcap > 0:
        scores = q.dtype.type(softcap) * np.tanh(scores / q.dtype.type(softcap))
    scores = np.where(allowed, scores if bias is None else scores + bias.astype(q.dtype), -np.inf)
    v = np.where(allowed.any(axis=-2)[..., None], v, 0)
    if sinks is not None:  # the sink key: every query sees it, its value is 0
        column = np.broadcast_to(sinks.astype(q.dtype)[None, :, None, None], scores.shape[:3] + (1,))
        scores = np.concatenate([scores, column], axis=-1)
        v = np.concatenate([v, np.zeros(v.shape[:2] + (1, v.shape[3]), v.dtype)], axis=2)
    top = scores.max(axis=-1, keepdims=True, initial=-np.inf)  # -inf for a sequence with no key
    seen = np.isfinite(top)  # -inf: no key; +inf: a sink of +inf takes every weight; NaN: a NaN it sees
    e = np.exp(scores - np.where(seen, top, 0))
    total = e.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        out = np.where(np.isposinf(top), 0, (e / np.where(seen, total, 1)) @ v)
    with np.errstate(divide="ignore"):
        lse = np.where(seen, top + np.log(np.where(seen, total, 1)), top)[..., 0]
    return out.astype(q.dtype), lse


def _check_mods(heads, batch, window_size, softcap, alibi_slopes, sinks):
    """The score modifications' keywords, each named when out of the protocol; slopes as (batch, heads)."""
    if window_size is not None and (not isinstance(window_size, tuple | list) or len(window_size) != 2 or not all(
            isinstance(side, int) and not isinstance(side, bool) for side in window_size)):
        raise ValueError(f"window_size must be (left, right) integers, got {window_size!r}")
    if not isinstance(softcap, int | float) or not math.isfinite(softcap):
        raise ValueError(f"softcap must be a finite number, got {softcap!r}")
    for name, x, shapes in (("alibi_slopes", alibi_slopes, ((heads,), (batch, heads))), ("sinks", sinks, ((heads,),))):
        if x is not None and (np.shape(x) not in shapes or np.isnan(x).any()):
            raise ValueError(f"{name} must be an array of shape {' or '.join(map(str, shapes))} without NaN")
    return None if alibi_slopes is None else np.broadcast_to(np.asarray(alibi_slopes, np.float64), (batch, heads))


def _score_bias(n_q, n_k, slopes):
    """ALiBi as an additive bias (heads, n_q, n_k) for one sequence's slopes (heads,), or None."""
    if slopes is None:
        return None
    distance = np.arange(n_q)[:, None] + (n_k - n_q) - np.arange(n_k)[None, :]
    return -slopes[:, None, None] * np.abs(distance)


def _causal(n_q, n_k, causal, window_size=None):
    """Bottom-right causal visibility (n_q, n_k) within the window (left, right), or all visible."""
    distance = np.arange(n_q)[:, None] + (n_k - n_q) - np.arange(n_k)[None, :]
    left, right = window_size if window_size is not None else (-1, -1)
    return ((distance >= 0) if causal else (distance >= -right) | (right < 0)) & ((distance <= left) | (left < 0))


def _check_packing(q, k, v, cu_q, cu_k, max_q, max_k, seqused_k):
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"k {k.shape} and v {v.shape} must share total_k and heads_kv")
    for name, cu, total in (("cu_seqlens_q", cu_q, len(q)), ("cu_seqlens_k", cu_k, len(k))):
        if getattr(cu, "dtype", None) != np.int32 or cu.ndim != 1 or len(cu) != len(cu_q) or cu[0] != 0 \
                or np.any(np.diff(cu) < 0) or cu[-1] > total:
            raise ValueError(f"{name} must be batch + 1 non-decreasing int32 offsets from 0 to at most {total}")
    if max_q < np.diff(cu_q).max() or max_k < np.diff(cu_k).max():
        raise ValueError("max_seqlen_q and max_seqlen_k must bound the lengths")
    used = np.diff(cu_k) if seqused_k is None else np.asarray(seqused_k, np.int64)
    if seqused_k is not None and (getattr(seqused_k, "dtype", None) != np.int32 or np.any(used > np.diff(cu_k))):
        raise ValueError("seqused_k must be int32, at most each sequence's keys")
    return used


def varlen_padded_and_masked(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, scale=None,
                             causal=False, seqused_k=None, return_lse=False, window_size=None, softcap=0.0,
                             alibi_slopes=None, sinks=None):
    """Varlen by padding every sequence to max_seqlen_q x max_seqlen_k and one masked dense call: the window folded
    into the mask, ALiBi into an additive bias, the sinks as one more key of value 0."""
    used = _check_packing(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
    batch = len(cu_seqlens_q) - 1
    slopes = _check_mods(q.shape[1], batch, window_size, softcap, alibi_slopes, sinks)
    bias = None if slopes is None else np.zeros((batch, q.shape[1], max_seqlen_q, max_seqlen_k))
    lengths_q = np.diff(cu_seqlens_q)
    dense_q = np.zeros((batch, q.shape[1], max_seqlen_q, q.shape[2]), q.dtype)
    dense_k = np.zeros((batch, k.shape[1], max_seqlen_k, k.shape[2]), k.dtype)
    dense_v = np.zeros((batch, v.shape[1], max_seqlen_k, v.shape[2]), v.dtype)
    allowed = np.zeros((batch, 1, max_seqlen_q, max_seqlen_k), bool)
    for b in range(batch):
        n_q, n_k = int(lengths_q[b]), int(used[b])
        dense_q[b, :, :n_q] = q[cu_seqlens_q[b]:cu_seqlens_q[b] + n_q].swapaxes(0, 1)
        dense_k[b, :, :n_k] = k[cu_seqlens_k[b]:cu_seqlens_k[b] + n_k].swapaxes(0, 1)
        dense_v[b, :, :n_k] = v[cu_seqlens_k[b]:cu_seqlens_k[b] + n_k].swapaxes(0, 1)
        allowed[b, 0, :n_q, :n_k] = _causal(n_q, n_k, causal, window_size)
        if bias is not None:
            bias[b, :, :n_q, :n_k] = _score_bias(n_q, n_k, slopes[b])
    out, lse = _masked_attention(dense_q, dense_k, dense_v, allowed, scale, softcap, bias,
                                 None if sinks is None else np.asarray(sinks))
    packed = np.zeros((len(q), q.shape[1], v.shape[2]), q.dtype)
    packed_lse = np.full((q.shape[1], len(q)), -np.inf)
    for b in range(batch):
        rows = slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]))
        packed[rows] = out[b, :, :lengths_q[b]].swapaxes(0, 1)
        packed_lse[:, rows] = lse[b, :, :lengths_q[b]]
    return (packed, packed_lse.astype(q.dtype)) if return_lse else packed


def varlen_as_dense_calls(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, scale=None,
                          causal=False, return_lse=False):
    """Varlen as one dense call per sequence, the packed rows concatenated back (no seqused_k)."""
    _check_packing(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, None)
    outs, lses = [], []
    for b in range(len(cu_seqlens_q) - 1):
        qs, ks, vs = (x[cu[b]:cu[b + 1]].swapaxes(0, 1)[None]
                      for x, cu in ((q, cu_seqlens_q), (k, cu_seqlens_k), (v, cu_seqlens_k)))
        out, lse = _masked_attention(qs, ks, vs, _causal(qs.shape[2], ks.shape[2], causal)[None, None], scale)
        outs.append(out[0].swapaxes(0, 1))
        lses.append(lse[0])
    tail = len(q) - int(cu_seqlens_q[-1])
    outs.append(np.zeros((tail, q.shape[1], v.shape[2]), q.dtype))
    lses.append(np.full((q.shape[1], tail), -np.inf))
    out, lse = np.concatenate(outs), np.concatenate(lses, axis=1)
    return (out, lse.astype(q.dtype)) if return_lse else out


def _cache_slots(b, k_cache, seqlens, n_new, leftpad, rows, block_table, end=None):
    """(first, second) cache indices of sequence b's slots leftpad .. end (default: its last key)."""
    start = 0 if leftpad is None else int(leftpad[b])
    slots = np.arange(start, int(seqlens[b]) + n_new if end is None else end)
    if block_table is None:
        return np.full(len(slots), b if rows is None else int(rows[b])), slots
    page = k_cache.shape[1]
    pages = np.asarray(block_table)[b, slots // page].astype(np.int64)
    if np.any((pages < 0) | (pages >= len(k_cache))):
        raise ValueError(f"block_table row {b} names a page outside the cache for a page the sequence uses")
    return pages, slots % page


def _append(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table):
    if getattr(cache_seqlens, "dtype", None) != np.int32:
        raise ValueError("cache_seqlens must be int32")
    n_new = 0 if k is None else k.shape[1]
    capacity = k_cache.shape[1] * (1 if block_table is None else np.asarray(block_table).shape[1])
    if np.any(np.asarray(cache_seqlens) + n_new > capacity):
        raise ValueError("cache_seqlens plus the new keys is past the cache")
    for b in range(q.shape[0] if n_new else 0):
        start = int(cache_seqlens[b])
        where = _cache_slots(b, k_cache, cache_seqlens, n_new, [start] * q.shape[0], cache_batch_idx, block_table)
        k_cache[where], v_cache[where] = k[b], v[b]
    return n_new


def paged_cache_gathered(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens, cache_batch_idx=None,
                         cache_leftpad=None, block_table=None, scale=None, causal=False, return_lse=False):
    """A decode step that gathers each sequence's slots (from its pages, in block_table's order) into a
    contiguous array first, then makes one dense call per sequence."""
    n_new = _append(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table)
    batch, n_q, heads, _ = q.shape
    out = np.zeros((batch, n_q, heads, v_cache.shape[3]), q.dtype)
    lse = np.full((batch, heads, n_q), -np.inf)
    for b in range(batch):
        where = _cache_slots(b, k_cache, cache_seqlens, n_new, cache_leftpad, cache_batch_idx, block_table)
        keys, values = (np.ascontiguousarray(c[where].swapaxes(0, 1))[None] for c in (k_cache, v_cache))
        if keys.shape[2]:
            seq_out, lse[b] = (x[0] for x in _masked_attention(q[b].swapaxes(0, 1)[None], keys, values,
                                                              _causal(n_q, keys.shape[2], causal)[None, None],
                                                              scale))
            out[b] = seq_out.swapaxes(0, 1)
    return (out, lse.astype(q.dtype)) if return_lse else out


def split_kv_uneven(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens, cache_batch_idx=None,
                    block_table=None, scale=None, causal=False, num_splits=1, return_lse=False, window_size=None,
                    softcap=0.0, alibi_slopes=None, sinks=None):
    """A decode step cut into num_splits splits of doubling sizes (1, 2, 4, ... keys, the last taking the rest),
    each normalised alone and merged through log-sum-exp by a running logaddexp that starts from the sinks (a
    split of value 0 and log-sum-exp sink)."""
    batch, n_q, heads, _ = q.shape
    slopes = _check_mods(heads, batch, window_size, softcap, alibi_slopes, sinks)
    n_new = _append(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table)
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
        raise ValueError(f"num_splits must be a positive int, got {num_splits!r}")
    start = np.full((1, heads, n_q), -np.inf) if sinks is None else \
        np.broadcast_to(np.asarray(sinks, np.float64)[None, :, None], (1, heads, n_q))
    out = np.zeros((batch, n_q, heads, v_cache.shape[3]), q.dtype)
    lse = np.full((batch, heads, n_q), -np.inf)
    for b in range(batch):
        where = _cache_slots(b, k_cache, cache_seqlens, n_new, None, cache_batch_idx, block_table)
        n_k = len(where[1])
        cuts = sorted({min(2 ** i - 1, n_k) for i in range(num_splits)} | {n_k})
        visible = _causal(n_q, n_k, causal, window_size)
        bias = None if slopes is None else _score_bias(n_q, n_k, slopes[b])
        acc, total = np.zeros((1, heads, n_q, v_cache.shape[3])), start
        for lo, hi in itertools.pairwise(cuts):
            part = (where[0][lo:hi], where[1][lo:hi])
            keys, values = (np.ascontiguousarray(c[part].swapaxes(0, 1))[None] for c in (k_cache, v_cache))
            part_out, part_lse = _masked_attention(q[b].swapaxes(0, 1)[None], keys, values,
                                                   visible[None, None, :, lo:hi], scale, softcap,
                                                   None if bias is None else bias[:, :, lo:hi])
            merged = np.logaddexp(total, part_lse)
            flooded = np.isposinf(merged)  # a sink of +inf, which takes every weight (a NaN stays NaN)
            safe = np.where(np.isfinite(merged), merged, 0)
            with np.errstate(invalid="ignore", over="ignore"):
                acc = np.where(flooded[..., None], 0, acc * np.exp(total - safe)[..., None]
                               + part_out * np.exp(part_lse - safe)[..., None])
            total = merged
        out[b], lse[b] = acc[0].swapaxes(0, 1), total[0]
    return (out, lse.astype(q.dtype)) if return_lse else out


varlen_padded_and_masked.attention_capabilities = {"dtypes": _FLOAT, "faces": ("varlen",), "lse": True,
                                                   "causal_alignment": "bottom_right"}
varlen_as_dense_calls.attention_capabilities = {"dtypes": _FLOAT, "faces": ("varlen",), "lse": True,
                                                "causal_alignment": "bottom_right"}
for _fn in (paged_cache_gathered, split_kv_uneven):
    _fn.attention_capabilities = {"dtypes": _FLOAT, "faces": ("kvcache",), "lse": True,
                                  "causal_alignment": "bottom_right"}

CORRECT_FACES = ("varlen_padded_and_masked", "varlen_as_dense_calls", "paged_cache_gathered", "split_kv_uneven")
