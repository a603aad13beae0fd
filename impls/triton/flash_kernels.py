"""FlashAttention-2 as Triton kernels: the forward (online softmax over key tiles), and the backward as
FlashAttention-2's, dK and dV by key tiles and dQ by query tiles, each recomputing P = exp2(S - LSE) from the
saved log-sum-exp. Seed 000 § Flash Attention; the launch, checks and autograd are impls/triton/triton_flash.py.

Every tensor is contiguous (batch, heads, n, dim); query head h reads key/value head h // group (GQA). A program's
tile is `block_rows` queries (or `block_cols` keys) at runtime, laid over a power-of-two range (BLOCK_*, which
tl.arange needs) and masked past the tile and past the sequence: any tile size is a legitimate launch. Scores are
kept in base 2 (the scale carries log2(e)); the dots take float32 operands with input_precision="ieee" (a GPU
would otherwise use tf32, which no tolerance term here covers); float16 and bfloat16 are widened on load, so the
interpreter's bfloat16 tl.dot (it multiplies the raw bit patterns, triton-lang/triton#11584) is never reached.
Which keys a query sees: key j is visible to query i when j - (i + offset) lies in [-left, right] (a negative side
unbounded; causal is right = 0), as specs.score_mods.window_visible says. A key no query of a tile sees gets
value 0 there, so a NaN behind the window never meets a weight of 0 (0 * NaN is NaN).
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2_E = 1.4426950408889634
# the dropout hash of specs.dropout_mask: two (xor-shift 16, multiply) steps and a final xor-shift 15, per coordinate
MIX_FIRST, MIX_SECOND, LOW_32 = 0x21F0AAAD, 0x735A2D97, 0xFFFFFFFF


@triton.jit
def _tanh(x):
    """tanh in float32 from exp2 (the interpreter has no libdevice): a Taylor polynomial below |x| = 1/8 (its
    first omitted term is below 4e-10 relative), (1 - e^-2|x|) / (1 + e^-2|x|) above (at most a few ulps)."""
    a = tl.abs(x)
    e = tl.exp2(a * (-2.0 * LOG2_E))
    t = (1.0 - e) / (1.0 + e)
    x2 = x * x
    series = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))))
    return tl.where(a < 0.125, series, tl.where(x < 0, -t, t))


@triton.jit
def _mix(x):
    x = x ^ (x >> 16)
    x = (x * MIX_FIRST) & LOW_32
    x = x ^ (x >> 16)
    x = (x * MIX_SECOND) & LOW_32
    return x ^ (x >> 15)


@triton.jit
def _visible(rows, cols, row_ok, col_ok, offset, left, right):
    """(rows, cols) True where the key is in the sequence and within the window of the query's diagonal."""
    past = cols[None, :] - (rows[:, None] + offset)
    inside = row_ok[:, None] & col_ok[None, :]
    inside = inside & ((left < 0) | (past >= -left))
    return inside & ((right < 0) | (past <= right))


@triton.jit
def _scores(q, k, rows, cols, row_ok, col_ok, offset, left, right, softcap_log2, SOFTCAP: tl.constexpr):
    """A tile's scores in base 2 (q carries scale * log2(e)), capped, -inf where the key is not visible; and the
    visibility itself."""
    s = tl.dot(q, tl.trans(k), input_precision="ieee")
    if SOFTCAP:
        s = softcap_log2 * _tanh(s / softcap_log2)
    visible = _visible(rows, cols, row_ok, col_ok, offset, left, right)
    return tl.where(visible, s, float("-inf")), visible


@triton.jit
def _dropout_scale(row_keys, cols, threshold, keep_scale):
    """keep / (1 - p) for a tile: specs.dropout_mask.keep_from_row_keys on the rows' keys and the tile's columns."""
    bits = _mix(row_keys[:, None] ^ cols[None, :].to(tl.int64)) >> 8
    return tl.where(bits >= threshold, keep_scale, 0.0)


