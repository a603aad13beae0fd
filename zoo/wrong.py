"""Deliberately wrong attention, one mistake each, written as an outside user would (CONTRACT 1: plain
functions, capabilities as an attribute, no import of the suite). zoo/defects.py says what each models.

Every function is the correct formula of `_attention` with one thing changed, so the mistake is the only
difference a property can see.
"""

import math

import numpy as np


def _expand(x, heads, kv_head_of=None):
    """kv heads -> one per query head; query head h reads kv head h // group unless `kv_head_of` says."""
    heads_kv = x.shape[1]
    index = [kv_head_of(h, heads, heads_kv) if kv_head_of else h // (heads // heads_kv) for h in range(heads)]
    return x[:, index]


def _visible(n_q, n_k, causal, mask, shape, offset=0):
    """Boolean (batch, heads, n_q, n_k) visibility, or None when everything is visible."""
    allowed = None
    if causal:
        allowed = np.broadcast_to(np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + offset, shape)
    if mask is not None:
        allowed = np.broadcast_to(mask, shape) if allowed is None else allowed & mask
    return allowed


def _softmax(scores, allowed):
    """Row softmax; rows with no visible key give 0."""
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(scores - top)
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total > 0, total, 1.0)


def _scored(q, k, v, scale=None, causal=False, mask=None, *, offset=0, kv_head_of=None, scale_of=None):
    """Scaled scores (nothing hidden yet), the visibility, and the values expanded to the query heads."""
    heads, n_q, d = q.shape[1], q.shape[2], q.shape[3]
    k, v = _expand(k, heads, kv_head_of), _expand(v, heads, kv_head_of)
    s = scale if scale is not None else (scale_of(q, v) if scale_of else 1 / math.sqrt(d))
    scores = (q @ k.swapaxes(-1, -2)) * s
    return scores, _visible(n_q, k.shape[2], causal, mask, scores.shape, offset), v


def _attention(q, k, v, scale=None, causal=False, mask=None, **hooks):
    """The correct formula (top-left causal unless `offset`), with the hooks the mistakes below change."""
    scores, allowed, v = _scored(q, k, v, scale, causal, mask, **hooks)
    weights = _softmax(scores, allowed)
    if allowed is not None:
        v = np.where(allowed.any(axis=-2)[..., None], v, 0.0)
    return weights @ v


# -- scale -----------------------------------------------------------------------------------------------
def scale_by_value_dim(q, k, v, *, scale=None, causal=False, mask=None):
    """Scale 1/sqrt(d_v) where d_v != d_k."""
    return _attention(q, k, v, scale, causal, mask, scale_of=lambda q, v: 1 / math.sqrt(v.shape[-1]))


def scale_one_over_d(q, k, v, *, scale=None, causal=False, mask=None):
    """Scale 1/d instead of 1/sqrt(d)."""
    return _attention(q, k, v, scale, causal, mask, scale_of=lambda q, v: 1 / q.shape[-1])


def explicit_scale_ignored(q, k, v, *, scale=None, causal=False, mask=None):
    """The scale keyword is ignored (always 1/sqrt(d))."""
    return _attention(q, k, v, None, causal, mask)


def decode_path_unscaled(q, k, v, *, scale=None, causal=False, mask=None):
    """A fast path for one query (decoding) that forgets the scale."""
    if q.shape[2] == 1:
        return _attention(q, k, v, 1.0, causal, mask)
    return _attention(q, k, v, scale, causal, mask)


def wide_head_path_wrong_scale(q, k, v, *, scale=None, causal=False, mask=None):
    """A kernel for head dims >= 128 that hard-codes the scale of d = 64."""
    if q.shape[-1] >= 128:
        return _attention(q, k, v, scale if scale is not None else 1 / 8, causal, mask)
    return _attention(q, k, v, scale, causal, mask)


# -- softmax ---------------------------------------------------------------------------------------------
def no_max_subtraction(q, k, v, *, scale=None, causal=False, mask=None):
    """Exp(S) without subtracting the row maximum: overflow above ~709."""
    scores, allowed, v = _scored(q, k, v, scale, causal, mask)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(scores) if allowed is None else np.where(allowed, np.exp(scores), 0.0)
        total = e.sum(axis=-1, keepdims=True)
        return (e / np.where(total > 0, total, 1.0)) @ v


