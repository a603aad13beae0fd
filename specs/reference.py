"""The oracle: scaled dot-product attention written as the seeds state it.

Seed 000 § 注意力机制的Q、K、V: Attention(Q,K,V) = softmax(QK^T / sqrt(d_k)) V.
The same code run on float64 input is the oracle every property compares with;
run on float32, float16 or bfloat16 input it is the "naive implementation in the same
precision" that FlashAttention's error rule measures against (specs.tolerance): every
step rounds to the input's dtype, sums and matrix products once, after accumulating in
float32 at least. NumPy does so for float16 by itself; for ml_dtypes' bfloat16 its
matrix products return float32 and its sums accumulate in bfloat16, so the formula
rounds the one and chooses the accumulator of the other (specs.dtypes.accumulator).

Conventions (recorded as claims in specs/claims.toml):
- scale=None means 1/sqrt(d);
- causal top-left: query i sees keys j <= i; bottom-right: j <= i + n_k - n_q;
- a row with no visible key (fully masked) has zero weights and zero output, as
  FlashAttention and current PyTorch do, and log-sum-exp -inf, the log of an empty
  sum (FlashAttention's kernels return +inf there: the documented deviation
  keyless-lse-plus-inf of specs.deviations);
- query head h reads kv head h // (heads // heads_kv) (MQA / GQA).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specs.dtypes import accumulator
from specs.score_mods import (
    NO_MODS,
    ScoreMods,
    alignment_offset,
    causal_window,
    check_score_mods,
    modify_scores,
    relative_positions,
    window_visible,
)
from specs.validation import (
    AttentionInputError,
    AttentionShape,
    check_causal,
    check_mask,
    check_shapes,
    resolve_scale,
)


@dataclass(frozen=True)
class AttentionResult:
    """Everything the oracle knows about one attention call."""

    out: np.ndarray  # (batch, heads, n_q, d_v)
    weights: np.ndarray  # (batch, heads, n_q, n_k), rows sum to 1 (0 when fully masked)
    lse: np.ndarray  # (batch, heads, n_q): log sum_j exp(score_ij); -inf when fully masked
    scores: np.ndarray  # scaled scores, -inf where a key may not be attended
    allowed: np.ndarray | None  # boolean visibility, None when every key is visible
    scale: float
    dropped: np.ndarray | None = None  # weights after dropout, P * keep / (1 - p); None without dropout
    mods: ScoreMods = NO_MODS  # the score modifications beyond the seeds it applied (specs.score_mods)
    # (batch, heads, n_q) rows whose weights do not depend on the scores (None: none): the oracle has none; a
    # documented deviation's model (specs.deviations) may, where an implementation replaces a row's scores by a
    # constant, and then the backward gives those rows dS = 0
    constant_rows: np.ndarray | None = None

    @property
    def applied_weights(self) -> np.ndarray:
        """The weights that multiply V: after dropout where there is one."""
        return self.weights if self.dropped is None else self.dropped


def repeat_kv(x: np.ndarray, group: int) -> np.ndarray:
    """Give every query head its kv head: kv head g serves query heads g*group .. g*group+group-1."""
    return np.repeat(x, group, axis=1) if group > 1 else x


HALF_LOOP_MIN_OUTPUTS = 2048  # below this many outputs NumPy's own float16 loop is as fast


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul; for float16 the same bits, faster. NumPy multiplies float16 matrices in a scalar loop that sums
    each output's products in float32, in order over k, and rounds once to float16. The same sum in vectorised
    float32 steps, one per k, is exact to the bit (a product of two float16 is exact in float32) and 5-9 times
    faster at attention's shapes (tests/unit/test_reference.py holds it to np.matmul's bits)."""
    if a.dtype != np.float16 or b.dtype != np.float16 or a.ndim < 2 or b.ndim < 2:
        return np.matmul(a, b)
    shape = np.broadcast_shapes(a.shape[:-1] + (1,), b.shape[:-2] + (1, b.shape[-1]))
    if a.shape[-1] != b.shape[-2] or int(np.prod(shape)) < HALF_LOOP_MIN_OUTPUTS:
        return np.matmul(a, b)  # NumPy's own message for mismatched shapes
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    total, product = np.zeros(shape, np.float32), np.empty(shape, np.float32)
    for k in range(a.shape[-1]):
        np.multiply(a32[..., :, k:k + 1], b32[..., k:k + 1, :], out=product)
        total += product
    return total.astype(np.float16)