@triton.jit
def _key_range(first_row, last_row, n_k, offset, left, right):
    """[start, stop) of the keys some query in [first_row, last_row] may see."""
    start = 0
    stop = n_k
    if left >= 0:
        start = tl.maximum(first_row + offset - left, 0)
    if right >= 0:
        stop = tl.minimum(last_row + offset + right + 1, n_k)
    return start, tl.maximum(start, stop)


@triton.jit
def _query_range(first_col, last_col, n_q, offset, left, right):
    """[start, stop) of the queries that may see some key in [first_col, last_col]."""
    start = 0
    stop = n_q
    if right >= 0:
        start = tl.maximum(first_col - offset - right, 0)
    if left >= 0:
        stop = tl.minimum(last_col - offset + left + 1, n_q)
    return start, tl.maximum(start, stop)


@triton.jit
def _query_tile(Q, bh, n_q, d, block_rows, qk_scale, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    """The program's `block_rows` queries of (batch, head) bh: their rows, which are real, and q (float32, times
    the scale in base 2), zero past the tile and the sequence."""
    rows = tl.program_id(0) * block_rows + tl.arange(0, BLOCK_M)
    row_ok = (tl.arange(0, BLOCK_M) < block_rows) & (rows < n_q)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + (bh * n_q + rows[:, None]) * d + dims[None, :], mask=row_ok[:, None] & (dims[None, :] < d),
                other=0.0).to(tl.float32) * qk_scale
    return rows, row_ok, q


@triton.jit
def flash_forward(Q, K, V, Out, Lse, RowKeys, n_q, n_k, d, d_v, heads, group, qk_scale, softcap_log2, offset,
                  left, right, block_rows, block_cols, drop_threshold, keep_scale, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, VALUE_DIM: tl.constexpr, SOFTCAP: tl.constexpr,
                  DROPOUT: tl.constexpr):
    """One tile of `block_rows` queries of one (batch, head): out and the natural-log LSE (-inf, out 0: no key)."""
    bh = tl.program_id(1)
    bkv = (bh // heads) * (heads // group) + (bh % heads) // group
    dims = tl.arange(0, HEAD_DIM)
    vdims = tl.arange(0, VALUE_DIM)
    rows, row_ok, q = _query_tile(Q, bh, n_q, d, block_rows, qk_scale, BLOCK_M, HEAD_DIM)
    row_keys = tl.load(RowKeys + bh * n_q + rows, mask=row_ok, other=0) if DROPOUT else 0
    row_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    row_sum = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, VALUE_DIM), tl.float32)
    first_row = tl.program_id(0) * block_rows
    start, stop = _key_range(first_row, tl.minimum(first_row + block_rows, n_q) - 1, n_k, offset, left, right)
    for col0 in range(start, stop, block_cols):
        cols = col0 + tl.arange(0, BLOCK_N)
        col_ok = (tl.arange(0, BLOCK_N) < block_cols) & (cols < stop)
        k = tl.load(K + (bkv * n_k + cols[:, None]) * d + dims[None, :], mask=col_ok[:, None] & (dims[None, :] < d),
                    other=0.0).to(tl.float32)
        s, visible = _scores(q, k, rows, cols, row_ok, col_ok, offset, left, right, softcap_log2, SOFTCAP)
        seen = tl.max(visible.to(tl.int32), axis=0) > 0
        v = tl.load(V + (bkv * n_k + cols[:, None]) * d_v + vdims[None, :],
                    mask=seen[:, None] & (vdims[None, :] < d_v), other=0.0).to(tl.float32)
        new_max = tl.maximum(row_max, tl.max(s, axis=1))
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        p = tl.exp2(s - shift[:, None])
        rescale = tl.exp2(row_max - shift)
        row_sum = row_sum * rescale + tl.sum(p, axis=1)
        row_max = new_max
        if DROPOUT:
            p = p * _dropout_scale(row_keys, cols, drop_threshold, keep_scale)
        acc = acc * rescale[:, None] + tl.dot(p, v, input_precision="ieee")
    has_keys = row_sum > 0
    acc = acc / tl.where(has_keys, row_sum, 1.0)[:, None]
    tl.store(Out + (bh * n_q + rows[:, None]) * d_v + vdims[None, :], acc.to(Out.dtype.element_ty),
             mask=row_ok[:, None] & (vdims[None, :] < d_v))
    lse = tl.where(has_keys, (row_max + tl.log2(tl.where(has_keys, row_sum, 1.0))) / LOG2_E, float("-inf"))
    tl.store(Lse + bh * n_q + rows, lse, mask=row_ok)