def float32_softmax(q, k, v, *, scale=None, causal=False, mask=None):
    """float64 inputs and output, float32 inside (the jax.nn.dot_product_attention run of the issue)."""
    low = _attention(*(x.astype(np.float32) for x in (q, k, v)), scale, causal, mask)
    return low.astype(np.float64)


def long_keys_split_averaged(q, k, v, *, scale=None, causal=False, mask=None):
    """Past 512 keys, two halves are attended separately and their outputs averaged (not merged by lse)."""
    n_k = k.shape[2]
    if n_k <= 512 or causal or mask is not None:
        return _attention(q, k, v, scale, causal, mask)
    half = n_k // 2
    return 0.5 * (_attention(q, k[:, :, :half], v[:, :, :half], scale)
                  + _attention(q, k[:, :, half:], v[:, :, half:], scale))


def float16_serial_accumulation(q, k, v, *, scale=None, causal=False, mask=None):
    """float16 storage and a float16 accumulator updated one key at a time (no float32 inside)."""
    heads = q.shape[1]
    k, v = _expand(k, heads), _expand(v, heads)
    s = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    scores = (q.astype(np.float32) @ k.astype(np.float32).swapaxes(-1, -2)) * s
    allowed = _visible(q.shape[2], k.shape[2], causal, mask, scores.shape)
    weights = _softmax(scores, allowed).astype(np.float16)
    acc = np.zeros(q.shape[:3] + (v.shape[-1],), dtype=np.float16)
    for j in range(k.shape[2]):
        acc = acc + weights[..., j:j + 1] * v[:, :, j:j + 1, :]
    return acc


float16_serial_accumulation.attention_capabilities = {"dtypes": ("float16",)}


def softmax_over_query_axis(q, k, v, *, scale=None, causal=False, mask=None):
    """Softmax along the query axis."""
    scores, _, v = _scored(q, k, v, scale)
    return _softmax(scores.swapaxes(-1, -2), None).swapaxes(-1, -2) @ v


# -- masks -----------------------------------------------------------------------------------------------
def causal_declared_bottom_right(q, k, v, *, scale=None, causal=False, mask=None):
    """Declares FlashAttention >= 2.1's bottom-right alignment but masks top-left, as before 2.1."""
    return _attention(q, k, v, scale, causal, mask)


causal_declared_bottom_right.attention_capabilities = {"causal_alignment": "bottom_right"}


def causal_excludes_diagonal(q, k, v, *, scale=None, causal=False, mask=None):
    """Causal mask j < i: a query cannot see itself."""
    return _attention(q, k, v, scale, causal, mask, offset=-1 if causal else 0)


def mask_inverted(q, k, v, *, scale=None, causal=False, mask=None):
    """torch.nn.MultiheadAttention's convention (True = may NOT attend) used where True = may attend."""
    return _attention(q, k, v, scale, causal, None if mask is None else ~mask)


def mask_minus_ten_thousand(q, k, v, *, scale=None, causal=False, mask=None):
    """Hidden keys get score - 10000 added instead of being removed."""
    scores, allowed, v = _scored(q, k, v, scale, causal, mask)
    if allowed is not None:
        scores = scores + np.where(allowed, 0.0, -1e4)
    return _softmax(scores, None) @ v


def mask_keys_reversed(q, k, v, *, scale=None, causal=False, mask=None):
    """Padding read from the wrong end: the mask's key axis is reversed."""
    return _attention(q, k, v, scale, causal, None if mask is None else mask[..., ::-1])


def fully_masked_rows_nan(q, k, v, *, scale=None, causal=False, mask=None):
    """A row with no visible key gives 0/0 = NaN."""
    scores, allowed, v = _scored(q, k, v, scale, causal, mask)
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)) @ v


def fully_masked_rows_mean(q, k, v, *, scale=None, causal=False, mask=None):
    """Hidden scores set to the same large negative number, so a row with no visible key averages all."""
    scores, allowed, v = _scored(q, k, v, scale, causal, mask)
    if allowed is not None:
        scores = np.where(allowed, scores, np.finfo(scores.dtype).min)
    return _softmax(scores, None) @ v