def visible_keys(
    shape: AttentionShape,
    *,
    causal: bool,
    causal_alignment: str,
    mask: np.ndarray | None,
    mods: ScoreMods = NO_MODS,
) -> np.ndarray | None:
    """Boolean (batch, heads, n_q, n_k): may query i attend to key j? None means all may. Causal, the window
    (specs.score_mods) and a -inf bias hide keys as the mask does."""
    offset = alignment_offset(shape, causal_alignment)
    window = causal_window(mods.window, causal)  # causal: j <= i + offset
    hidden_by_bias = None if mods.bias is None or not np.isneginf(mods.bias).any() else mods.bias > -np.inf
    allowed = None
    past = relative_positions(range(shape.n_q), range(shape.n_k), offset)
    for part in (None if window is None else np.broadcast_to(window_visible(past, window), shape.scores_shape),
                 mask, hidden_by_bias):
        if part is not None:
            allowed = part if allowed is None else allowed & part
    return allowed


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
    causal: bool = False,
    causal_alignment: str = "top_left",
    mask: np.ndarray | None = None,
    finite: bool = True,
    keep: np.ndarray | None = None,
    dropout_p: float = 0.0,
    bias: np.ndarray | None = None,
    window_size: tuple[int, int] | None = None,
    softcap: float = 0.0,
    alibi_slopes: np.ndarray | None = None,
    sinks: np.ndarray | None = None,
) -> AttentionResult:
    """softmax(q k^T * scale) v in the inputs' precision, with weights and log-sum-exp.

    bias, window_size, softcap, alibi_slopes and sinks modify the scores and the softmax beyond the seeds, in the
    order and with the semantics of specs.score_mods; with sinks, a row's weights sum to less than 1.

    keep (boolean, broadcastable to the weights) applies dropout at rate dropout_p: the output is
    (P * keep / (1 - dropout_p)) v (seed 000 § Fused Attention: Softmax -> Dropout -> MatMul).

    finite=False accepts NaN and Inf: a hidden key's score is replaced (not added to), a value no query
    may see is never multiplied, and NaN a query does see reaches its output.
    """
    shape = check_shapes(q, k, v, finite=finite)
    check_causal(causal, causal_alignment)
    mask = check_mask(mask, shape)
    mods = check_score_mods(shape, bias=bias, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                            sinks=sinks)
    s = resolve_scale(scale, shape.d)
    dtype = np.result_type(q, k, v)
    q, k, v = (x.astype(dtype, copy=False) for x in (q, k, v))
    k_all, v_all = repeat_kv(k, shape.group), repeat_kv(v, shape.group)

    # NumPy's bfloat16 matrix products return float32, and a Python float promotes bfloat16: round as float16 does
    scores = matmul(q, k_all.swapaxes(-1, -2)).astype(dtype, copy=False) * dtype.type(s)
    allowed = visible_keys(shape, causal=causal, causal_alignment=causal_alignment, mask=mask, mods=mods)
    if finite and dtype == np.float64:
        # In float64 this is the oracle: finite inputs whose scaled scores leave float64's range (|scale| q.k
        # past 1.8e308) have no float64 answer, and a row of +inf scores would come out as NaN with lse -inf,
        # as if it saw no key. In lower precisions it is the naive formula, whose overflow the tolerance reads.
        overflow = np.isinf(scores) if allowed is None else np.isinf(scores) & allowed
        if overflow.any():
            where = tuple(int(i) for i in np.argwhere(overflow)[0])
            raise AttentionInputError(f"the scaled score at {where} overflows float64 (scale={s!r}): the oracle "
                                      "is defined where |scale| * |q . k| stays below 1.8e308")
    if mods.any:
        with np.errstate(invalid="ignore"):  # -inf bias on a hidden key: replaced below
            scores = modify_scores(scores, mods, shape, alignment_offset(shape, causal_alignment))
    if allowed is not None:
        scores = np.where(allowed, scores, dtype.type(-np.inf))
        seen_by_some_query = allowed.any(axis=-2)[..., None]
        v_all = np.where(seen_by_some_query, v_all, dtype.type(0))

    row_max = scores.max(axis=-1, keepdims=True)
    sink = None if mods.sinks is None else mods.sinks.astype(dtype)[None, :, None, None]
    if sink is not None:  # the sink is one more logit of the row (NaN still propagates through np.maximum)
        row_max = np.maximum(row_max, sink)
    # NaN: a visible NaN score, which must propagate; -inf: no visible key and no sink; +inf: a sink of +inf, or a
    # score that overflowed (the naive formula in a low precision), whose row stays non-finite for the tolerance
    has_key = np.isfinite(row_max) | np.isnan(row_max)
    shift = np.where(has_key, row_max, dtype.type(0))
    unnormalised = np.exp(scores - shift)
    total = unnormalised.sum(axis=-1, keepdims=True, dtype=accumulator(dtype)).astype(dtype, copy=False)
    if sink is not None:
        total = (total + np.exp(sink - shift)).astype(dtype, copy=False)
    weights = unnormalised / np.where(has_key, total, dtype.type(1))
    without_key = dtype.type(-np.inf)
    if sink is not None:
        weights = np.where(np.isposinf(sink), dtype.type(0), weights)  # a sink of +inf takes every weight
        without_key = np.broadcast_to(sink, row_max.shape)  # -inf, or +inf
    with np.errstate(divide="ignore"):
        lse = np.where(has_key, shift + np.log(total), without_key)[..., 0]
    dropped = None
    if keep is not None:
        dropped = np.where(keep, weights / dtype.type(1 - dropout_p), dtype.type(0))
    out = matmul(weights if dropped is None else dropped, v_all).astype(dtype, copy=False)
    return AttentionResult(out, weights, lse, scores, allowed, s, dropped, mods)