@triton.jit
def _weights_and_scores_gradient(q, k, v, d_out, lse_log2, row_dot, rows, cols, row_ok, col_ok, row_keys, offset,
                                 left, right, softcap_log2, drop_threshold, keep_scale, SOFTCAP: tl.constexpr,
                                 DROPOUT: tl.constexpr):
    """A tile's weights as the forward kept them (dropout applied) and dS (base-2 scores' gradient, the cap's
    derivative applied): P = exp2(S - LSE), dP = dO V^T, dS = P * (dP - D)."""
    raw = tl.dot(q, tl.trans(k), input_precision="ieee")
    s = raw
    if SOFTCAP:
        s = softcap_log2 * _tanh(raw / softcap_log2)
    visible = _visible(rows, cols, row_ok, col_ok, offset, left, right)
    p = tl.where(visible, tl.exp2(s - lse_log2[:, None]), 0.0)
    d_p = tl.dot(d_out, tl.trans(v), input_precision="ieee")
    kept = p
    if DROPOUT:
        scale = _dropout_scale(row_keys, cols, drop_threshold, keep_scale)
        kept = p * scale
        d_p = d_p * scale
    d_s = tl.where(visible, p * (d_p - row_dot[:, None]), 0.0)  # a hidden NaN value or key reaches no gradient
    if SOFTCAP:
        capped = _tanh(raw / softcap_log2)
        d_s = d_s * (1.0 - capped * capped)
    return kept, d_s