def mask_added_as_minus_inf(q, k, v, *, scale=None, causal=False, mask=None):
    """The mask added to the scores as 0 / -inf: a NaN score stays NaN (NaN + -inf)."""
    scores, allowed, v = _scored(q, k, v, scale, causal, mask)
    if allowed is not None:
        scores = scores + np.where(allowed, 0.0, -np.inf)
    return _softmax(scores, None) @ np.where(np.isfinite(v), v, 0.0)


def hidden_values_multiplied(q, k, v, *, scale=None, causal=False, mask=None):
    """Hidden keys get weight 0, but P V still multiplies their values: 0 * NaN = NaN."""
    scores, allowed, v = _scored(q, k, v, scale, causal, mask)
    return _softmax(scores, allowed) @ v


def nan_scores_zeroed(q, k, v, *, scale=None, causal=False, mask=None):
    """np.nan_to_num on the inputs "for safety": a NaN the query sees disappears."""
    return _attention(np.nan_to_num(q), np.nan_to_num(k), np.nan_to_num(v), scale, causal, mask)


# -- heads and batches -----------------------------------------------------------------------------------
def gqa_heads_interleaved(q, k, v, *, scale=None, causal=False, mask=None):
    """Query head h reads kv head h % heads_kv (tile) instead of h // group (repeat_interleave)."""
    return _attention(q, k, v, scale, causal, mask, kv_head_of=lambda h, heads, heads_kv: h % heads_kv)


def gqa_first_kv_head_only(q, k, v, *, scale=None, causal=False, mask=None):
    """Every query head reads kv head 0."""
    return _attention(q, k, v, scale, causal, mask, kv_head_of=lambda h, heads, heads_kv: 0)


def first_batch_keys_for_all(q, k, v, *, scale=None, causal=False, mask=None):
    """Batch 0's keys and values used for every batch."""
    batch = q.shape[0]
    return _attention(q, np.repeat(k[:1], batch, axis=0), np.repeat(v[:1], batch, axis=0), scale, causal, mask)


def int16_head_offset(q, k, v, *, scale=None, causal=False, mask=None):
    """The flat offset of each kv head's block, computed in int16, wraps past 32767 elements."""
    b, h_kv, n_k, d = k.shape
    flat_k, flat_v = k.reshape(-1), v.reshape(-1)
    starts = (np.arange(b * h_kv, dtype=np.int64) * (n_k * d)).astype(np.int16).astype(np.int64) % flat_k.size
    starts_v = (np.arange(b * h_kv, dtype=np.int64) * (n_k * v.shape[-1])).astype(np.int16).astype(np.int64)
    rows = np.arange(n_k * d)
    k2 = np.stack([np.take(flat_k, s + rows, mode="wrap") for s in starts]).reshape(k.shape)
    rows_v = np.arange(n_k * v.shape[-1])
    v2 = np.stack([np.take(flat_v, s % flat_v.size + rows_v, mode="wrap") for s in starts_v]).reshape(v.shape)
    return _attention(q, k2, v2, scale, causal, mask)


# -- calls and memory ------------------------------------------------------------------------------------
_cache: dict = {}


def stale_cache_by_shape(q, k, v, *, scale=None, causal=False, mask=None):
    """Results cached by shape and flags only: the second call with new values gets the first result."""
    key = (q.shape, k.shape, v.shape, q.dtype.str, scale, causal, None if mask is None else mask.shape)
    if key not in _cache:
        _cache[key] = _attention(q, k, v, scale, causal, mask)
    return _cache[key].copy()


def scales_q_in_place(q, k, v, *, scale=None, causal=False, mask=None):
    """Q *= scale on the caller's array."""
    q *= scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    return _attention(q, k, v, 1.0, causal, mask)


def assumes_contiguous(q, k, v, *, scale=None, causal=False, mask=None):
    """Reads each input's elements in memory order as if that order were (batch, heads, seq, dim): right for
    C-contiguous arrays, scrambled for BSHD storage or Fortran order (a raw pointer without its strides)."""
    q, k, v = (x.ravel(order="K").reshape(x.shape) for x in (q, k, v))
    return _attention(q, k, v, scale, causal, mask)