def attention_output(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """The oracle behind CONTRACT 1's signature (top-left causal alignment)."""
    return attention(q, k, v, scale=scale, causal=causal, mask=mask).out


def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, n, heads*d) -> (batch, heads, n, d): seed 001 § 1.3 multi_head_split."""
    if x.ndim != 3:
        raise AttentionInputError(f"split_heads expects (batch, n, features), got shape {x.shape}")
    if heads < 1 or x.shape[-1] % heads:
        raise AttentionInputError(f"features={x.shape[-1]} do not split into {heads} heads")
    b, n, features = x.shape
    return x.reshape(b, n, heads, features // heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(batch, heads, n, d) -> (batch, n, heads*d): seed 001 § 1.3 multi_head_merge."""
    if x.ndim != 4:
        raise AttentionInputError(f"merge_heads expects (batch, heads, n, d), got shape {x.shape}")
    b, h, n, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, n, h * d)


def multi_head_attention(
    x_q: np.ndarray,
    x_kv: np.ndarray,
    w_q: np.ndarray,
    w_k: np.ndarray,
    w_v: np.ndarray,
    w_o: np.ndarray,
    *,
    heads: int,
    heads_kv: int | None = None,
    core=attention_output,
    **core_kwargs,
) -> np.ndarray:
    """Project, split into heads, attend per head with `core`, concatenate, project by W_O.

    Seed 003 § 第三个概念 多头 and seed 001 § 2.1: q, k, v come from three linear
    maps of the input; the heads' outputs are concatenated and multiplied by W_O.
    `core` is any CONTRACT 1 implementation, the oracle by default.
    """
    heads_kv = heads if heads_kv is None else heads_kv
    for name, x in (("x_q", x_q), ("x_kv", x_kv)):
        if x.ndim != 3:
            raise AttentionInputError(f"{name} must be (batch, n, d_model), got shape {x.shape}")
    d_model = x_q.shape[-1]
    for name, w, rows in (("w_q", w_q, d_model), ("w_k", w_k, x_kv.shape[-1]),
                          ("w_v", w_v, x_kv.shape[-1])):
        if w.ndim != 2 or w.shape[0] != rows:
            raise AttentionInputError(f"{name} must have {rows} rows, got shape {w.shape}")
    q = split_heads(x_q @ w_q, heads)
    k = split_heads(x_kv @ w_k, heads_kv)
    v = split_heads(x_kv @ w_v, heads_kv)
    concatenated = merge_heads(np.asarray(core(q, k, v, **core_kwargs)))
    if w_o.ndim != 2 or w_o.shape[0] != concatenated.shape[-1]:
        raise AttentionInputError(
            f"w_o must have heads*d_v = {concatenated.shape[-1]} rows, got shape {w_o.shape}"
        )
    return concatenated @ w_o