@triton.jit
def flash_backward_keys(Q, K, V, DOut, LseLog2, RowDot, RowKeys, DK, DV, n_q, n_k, d, d_v, heads, group,
                        qk_scale, softcap_log2, offset, left, right, block_rows, block_cols, drop_threshold,
                        keep_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                        VALUE_DIM: tl.constexpr, SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr):
    """dK (in base-2 score units: the launcher multiplies by ln 2) and dV of one tile of `block_cols` keys, for
    query head program_id(1): the query tiles that may see them, in order."""
    bh = tl.program_id(1)
    bkv = (bh // heads) * (heads // group) + (bh % heads) // group
    cols = tl.program_id(0) * block_cols + tl.arange(0, BLOCK_N)
    col_ok = (tl.arange(0, BLOCK_N) < block_cols) & (cols < n_k)
    dims = tl.arange(0, HEAD_DIM)
    vdims = tl.arange(0, VALUE_DIM)
    k = tl.load(K + (bkv * n_k + cols[:, None]) * d + dims[None, :], mask=col_ok[:, None] & (dims[None, :] < d),
                other=0.0).to(tl.float32)
    v = tl.load(V + (bkv * n_k + cols[:, None]) * d_v + vdims[None, :], mask=col_ok[:, None] & (vdims[None, :] < d_v),
                other=0.0).to(tl.float32)
    d_k = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    d_v_acc = tl.zeros((BLOCK_N, VALUE_DIM), tl.float32)
    first_col = tl.program_id(0) * block_cols
    start, stop = _query_range(first_col, tl.minimum(first_col + block_cols, n_k) - 1, n_q, offset, left, right)
    for row0 in range(start, stop, block_rows):
        rows = row0 + tl.arange(0, BLOCK_M)
        row_ok = (tl.arange(0, BLOCK_M) < block_rows) & (rows < stop)
        q = tl.load(Q + (bh * n_q + rows[:, None]) * d + dims[None, :], mask=row_ok[:, None] & (dims[None, :] < d),
                    other=0.0).to(tl.float32) * qk_scale
        d_out = tl.load(DOut + (bh * n_q + rows[:, None]) * d_v + vdims[None, :],
                        mask=row_ok[:, None] & (vdims[None, :] < d_v), other=0.0).to(tl.float32)
        lse_log2 = tl.load(LseLog2 + bh * n_q + rows, mask=row_ok, other=float("inf"))
        row_dot = tl.load(RowDot + bh * n_q + rows, mask=row_ok, other=0.0)
        row_keys = tl.load(RowKeys + bh * n_q + rows, mask=row_ok, other=0) if DROPOUT else 0
        kept, d_s = _weights_and_scores_gradient(q, k, v, d_out, lse_log2, row_dot, rows, cols, row_ok, col_ok,
                                                 row_keys, offset, left, right, softcap_log2, drop_threshold,
                                                 keep_scale, SOFTCAP, DROPOUT)
        d_v_acc += tl.dot(tl.trans(kept), d_out, input_precision="ieee")
        d_k += tl.dot(tl.trans(d_s), q, input_precision="ieee")
    tl.store(DK + (bh * n_k + cols[:, None]) * d + dims[None, :], d_k, mask=col_ok[:, None] & (dims[None, :] < d))
    tl.store(DV + (bh * n_k + cols[:, None]) * d_v + vdims[None, :], d_v_acc,
             mask=col_ok[:, None] & (vdims[None, :] < d_v))


@triton.jit
def flash_backward_queries(Q, K, V, DOut, LseLog2, RowDot, RowKeys, DQ, n_q, n_k, d, d_v, heads, group, qk_scale,
                           softcap_log2, offset, left, right, block_rows, block_cols, drop_threshold, keep_scale,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                           VALUE_DIM: tl.constexpr, SOFTCAP: tl.constexpr, DROPOUT: tl.constexpr):
    """dS K for one tile of `block_rows` queries (the launcher multiplies by the scale: dQ), over the key tiles
    they may see, in order."""
    bh = tl.program_id(1)
    bkv = (bh // heads) * (heads // group) + (bh % heads) // group
    dims = tl.arange(0, HEAD_DIM)
    vdims = tl.arange(0, VALUE_DIM)
    rows, row_ok, q = _query_tile(Q, bh, n_q, d, block_rows, qk_scale, BLOCK_M, HEAD_DIM)
    d_out = tl.load(DOut + (bh * n_q + rows[:, None]) * d_v + vdims[None, :],
                    mask=row_ok[:, None] & (vdims[None, :] < d_v), other=0.0).to(tl.float32)
    lse_log2 = tl.load(LseLog2 + bh * n_q + rows, mask=row_ok, other=float("inf"))
    row_dot = tl.load(RowDot + bh * n_q + rows, mask=row_ok, other=0.0)
    row_keys = tl.load(RowKeys + bh * n_q + rows, mask=row_ok, other=0) if DROPOUT else 0
    d_q = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    first_row = tl.program_id(0) * block_rows
    start, stop = _key_range(first_row, tl.minimum(first_row + block_rows, n_q) - 1, n_k, offset, left, right)
    for col0 in range(start, stop, block_cols):
        cols = col0 + tl.arange(0, BLOCK_N)
        col_ok = (tl.arange(0, BLOCK_N) < block_cols) & (cols < stop)
        # dQ = dS K: a key no query of the tile sees is read as 0 (its dS is 0, and 0 * NaN is NaN)
        seen = tl.max(_visible(rows, cols, row_ok, col_ok, offset, left, right).to(tl.int32), axis=0) > 0
        k = tl.load(K + (bkv * n_k + cols[:, None]) * d + dims[None, :], mask=seen[:, None] & (dims[None, :] < d),
                    other=0.0).to(tl.float32)
        v = tl.load(V + (bkv * n_k + cols[:, None]) * d_v + vdims[None, :],
                    mask=seen[:, None] & (vdims[None, :] < d_v), other=0.0).to(tl.float32)
        _, d_s = _weights_and_scores_gradient(q, k, v, d_out, lse_log2, row_dot, rows, cols, row_ok, col_ok,
                                              row_keys, offset, left, right, softcap_log2, drop_threshold,
                                              keep_scale, SOFTCAP, DROPOUT)
        d_q += tl.dot(d_s, k, input_precision="ieee")
    tl.store(DQ + (bh * n_q + rows[:, None]) * d + dims[None, :], d_q, mask=row_ok[:, None] & (dims[None, :] < d))