# -- tiles, splits, pages, lse ---------------------------------------------------------------------------
def _tiled(q, k, v, scale, causal, block_cols, *, rescale_acc=True, drop_tail=False, normalise_each=False):
    heads = q.shape[1]
    k, v = _expand(k, heads), _expand(v, heads)
    s = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    n_q, n_k = q.shape[2], k.shape[2]
    top = np.full(q.shape[:3] + (1,), -np.inf)
    total = np.zeros(q.shape[:3] + (1,))
    acc = np.zeros(q.shape[:3] + (v.shape[-1],))
    stop = n_k - n_k % block_cols if drop_tail and n_k > block_cols else n_k
    for c0 in range(0, stop, block_cols):
        c1 = min(c0 + block_cols, n_k)
        scores = (q @ k[:, :, c0:c1].swapaxes(-1, -2)) * s
        if causal:
            scores = np.where(np.arange(c0, c1)[None, :] <= np.arange(n_q)[:, None], scores, -np.inf)
        if normalise_each:
            acc = acc + _softmax(scores, None) @ v[:, :, c0:c1]
            continue
        new_top = np.maximum(top, scores.max(axis=-1, keepdims=True))
        shift = np.where(np.isfinite(new_top), new_top, 0.0)
        e = np.exp(scores - shift)
        correction = np.exp(top - shift)
        total = total * correction + e.sum(axis=-1, keepdims=True)
        acc = (acc * correction if rescale_acc else acc) + e @ v[:, :, c0:c1]
        top = new_top
    if normalise_each:
        return acc
    return acc / np.where(total > 0, total, 1.0)


def tiled_acc_not_rescaled(q, k, v, *, scale=None, causal=False, block_cols=16):
    """Online softmax that rescales the running sum but not the running output when the max grows."""
    return _tiled(q, k, v, scale, causal, block_cols, rescale_acc=False)


def tiled_drops_last_partial_block(q, k, v, *, scale=None, causal=False, block_cols=16):
    """The key loop stops before a last partial block."""
    return _tiled(q, k, v, scale, causal, block_cols, drop_tail=True)


def tiled_normalises_each_block(q, k, v, *, scale=None, causal=False, block_cols=16):
    """Each key block softmaxed alone and summed."""
    return _tiled(q, k, v, scale, causal, block_cols, normalise_each=True)


for _fn in (tiled_acc_not_rescaled, tiled_drops_last_partial_block, tiled_normalises_each_block):
    _fn.attention_capabilities = {"tile_keywords": ("block_cols",)}


def _lse(q, k, scale):
    scores, _, _ = _scored(q, k, k, scale)
    top = scores.max(axis=-1, keepdims=True)
    return (top + np.log(np.exp(scores - top).sum(axis=-1, keepdims=True)))[..., 0]


def lse_in_base_two(q, k, v, *, scale=None, return_lse=False):
    """Log-sum-exp returned in base 2."""
    out = _attention(q, k, v, scale)
    return (out, _lse(q, k, scale) / math.log(2)) if return_lse else out


def lse_of_unscaled_scores(q, k, v, *, scale=None, return_lse=False):
    """Log-sum-exp of the unscaled scores."""
    out = _attention(q, k, v, scale)
    return (out, _lse(q, k, 1.0)) if return_lse else out


for _fn in (lse_in_base_two, lse_of_unscaled_scores):
    _fn.attention_capabilities = {"lse": True}


def split_merge_without_max(q, k, v, *, scale=None):
    """Two key splits merged with weights exp(lse_b) taken directly, without subtracting the largest."""
    n_k = k.shape[2]
    if n_k < 2:
        return _attention(q, k, v, scale)
    half = n_k // 2
    parts = [(k[:, :, sl], v[:, :, sl]) for sl in (slice(0, half), slice(half, None))]
    outs = [_attention(q, kk, vv, scale) for kk, vv in parts]
    with np.errstate(over="ignore", invalid="ignore"):
        weights = [np.exp(_lse(q, kk, scale))[..., None] for kk, _ in parts]
        return (weights[0] * outs[0] + weights[1] * outs[1]) / (weights[0] + weights[1])


