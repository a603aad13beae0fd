"""A FlashAttention-style tiled forward pass in NumPy (seed 000 § Flash Attention).

The outer loop walks blocks of B_r query rows, the inner loop blocks of B_c keys
and values; each score block is used once and discarded; the online softmax
(impls.numpy.online_softmax) keeps the running statistics. Blocks entirely in a
query block's causal future are skipped, as FlashAttention does.

Beyond the seeds it takes a sliding window, softcap, ALiBi and an additive bias (specs/score_mods.py's order,
top-left alignment), each applied to a block's scores as the block is made; blocks wholly outside the window of
every row of a query block are skipped (`SCORED_BLOCKS` counts the ones that are not).

`tiled_attention_backward` is its backward pass, FlashAttention-2's: the forward's
log-sum-exp lets each block of P be recomputed from Q_i and K_j alone, so the
n_q x n_k matrix is never built either way. It takes the same modifications (softcap's derivative included).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from impls.numpy.online_softmax import OnlineSoftmax, values_seen
from protocol.registry import attention_impl
from specs.dtypes import is_float
from specs.reference import repeat_kv
from specs.score_mods import (
    ScoreMods,
    causal_window,
    check_score_mods,
    relative_positions,
    visible_key_range,
    window_visible,
)
from specs.validation import AttentionInputError, check_mask, check_shapes, resolve_scale


def check_block_size(name: str, size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise AttentionInputError(f"{name} must be a positive int, got {size!r}")
    return int(size)


SCORED_BLOCKS: Counter = Counter()  # key blocks the forward scored, across calls: the window's skipped blocks are not


def _modified_block(scores: np.ndarray, mods: ScoreMods, rows: range, cols: range, causal: bool,
                    mask: np.ndarray | None) -> np.ndarray:
    """A block's scaled scores after the cap, ALiBi and the bias, with -inf where causal, the window, the mask or
    a -inf bias hide the key."""
    dtype = scores.dtype
    if mods.softcap > 0:
        cap = dtype.type(mods.softcap)
        scores = cap * np.tanh(scores / cap)
    past = relative_positions(rows, cols, 0)  # top-left
    if mods.alibi_slopes is not None:
        scores = scores - mods.alibi_slopes.astype(dtype)[:, :, None, None] * np.abs(past).astype(dtype)
    if mods.bias is not None:
        bias = mods.bias[:, :, rows.start:rows.stop, cols.start:cols.stop].astype(dtype)
        scores = np.where(np.isneginf(bias), bias, scores + bias)  # -inf hides the key even from a NaN score
    window = causal_window(mods.window, causal)
    if window is not None:
        scores = np.where(window_visible(past, window), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask[:, :, rows.start:rows.stop, cols.start:cols.stop], scores, -np.inf)
    return scores


def tiled_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: np.ndarray | None = None,
    block_rows: int = 16,
    block_cols: int = 16,
    return_lse: bool = False,
    window_size: tuple[int, int] | None = None,
    softcap: float = 0.0,
    alibi_slopes: np.ndarray | None = None,
    bias: np.ndarray | None = None,
):
    """Attention computed block by block; top-left causal alignment."""
    shape = check_shapes(q, k, v, finite=False)
    mask = check_mask(mask, shape)
    mods = check_score_mods(shape, bias=bias, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes)
    s = resolve_scale(scale, shape.d)
    rows_per_block = check_block_size("block_rows", block_rows)
    cols_per_block = check_block_size("block_cols", block_cols)
    dtype = np.result_type(q, k, v)
    k, v = repeat_kv(k, shape.group), repeat_kv(v, shape.group)
    out = np.empty(shape.out_shape, dtype=dtype)
    lse = np.empty(shape.scores_shape[:-1], dtype=dtype)
    for r0 in range(0, shape.n_q, rows_per_block):
        r1 = min(r0 + rows_per_block, shape.n_q)
        state = OnlineSoftmax((shape.batch, shape.heads, r1 - r0), shape.d_v, dtype)
        keys = visible_key_range(range(r0, r1), shape.n_k, causal_window(mods.window, causal), 0)  # top-left
        # every key block that holds a key of `keys`; the blocks before and after it are skipped whole
        first_block = keys.start // cols_per_block * cols_per_block if keys else keys.stop  # no key: no block
        for c0 in range(first_block, keys.stop, cols_per_block):
            c1 = min(c0 + cols_per_block, shape.n_k)
            SCORED_BLOCKS["forward"] += 1
            scores = ((q[:, :, r0:r1] @ k[:, :, c0:c1].swapaxes(-1, -2)) * s).astype(dtype, copy=False)
            scores = _modified_block(scores, mods, range(r0, r1), range(c0, c1), causal, mask)
            state.update(scores.astype(dtype, copy=False), v[:, :, c0:c1])
        out[:, :, r0:r1] = state.output()
        lse[:, :, r0:r1] = state.lse()
    return (out, lse) if return_lse else out


def _check_d_out(d_out: object, out_shape: tuple[int, ...]) -> np.ndarray:
    if not isinstance(d_out, np.ndarray):
        raise AttentionInputError(f"d_out must be a numpy array, got {type(d_out).__name__}")
    if not is_float(d_out.dtype):
        raise AttentionInputError(f"d_out has dtype {d_out.dtype}; expected a floating-point dtype")
    if d_out.shape != tuple(out_shape):
        raise AttentionInputError(
            f"d_out has shape {d_out.shape}; it must have the output's shape (batch, heads, n_q, d_v) = {out_shape}"
        )
    return d_out


def _rows_seen(scores: np.ndarray, x: np.ndarray) -> np.ndarray:
    """`x` (..., rows, dim) with the rows of queries that see no key of the block set to 0 (0 * NaN is NaN)."""
    seen = ~(scores == -np.inf).all(axis=-1)
    return np.where(seen[..., None], x, x.dtype.type(0))


def tiled_attention_backward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    d_out: np.ndarray,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: np.ndarray | None = None,
    block_rows: int = 16,
    block_cols: int = 16,
    window_size: tuple[int, int] | None = None,
    softcap: float = 0.0,
    alibi_slopes: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dQ, dK, dV of <d_out, tiled_attention(q, k, v)>, block by block (seed 000 § Flash Attention; FlashAttention-2).

    With L = LSE from the forward and D = rowsum(dO * O), key block j (outer loop) meets every query
    block i (inner loop) it is visible to: P = exp(S - L_i), dV_j += P^T dO_i, dP = dO_i V_j^T,
    dS = P * (dP - D_i), dQ_i += scale dS K_j, dK_j += scale dS^T Q_i. A fully masked row has
    L = -inf and P = 0, so its dQ is 0. dK and dV sum over the query heads of a kv head's group. The score
    modifications are the forward's (_modified_block); softcap multiplies dS by its derivative 1 - tanh^2.
    """
    shape = check_shapes(q, k, v, finite=False)
    mask = check_mask(mask, shape)
    mods = check_score_mods(shape, bias=bias, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes)
    s = resolve_scale(scale, shape.d)
    rows_per_block = check_block_size("block_rows", block_rows)
    cols_per_block = check_block_size("block_cols", block_cols)
    d_out = _check_d_out(d_out, shape.out_shape)
    dtype = np.result_type(q, k, v)
    out, lse = tiled_attention(q, k, v, scale=s, causal=causal, mask=mask, block_rows=rows_per_block,
                               block_cols=cols_per_block, return_lse=True, window_size=window_size, softcap=softcap,
                               alibi_slopes=alibi_slopes, bias=bias)
    q = q.astype(dtype, copy=False)
    d_out = d_out.astype(dtype, copy=False)
    delta = np.sum(d_out * out, axis=-1)  # D_i = rowsum(dO_i * O_i) = sum_j P_ij dP_ij
    shift = np.where(np.isfinite(lse), lse, dtype.type(0))  # -inf rows: every score is -inf, so P = 0
    k_all = repeat_kv(k, shape.group).astype(dtype, copy=False)
    v_all = repeat_kv(v, shape.group).astype(dtype, copy=False)
    d_q = np.zeros(q.shape, dtype=dtype)
    d_k = np.zeros(k.shape, dtype=dtype)
    d_v = np.zeros(v.shape, dtype=dtype)
    heads_kv_shape = (shape.batch, shape.heads_kv, shape.group)
    for c0 in range(0, shape.n_k, cols_per_block):
        c1 = min(c0 + cols_per_block, shape.n_k)
        d_k_block = np.zeros((shape.batch, shape.heads, c1 - c0, shape.d), dtype=dtype)
        d_v_block = np.zeros((shape.batch, shape.heads, c1 - c0, shape.d_v), dtype=dtype)
        # causal: query blocks that end before key c0 see none of this block (the block holding row c0 is the first)
        first_row = (c0 // rows_per_block) * rows_per_block if causal else 0
        for r0 in range(first_row, shape.n_q, rows_per_block):
            r1 = min(r0 + rows_per_block, shape.n_q)
            raw = (q[:, :, r0:r1] @ k_all[:, :, c0:c1].swapaxes(-1, -2)).astype(dtype, copy=False) * dtype.type(s)
            scores = _modified_block(raw, mods, range(r0, r1), range(c0, c1), causal, mask)
            p = np.exp(scores - shift[:, :, r0:r1, None])
            d_o = d_out[:, :, r0:r1]
            k_j = values_seen(scores, k_all[:, :, c0:c1])  # a hidden key's NaN must not meet dS = 0
            d_v_block += p.swapaxes(-1, -2) @ d_o
            d_s = p * (d_o @ v_all[:, :, c0:c1].swapaxes(-1, -2) - delta[:, :, r0:r1, None])
            d_s = np.where(scores == -np.inf, dtype.type(0), d_s)  # a hidden key's dS is 0 even beside a NaN dP
            if mods.softcap > 0:
                capped = np.tanh(raw / dtype.type(mods.softcap))
                d_s = d_s * (1 - capped * capped)
            d_q[:, :, r0:r1] += dtype.type(s) * (d_s @ k_j)
            d_k_block += dtype.type(s) * (d_s.swapaxes(-1, -2) @ _rows_seen(scores, q[:, :, r0:r1]))
        d_k[:, :, c0:c1] = d_k_block.reshape(heads_kv_shape + d_k_block.shape[2:]).sum(axis=2)
        d_v[:, :, c0:c1] = d_v_block.reshape(heads_kv_shape + d_v_block.shape[2:]).sum(axis=2)
    return d_q, d_k, d_v


# The record is declared after the definition, not as a decorator: mutation testing (tox -e mutants)
# skips decorated functions, and this body is what it must reach.
tiled_attention = attention_impl(name="numpy-tiled", backend="numpy", dtypes=("float64", "float32"),
                                 tile_keywords=("block_rows", "block_cols"), lse=True)(tiled_attention)
tiled_attention.attention_backward = tiled_attention_backward