def paged_pages_read_in_pool_order(q, k, v, *, scale=None, causal=False, page_size=16):
    """k and v scattered into shuffled pages (one table each), then read in pool order, ignoring the tables."""
    n_k = k.shape[2]
    pages = -(-n_k // page_size)
    rng = np.random.default_rng(n_k)
    order_k, order_v = rng.permutation(pages), rng.permutation(pages)

    def gather(x, order):
        padded = np.concatenate([x, np.zeros(x.shape[:2] + (pages * page_size - n_k, x.shape[3]))], axis=2)
        pool = padded.reshape(x.shape[:2] + (pages, page_size, x.shape[3]))[:, :, order]
        return pool.reshape(x.shape[:2] + (pages * page_size, x.shape[3]))[:, :, :n_k]

    return _attention(q, gather(k, order_k), gather(v, order_v), scale, causal)


paged_pages_read_in_pool_order.attention_capabilities = {"tile_keywords": ("page_size",)}


def dropout_survivors_not_rescaled(q, k, v, *, scale=None, causal=False, mask=None, dropout_p=0.0):
    """Dropout zeroes weights at rate p but leaves the survivors at p_ij instead of p_ij / (1 - p)."""
    scores, allowed, v = _scored(q, k, v, scale, causal, mask)
    weights = _softmax(scores, allowed)
    if dropout_p:
        weights = weights * (np.random.random(weights.shape) >= dropout_p)
    return weights @ v


# -- score modifications beyond the seeds ----------------------------------------------------------------
# The protocol's order (docs/checking-your-implementation.md): scaled scores, the cap c tanh(S / c), ALiBi
# -slope |i + offset - j|, the bias; then the window, causal, the mask and -inf biases hide keys; sinks join each
# row's denominator with no value. `offset` is the alignment's: 0 top-left, n_k - n_q bottom-right.
def _band(n_q, n_k, window, causal, offset):
    """Visibility of key j to query i under the window (left, right) and causal; a negative side is unbounded."""
    i, j = np.arange(n_q)[:, None] + offset, np.arange(n_k)[None, :]
    left, right = window if window is not None else (-1, -1)
    right = 0 if causal else right
    allowed = np.ones((n_q, n_k), bool)
    if left >= 0:
        allowed &= j >= i - left
    if right >= 0:
        allowed &= j <= i + right
    return allowed


def _distance(n_q, n_k, offset):
    return np.abs(np.arange(n_q)[:, None] + offset - np.arange(n_k)[None, :])


def _slopes(alibi_slopes, batch):
    """(batch, heads, 1, 1) slopes from (heads,) or (batch, heads)."""
    slopes = np.asarray(alibi_slopes, dtype=np.float64)
    return np.broadcast_to(slopes, (batch, slopes.shape[-1]))[:, :, None, None]


def _cap(scores, softcap):
    return softcap * np.tanh(scores / softcap) if softcap > 0 else scores


def _modified(q, k, v, scale=None, causal=False, mask=None, *, bias=None, window_size=None, softcap=0.0,
              alibi_slopes=None, sinks=None, return_lse=False, offset=0, window_offset=None, alibi_offset=None,
              sink_value=None, lse_sink=True, scores_of=None, band_of=_band, slopes_of=_slopes, hide_by_bias=True):
    """The correct formula with the modifications, and the hooks the mistakes below change."""
    heads, n_q, n_k = q.shape[1], q.shape[2], k.shape[2]
    k, v = _expand(k, heads), _expand(v, heads)
    s = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    raw = q @ k.swapaxes(-1, -2)
    if scores_of is not None:
        scores = scores_of(raw, s, softcap, bias)
    else:
        scores = _cap(raw * s, softcap)
        if bias is not None:
            scores = scores + bias
    if alibi_slopes is not None:
        distance = _distance(n_q, n_k, offset if alibi_offset is None else alibi_offset)
        scores = scores - slopes_of(alibi_slopes, q.shape[0]) * distance
    window_at = offset if window_offset is None else window_offset
    allowed = np.broadcast_to(band_of(n_q, n_k, window_size, causal, window_at), scores.shape)
    if mask is not None:
        allowed = allowed & mask
    hidden = np.isneginf(scores) if bias is None or not hide_by_bias else np.isneginf(scores) | np.isneginf(bias)
    allowed = allowed & ~hidden  # a -inf bias hides its key even where the score is NaN (NaN + -inf is NaN)
    scores = np.where(allowed, scores, -np.inf)
    sink = None if sinks is None else np.broadcast_to(np.asarray(sinks, np.float64)[None, :, None, None],
                                                      scores.shape[:3] + (1,))
    top = scores.max(axis=-1, keepdims=True) if sink is None else np.maximum(scores.max(axis=-1, keepdims=True), sink)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(scores - top)
    row_sum = e.sum(axis=-1, keepdims=True)
    total = row_sum if sink is None else row_sum + np.exp(sink - top)
    out = (e @ np.where(allowed.any(axis=-2)[..., None], v, 0.0)) / np.where(total > 0, total, 1.0)
    if sink is not None and sink_value is not None:
        out = out + np.exp(sink - top) * sink_value(v) / total
    if not return_lse:
        return out
    with np.errstate(divide="ignore"):
        lse = top + np.log(total if lse_sink else row_sum)
    return out, lse[..., 0]


def window_left_end_exclusive(q, k, v, *, scale=None, causal=False, mask=None, window_size=None):
    """The window's left end excluded: j > i - left instead of j >= i - left."""
    def band(n_q, n_k, window, causal, offset):
        inner = window if window is None or window[0] <= 0 else (window[0] - 1, window[1])
        return _band(n_q, n_k, inner, causal, offset)

    return _modified(q, k, v, scale, causal, mask, window_size=window_size, band_of=band)


def window_right_end_one_past(q, k, v, *, scale=None, causal=False, mask=None, window_size=None):
    """The window's right end one key too far: j <= i + right + 1."""
    def band(n_q, n_k, window, causal, offset):
        wider = window if window is None or window[1] < 0 or causal else (window[0], window[1] + 1)
        return _band(n_q, n_k, wider, causal, offset)

    return _modified(q, k, v, scale, causal, mask, window_size=window_size, band_of=band)


def window_ignores_alignment(q, k, v, *, scale=None, causal=False, mask=None, window_size=None):
    """Causal aligned bottom-right as declared, the window top-left (as if n_q = n_k)."""
    offset = k.shape[2] - q.shape[2]
    return _modified(q, k, v, scale, causal, mask, window_size=window_size, offset=offset, window_offset=0)


window_ignores_alignment.attention_capabilities = {"causal_alignment": "bottom_right"}


def window_masks_only_diagonal_tiles(q, k, v, *, scale=None, causal=False, mask=None, window_size=None,
                                     block_rows=16, block_cols=16):
    """The band masked element-wise only on tiles that hold a diagonal element.

    A tile wholly outside the band is skipped, so a tile that straddles the window's far edge is seen whole."""
    def band(n_q, n_k, window, causal, offset):
        exact = _band(n_q, n_k, window, causal, offset)
        allowed = np.zeros_like(exact)
        diagonal = np.arange(n_q)[:, None] + offset == np.arange(n_k)[None, :]
        for r in range(0, n_q, block_rows):
            for c in range(0, n_k, block_cols):
                tile = (slice(r, r + block_rows), slice(c, c + block_cols))
                if exact[tile].any():
                    allowed[tile] = exact[tile] if diagonal[tile].any() else True
        return allowed

    return _modified(q, k, v, scale, causal, mask, window_size=window_size, band_of=band)


window_masks_only_diagonal_tiles.attention_capabilities = {"tile_keywords": ("block_rows", "block_cols")}


def softcap_ignored(q, k, v, *, scale=None, causal=False, mask=None, softcap=0.0):
    """Takes the softcap keyword and never caps."""
    return _modified(q, k, v, scale, causal, mask)


def softcap_before_scale(q, k, v, *, scale=None, causal=False, mask=None, softcap=0.0):
    """The cap on the unscaled scores: scale * c tanh(q.k / c)."""
    return _modified(q, k, v, scale, causal, mask, softcap=softcap,
                     scores_of=lambda raw, s, c, bias: _cap(raw, c) * s)


def softcap_after_bias(q, k, v, *, scale=None, causal=False, mask=None, bias=None, softcap=0.0):
    """The cap on the scaled scores plus the bias, not before the bias is added (gemma2's order)."""
    return _modified(q, k, v, scale, causal, mask, bias=bias, softcap=softcap,
                     scores_of=lambda raw, s, c, bias: _cap(raw * s + (0.0 if bias is None else bias), c))


def alibi_sign_flipped(q, k, v, *, scale=None, causal=False, mask=None, alibi_slopes=None):
    """+slope |i - j|: the nearer a key, the smaller its score."""
    return _modified(q, k, v, scale, causal, mask, alibi_slopes=None if alibi_slopes is None else -alibi_slopes)


def alibi_ignores_alignment(q, k, v, *, scale=None, causal=False, mask=None, alibi_slopes=None):
    """Causal aligned bottom-right as declared, ALiBi's distance |i - j| without the offset n_k - n_q."""
    offset = k.shape[2] - q.shape[2]
    return _modified(q, k, v, scale, causal, mask, alibi_slopes=alibi_slopes, offset=offset, alibi_offset=0)


alibi_ignores_alignment.attention_capabilities = {"causal_alignment": "bottom_right"}


def alibi_batch_stride_ignored(q, k, v, *, scale=None, causal=False, mask=None, alibi_slopes=None):
    """(batch, heads) slopes indexed by head only: every batch reads batch 0's slopes."""
    def slopes(alibi_slopes, batch):
        flat = np.asarray(alibi_slopes, dtype=np.float64).reshape(-1)
        heads = np.asarray(alibi_slopes).shape[-1]
        return np.broadcast_to(flat[:heads], (batch, heads))[:, :, None, None]

    return _modified(q, k, v, scale, causal, mask, alibi_slopes=alibi_slopes, slopes_of=slopes)


def bias_broadcast_strides_ignored(q, k, v, *, scale=None, causal=False, mask=None, bias=None):
    """A broadcast bias read through the strides of a full (batch, heads, n_q, n_k) one.

    Element (b, h, i, j) is read at flat offset ((b H + h) n_q + i) n_k + j of the smaller array, wrapped
    (pytorch #112577's class)."""
    if bias is not None:
        shape = q.shape[:3] + (k.shape[2],)
        flat = np.asarray(bias).reshape(-1)
        bias = flat[np.arange(math.prod(shape)) % flat.size].reshape(shape)
    return _modified(q, k, v, scale, causal, mask, bias=bias)


def minus_inf_bias_added_to_nan(q, k, v, *, scale=None, causal=False, mask=None, bias=None):
    """A -inf bias entry added to the score, not hiding its key: a NaN key stays NaN and reaches the row."""
    return _modified(q, k, v, scale, causal, mask, bias=bias, hide_by_bias=False)


def bias_scaled_with_scores(q, k, v, *, scale=None, causal=False, mask=None, bias=None):
    """The bias added before the scale: scale * (q.k + bias)."""
    return _modified(q, k, v, scale, causal, mask, bias=bias,
                     scores_of=lambda raw, s, c, bias: (raw + (0.0 if bias is None else bias)) * s)


def sink_given_a_value(q, k, v, *, scale=None, causal=False, mask=None, sinks=None):
    """The sink in the numerator: an extra key whose value is the first key's instead of zero."""
    return _modified(q, k, v, scale, causal, mask, sinks=sinks, sink_value=lambda v: v[:, :, :1])


def sink_rescaled_unguarded(q, k, v, *, scale=None, causal=False, mask=None, sinks=None):
    """Online softmax one key at a time, its running maximum started at the sink and rescaled by exp(m - m_new)
    unguarded: right for every finite sink, but a sink of +inf gives exp(inf - inf) = NaN where the output is 0."""
    heads, n_q, n_k = q.shape[1], q.shape[2], k.shape[2]
    k, v = _expand(k, heads), _expand(v, heads)
    scores = q @ k.swapaxes(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    visible = _visible(n_q, n_k, causal, mask, scores.shape)
    scores = scores if visible is None else np.where(visible, scores, -np.inf)
    start = -np.inf if sinks is None else np.asarray(sinks, np.float64)[None, :, None]
    top = np.broadcast_to(start, scores.shape[:3]).copy()
    total = np.where(np.isneginf(top), 0.0, 1.0)
    acc = np.zeros(scores.shape[:3] + (v.shape[-1],))
    with np.errstate(invalid="ignore"):
        for j in range(n_k):
            new_top = np.maximum(top, scores[..., j])
            shift = np.where(np.isneginf(new_top), 0.0, new_top)
            rescale, weight = np.exp(top - shift), np.exp(scores[..., j] - shift)
            total = total * rescale + weight
            acc = acc * rescale[..., None] + weight[..., None] * v[:, :, None, j]
            top = new_top
    return acc / np.where(total > 0, total, 1.0)[..., None]


def sinks_ignored(q, k, v, *, scale=None, causal=False, mask=None, sinks=None):
    """Takes the sinks keyword and leaves the sinks out of the softmax."""
    return _modified(q, k, v, scale, causal, mask)


def sink_left_out_of_lse(q, k, v, *, scale=None, causal=False, mask=None, sinks=None, return_lse=False):
    """The output's denominator has the sink; the returned log-sum-exp is of the keys alone."""
    return _modified(q, k, v, scale, causal, mask, sinks=sinks, return_lse=return_lse, lse_sink=False)


sink_left_out_of_lse.attention_capabilities = {"lse": True}


# -- gradients of the modifications (tensors="torch": autograd reaches the inputs) ------------------------
def _torch_modified(q, k, v, scale, causal, mask, *, softcap=0.0, bias=None, cap=None, broadcast=None):
    """The correct formula in torch (top-left causal), with the cap and the bias's broadcast as hooks: autograd's
    own derivatives unless a mistake below replaces one with a torch.autograd.Function."""
    import torch

    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-1, -2)) * s
    if softcap > 0:
        scores = (cap or (lambda x, c: c * torch.tanh(x / c)))(scores, softcap)
    if bias is not None:
        scores = scores + (broadcast or (lambda b, shape: b.expand(shape)))(bias, scores.shape)
    visible = torch.ones(scores.shape, dtype=torch.bool)
    if causal:
        visible = visible & torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
    if mask is not None:
        visible = visible & mask
    visible = visible & (scores != -math.inf)
    weights = torch.softmax(scores.masked_fill(~visible, -math.inf), dim=-1)
    weights = torch.where(visible.any(dim=-1, keepdim=True), weights, 0.0)
    return weights @ torch.where(visible.any(dim=-2)[..., None], v, 0.0)


def _function(forward, backward):
    """A torch.autograd.Function of one tensor (and constants) with the given forward and backward."""
    import torch

    class Wrapped(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, *constants):
            ctx.constants = constants
            ctx.save_for_backward(x)
            return forward(x, *constants)

        @staticmethod
        def backward(ctx, grad):
            return (backward(grad, *ctx.saved_tensors, *ctx.constants), *(None for _ in ctx.constants))

    return Wrapped.apply


def softcap_backward_without_derivative(q, k, v, *, scale=None, causal=False, mask=None, softcap=0.0):
    """The cap's backward passes dS through without its derivative 1 - tanh^2 (flash-attention #1065's class)."""
    import torch

    cap = _function(lambda x, c: c * torch.tanh(x / c), lambda grad, x, c: grad)
    return _torch_modified(q, k, v, scale, causal, mask, softcap=softcap, cap=cap)


def dbias_first_of_broadcast_axes(q, k, v, *, scale=None, causal=False, mask=None, bias=None):
    """dBias of a broadcast bias taken from the first batch, head or row instead of summed over them.

    Each axis the bias is broadcast along gives its first entry's gradient, not the sum over the axis."""
    def backward(grad, b, shape):
        grad = grad.reshape((-1,) + grad.shape[-b.dim():])[:1] if grad.dim() > b.dim() else grad
        grad = grad.reshape(grad.shape[-b.dim():])
        return grad[tuple(slice(0, 1) if size == 1 else slice(None) for size in b.shape)]

    broadcast = _function(lambda b, shape: b.expand(shape).clone(), backward)
    return _torch_modified(q, k, v, scale, causal, mask, bias=bias, broadcast=broadcast)


softcap_backward_without_derivative.attention_capabilities = {"tensors": "torch"}
dbias_first_of_broadcast_axes.attention_capabilities = {"tensors": "torch", "differentiable_mods": ("bias",)}
