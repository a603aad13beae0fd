"""FlashAttention-2 in PyTorch on the CPU: a tiled forward and backward as one torch.autograd.Function.

Seed 000 § Flash Attention: the weights are computed block by block in fast memory and
never stored; the online softmax keeps each query row's running maximum and sum; the
output is rescaled as blocks arrive. The forward saves only the output and the
log-sum-exp (LSE) per query row; the backward recomputes each block's weights from the
LSE (P = exp(S - LSE)) and accumulates dQ, dK, dV block by block, so no n_q x n_k
tensor is ever kept, forward or backward: memory grows as O(n * block).

Seed 000 § Fused Attention: MatMul -> Scale -> Softmax -> Dropout -> MatMul happen per
tile in one pass. The dropout mask is specs.dropout_mask's pure function of (seed,
batch, head, row, column), so it is the same for any block sizes and can be recovered.

Inputs are float64, float32, float16 or bfloat16; the lower precisions are computed in
float32 inside (S, the maximum, exp and the accumulators), and the output is rounded to
the input's dtype, as FlashAttention does.
"""

from __future__ import annotations

import functools
import math
from collections import Counter

import torch

from impls.score_mod_checks import checked_mods
from impls.torch.thread_shares import run_in_shares
from specs.dropout_mask import check_dropout, keep_from_row_keys, row_keys
from specs.score_mods import causal_window, relative_positions, visible_key_range, window_visible
from specs.validation import CAUSAL_ALIGNMENTS, AttentionInputError, resolve_scale

LOG2_E = 1.0 / math.log(2.0)
VISITED_TILES: Counter = Counter()  # (row block, key block) tiles scored, "forward" and "backward", across calls
LN_2 = math.log(2.0)
# a pass over at least this many scores (batch * heads * n_q * n_k) shares its query blocks among the torch threads
# (impls/torch/thread_shares.py); measured side by side on 2 cores, quiet: 15-40% slower at 2^25, even at 2^27
SHARED_FROM_SCORES = 2**27


class FlashPlan:
    """What one call computes: shapes, scale, causal offset, mask, dropout, block sizes."""

    def __init__(self, q, k, v, *, scale, causal, causal_alignment, mask, dropout_p, dropout_seed,
                 block_rows, block_cols, mods: dict):
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not isinstance(x, torch.Tensor):
                raise AttentionInputError(f"{name} must be a torch tensor, got {type(x).__name__}")
            if x.ndim != 4:
                raise AttentionInputError(f"{name} must be (batch, heads, seq_len, dim), got shape {tuple(x.shape)}")
            if not x.is_floating_point():
                raise AttentionInputError(f"{name} must be floating point, got {x.dtype}")
        if len({q.dtype, k.dtype, v.dtype}) != 1:
            raise AttentionInputError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
        self.batch, self.heads, self.n_q, self.d = q.shape
        if k.shape[0] != self.batch or v.shape[0] != self.batch:
            raise AttentionInputError(f"batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}")
        if k.shape[3] != self.d:
            raise AttentionInputError(f"q and k must share the head dim, got {self.d} and {k.shape[3]}")
        if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
            raise AttentionInputError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must share heads and seq_len")
        self.heads_kv, self.n_k, self.d_v = v.shape[1], v.shape[2], v.shape[3]
        if self.heads_kv < 1 or self.heads % self.heads_kv:
            raise AttentionInputError(f"heads={self.heads} is not a multiple of heads_kv={self.heads_kv}")
        self.group = self.heads // self.heads_kv
        self.scale = resolve_scale(scale, self.d)  # the protocol's domain: ints, NumPy scalars, 0-d arrays
        if causal_alignment not in CAUSAL_ALIGNMENTS:
            raise AttentionInputError(f"causal_alignment must be one of {CAUSAL_ALIGNMENTS}, got {causal_alignment!r}")
        # query i's diagonal meets key i + offset; causal folds into the window as its right bound 0
        self.offset = 0 if causal_alignment == "top_left" else self.n_k - self.n_q
        checked = checked_mods(q, k, v, **mods)
        self.window = causal_window(checked.window, causal)
        self.softcap = checked.softcap
        self.bias_input = mods.get("bias")  # as given: its gradient has its shape
        self.bias = None if self.bias_input is None else _as_rank4(self.bias_input.detach())
        self.bias_hides = self.bias is not None and bool(torch.isneginf(self.bias).any())
        self.slopes = None if mods.get("alibi_slopes") is None else torch.as_tensor(
            mods["alibi_slopes"]).expand(self.batch, self.heads)
        self.sinks = None if mods.get("sinks") is None else mods["sinks"].detach()
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
                raise AttentionInputError(f"mask must be a boolean torch tensor, got {getattr(mask, 'dtype', mask)!r}")
            try:
                torch.broadcast_shapes(mask.shape, (self.batch, self.heads, self.n_q, self.n_k))
            except RuntimeError:
                raise AttentionInputError(f"mask of shape {tuple(mask.shape)} does not broadcast to "
                                          f"{(self.batch, self.heads, self.n_q, self.n_k)}") from None
            mask = _as_rank4(mask)
        self.mask = mask
        self.dropout_p, seed = check_dropout(dropout_p, 0 if dropout_seed is None else dropout_seed)
        self.row_keys = None
        if self.dropout_p > 0:
            b, h, i = (torch.arange(n) for n in (self.batch, self.heads, self.n_q))
            self.row_keys = row_keys(seed, b[:, None, None], h[None, :, None], i[None, None, :])
        self.block_rows = _block_size("block_rows", block_rows)
        self.block_cols = _block_size("block_cols", block_cols)
        self.compute_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        self.shared = self.batch * self.heads * self.n_q * self.n_k >= SHARED_FROM_SCORES

    def row_blocks(self):
        """Slices of B_r query rows."""
        for r0 in range(0, self.n_q, self.block_rows):
            yield slice(r0, min(r0 + self.block_rows, self.n_q))

    def column_blocks(self, rows: slice):
        """Slices of at most B_c keys covering those some row may see: the keys before the window and past the
        causal horizon are never read, so a window costs (window + B_r + B_c) / n_k of the dense pass at most."""
        keys = visible_key_range(range(rows.start, rows.stop), self.n_k, self.window, self.offset)
        for c0 in range(keys.start, keys.stop, self.block_cols):
            yield slice(c0, min(c0 + self.block_cols, keys.stop))

    def modified(self, scores: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
        """A block's scores (batch * heads, rows, cols; base 2, scale included) after the cap, ALiBi and the bias
        (specs/score_mods.py's order), with -inf where the window, causal or the mask hides the key, in place
        where it can be."""
        if self.softcap > 0:
            cap = self.softcap * LOG2_E  # c tanh(s / c) in base 2: s2 = s log2(e), so the cap scales alike
            scores = torch.tanh(scores.div_(cap)).mul_(cap)
        if self.slopes is not None:
            past = relative_positions(range(rows.start, rows.stop), range(cols.start, cols.stop), self.offset)
            distance = torch.from_numpy(abs(past)).to(scores.dtype)
            slopes = self.slopes.to(scores.dtype) * LOG2_E
            self.per_head(scores).sub_(slopes[:, :, None, None] * distance)
        if self.bias is not None:
            bias = self.block_of(self.bias, rows, cols)
            self.per_head(scores).add_(bias.to(scores.dtype) * LOG2_E)
            if self.bias_hides:  # -inf hides the key even from a NaN score (NaN + -inf is NaN)
                self.per_head(scores).masked_fill_(bias == -math.inf, -math.inf)
        if self.window is not None and not self.inside_window(rows, cols):
            shift = cols.start - (rows.start + self.offset)
            scores.masked_fill_(_outside_window(rows.stop - rows.start, cols.stop - cols.start, shift, self.window),
                                -math.inf)
        if self.mask is not None:
            self.per_head(scores).masked_fill_(~self.block_of(self.mask, rows, cols), -math.inf)
        return scores

    def inside_window(self, rows: slice, cols: slice) -> bool:
        """Whether every key of `cols` is within the window of every row of `rows` (no element to hide)."""
        left, right = self.window
        return ((left < 0 or cols.start - (rows.stop - 1 + self.offset) >= -left)
                and (right < 0 or cols.stop - 1 - (rows.start + self.offset) <= right))

    def block_of(self, x: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
        """The (rows, cols) block of a rank-4 tensor broadcastable to (batch, heads, n_q, n_k) (the mask, the
        bias), still broadcastable to (batch, heads, rows, cols)."""
        everything = slice(None)
        return x[..., rows if x.shape[-2] > 1 else everything, cols if x.shape[-1] > 1 else everything]

    def keys_seen(self, scores: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor | None:
        """(batch * heads, cols): whether some row of the block sees each key, read off its modified scores (-inf
        where hidden) where the window or a -inf bias may hide one; None where only the mask can (the dense path
        pays nothing)."""
        if self.bias_hides or (self.window is not None and not self.inside_window(rows, cols)):
            return (scores != -math.inf).any(dim=-2)
        return None

    def visible_values(self, values: torch.Tensor, rows: slice, cols: slice,
                       seen: torch.Tensor | None = None) -> torch.Tensor:
        """The block's values (batch * heads, cols, d_v), zero where the mask (or, through `seen`, keys_seen's,
        the window or a -inf bias) hides a key from every row of the block: P V multiplies them by a weight 0, and
        0 * NaN would carry a hidden NaN into the output."""
        if self.mask is not None:
            by_mask = self.block_of(self.mask, rows, cols).any(dim=-2).expand(self.batch, self.heads,
                                                                                cols.stop - cols.start)
            by_mask = by_mask.reshape(-1, cols.stop - cols.start)
            seen = by_mask if seen is None else seen & by_mask
        return values if seen is None else torch.where(seen[..., None], values, 0.0)

    def per_head(self, x: torch.Tensor) -> torch.Tensor:
        """A (batch * heads, ...) tensor viewed as (batch, heads, ...)."""
        return x.view(self.batch, self.heads, *x.shape[1:])

    def dropout_scale(self, rows: slice, cols: slice) -> torch.Tensor | None:
        """keep / (1 - p) for the block, (batch * heads, rows, cols), or None without dropout."""
        if self.row_keys is None:
            return None
        columns = torch.arange(cols.start, cols.stop)
        keep = keep_from_row_keys(self.row_keys[:, :, rows, None], columns, self.dropout_p)
        return (keep.to(self.compute_dtype) / (1.0 - self.dropout_p)).flatten(0, 1)

    def flat(self, x: torch.Tensor, *, kv: bool = False) -> torch.Tensor:
        """(batch, heads[_kv], n, dim) as contiguous (batch * heads, n, dim) in the compute dtype; kv heads
        repeated so that query head h reads kv head h // group."""
        x = x.to(self.compute_dtype)
        if kv and self.group > 1:
            x = x.repeat_interleave(self.group, dim=1)
        return x.reshape(self.batch * self.heads, *x.shape[2:])


@functools.lru_cache(maxsize=64)
def _outside_window(rows: int, cols: int, shift: int, window: tuple[int, int]) -> torch.Tensor:
    """(rows, cols) True where a tile's key is outside the window, the tile's first key `shift` past its first
    query's diagonal: the same for every tile at that shift, so a band's tiles share one mask."""
    past = relative_positions(range(rows), range(shift, shift + cols), 0)
    return torch.from_numpy(~window_visible(past, window))


def _as_rank4(x: torch.Tensor) -> torch.Tensor:
    """A tensor broadcastable to (batch, heads, n_q, n_k) with its leading size-1 axes made explicit."""
    return x.reshape((1,) * (4 - x.ndim) + tuple(x.shape))


def _block_size(name: str, size: object) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise AttentionInputError(f"{name} must be a positive int, got {size!r}")
    return size


def _sum_groups(x: torch.Tensor, plan: FlashPlan) -> torch.Tensor:
    """(batch * heads, n, dim) gradients summed over each kv head's query heads: (batch, heads_kv, n, dim)."""
    x = x.view(plan.batch, plan.heads_kv, plan.group, *x.shape[1:])
    return x.sum(dim=2)


def _forward(plan: FlashPlan, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """out (batch * heads, n_q, d_v) and LSE (batch * heads, n_q) in the compute dtype; LSE = -inf and out = 0
    for a row with no visible key (without sinks; with them LSE is the sink's). The query blocks are shared among
    the torch threads (impls/torch/thread_shares.py); each block is _forward_rows'."""
    qs, keys, values = plan.flat(q) * (plan.scale * LOG2_E), plan.flat(k, kv=True), plan.flat(v, kv=True)
    out = torch.zeros(qs.shape[:2] + (plan.d_v,), dtype=plan.compute_dtype)
    lse = torch.full(qs.shape[:2], -math.inf, dtype=plan.compute_dtype)
    sink = _sink_logits(plan)

    def share(blocks) -> int:
        return sum(_forward_rows(plan, qs, keys, values, sink, out, lse, rows) for rows in blocks)

    VISITED_TILES["forward"] += sum(run_in_shares(share, list(plan.row_blocks()), shared=plan.shared))
    return out, lse


def _forward_rows(plan: FlashPlan, qs, keys, values, sink, out, lse, rows: slice) -> int:
    """One query block's rows of out and LSE, written in place; returns the number of tiles it scored.

    The scores are kept in base 2 (q scaled by scale * log2(e)) and exponentiated with exp2, which torch
    evaluates 2.5 times faster than exp on the CPU; the LSE is converted back to base e at the end. A sink starts
    each row's running maximum and sum (the logit of a key with no value), so the softmax's denominator and the
    LSE include it and nothing else does."""
    acc = out[:, rows]
    if sink is None:
        row_max = torch.full((qs.shape[0], rows.stop - rows.start, 1), -math.inf, dtype=plan.compute_dtype)
        row_sum = torch.zeros_like(row_max)
    else:  # the sink as the first logit seen: a running maximum of the sink and a sum of exp2(0) = 1
        row_max = sink.expand(-1, rows.stop - rows.start, 1).clone()
        row_sum = torch.where(row_max == -math.inf, 0.0, 1.0).to(plan.compute_dtype)
    tiles = 0
    for cols in plan.column_blocks(rows):
        tiles += 1
        scores = plan.modified(torch.bmm(qs[:, rows], keys[:, cols].transpose(1, 2)), rows, cols)
        seen = plan.keys_seen(scores, rows, cols)
        new_max = torch.maximum(row_max, scores.amax(dim=-1, keepdim=True))
        shift = new_max.masked_fill(new_max == -math.inf, 0.0)  # no visible key yet: exp(-inf - 0) = 0
        weights = scores.sub_(shift).exp2_()
        # an unchanged maximum keeps the running sums as they are, also at +inf (a sink of +inf: inf - inf)
        rescale = torch.where(new_max == row_max, 1.0, torch.exp2(row_max - shift)).to(plan.compute_dtype)
        row_sum.mul_(rescale).add_(weights.sum(dim=-1, keepdim=True))
        row_max = new_max
        dropped = plan.dropout_scale(rows, cols)
        if dropped is not None:
            weights.mul_(dropped)
        acc.mul_(rescale).baddbmm_(weights, plan.visible_values(values[:, cols], rows, cols, seen))
    seen = row_sum > 0
    acc.div_(torch.where(seen, row_sum, 1.0))
    lse[:, rows] = torch.where(seen, row_max * LN_2 + torch.log(row_sum), -math.inf).squeeze(-1)
    return tiles


def _sink_logits(plan: FlashPlan) -> torch.Tensor | None:
    """Each (batch * heads) row's sink logit in base 2, (batch * heads, 1, 1), or None without sinks."""
    if plan.sinks is None:
        return None
    sinks = plan.sinks.detach().to(plan.compute_dtype) * LOG2_E
    return sinks.expand(plan.batch, plan.heads).reshape(-1, 1, 1)


def _backward(plan: FlashPlan, q, k, v, out, lse, d_out, d_lse) -> tuple[torch.Tensor | None, ...]:
    """dQ, dK, dV from the saved LSE (each block's weights recomputed as exp(S - LSE)), and dBias and dSinks where
    the call has them. dBias is dS after the cap (the bias is added after it), summed over the axes the bias is
    broadcast along; softcap's derivative 1 - tanh^2 multiplies dS before dQ and dK; a sink's gradient is
    -sum_i pi_i D_i over its head's rows, pi_i = exp(sink - LSE_i) its weight."""
    qs, keys, values = plan.flat(q) * (plan.scale * LOG2_E), plan.flat(k, kv=True), plan.flat(v, kv=True)
    d_out = plan.flat(d_out)
    # dS = P * (dP - D) with D_i = sum_c dO_ic O_ic; the LSE's own gradient adds P * dLSE
    row_dot = (d_out * out).sum(dim=-1, keepdim=True)
    if d_lse is not None:
        row_dot = row_dot - d_lse.to(plan.compute_dtype)[..., None]
    # P = exp2(S log2(e) - LSE log2(e)); a row with no visible key has P = exp2(-inf) = 0
    lse_safe = (lse * LOG2_E).masked_fill(lse == -math.inf, math.inf)[..., None]
    d_q = torch.zeros_like(qs)  # each query block's rows are one share's: dK, dV and dBias are summed over shares
    bias_shape = None if plan.bias is None else plan.bias.shape

    def share(blocks) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
        d_k, d_v = torch.zeros_like(keys), torch.zeros_like(values)
        d_bias = None if bias_shape is None else torch.zeros(bias_shape, dtype=plan.compute_dtype)
        tiles = 0
        for rows in blocks:
            for cols in plan.column_blocks(rows):
                tiles += 1
                _backward_tile(plan, qs, keys, values, d_out, row_dot, lse_safe, rows, cols, d_q, d_k, d_v, d_bias)
        return d_k, d_v, d_bias, tiles

    d_k, d_v, d_bias, tiles = (functools.reduce(_add_parts, parts) for parts in
                               zip(*run_in_shares(share, list(plan.row_blocks()), shared=plan.shared), strict=True))
    VISITED_TILES["backward"] += tiles
    d_k.mul_(LN_2)  # qs carries log2(e): dK = scale dS^T Q
    d_q = d_q.mul_(plan.scale).view(plan.batch, plan.heads, plan.n_q, plan.d)
    d_sinks = None
    if plan.sinks is not None:
        sink_logit = _sink_logits(plan)[..., 0]  # pi_i = exp(sink - LSE_i); a sink of +inf is its LSE, pi_i = 1
        sink_weight = torch.where(sink_logit == lse_safe[..., 0], 1.0, torch.exp2(sink_logit - lse_safe[..., 0]))
        d_sinks = -plan.per_head(sink_weight * row_dot[..., 0]).sum(dim=(0, 2))
    return (d_q.to(q.dtype), _sum_groups(d_k, plan).to(k.dtype), _sum_groups(d_v, plan).to(v.dtype),
            d_bias, d_sinks)


def _backward_tile(plan: FlashPlan, qs, keys, values, d_out, row_dot, lse_safe, rows: slice, cols: slice,
                   d_q, d_k, d_v, d_bias) -> None:
    """One tile's share of dQ, dK, dV and dBias, added in place: dS = P * (dP - D), P = exp2(S - LSE) recomputed."""
    raw = torch.bmm(qs[:, rows], keys[:, cols].transpose(1, 2))
    scores = plan.modified(raw.clone() if plan.softcap > 0 else raw, rows, cols)
    seen = plan.keys_seen(scores, rows, cols)
    weights = scores.sub_(lse_safe[:, rows]).exp2_()
    d_weights = torch.bmm(d_out[:, rows], plan.visible_values(values[:, cols], rows, cols, seen).transpose(1, 2))
    dropped = plan.dropout_scale(rows, cols)
    kept = weights if dropped is None else weights * dropped
    d_v[:, cols].baddbmm_(kept.transpose(1, 2), d_out[:, rows])
    if dropped is not None:
        d_weights.mul_(dropped)
    d_scores = weights.mul_(d_weights.sub_(row_dot[:, rows]))
    if d_bias is not None:
        _add_broadcast_gradient(plan.block_of(d_bias, rows, cols), plan.per_head(d_scores))
    if plan.softcap > 0:  # raw holds S log2(e): tanh's argument is S / c
        capped = torch.tanh(raw.div_(plan.softcap * LOG2_E))
        d_scores.mul_(capped.mul_(capped).neg_().add_(1.0))
    d_q[:, rows].baddbmm_(d_scores, keys[:, cols])
    d_k[:, cols].baddbmm_(d_scores.transpose(1, 2), qs[:, rows])


def _add_parts(total, part):
    """Two shares' gradient (or tile count) summed, None where the call has none."""
    return None if total is None else total + part


def _add_broadcast_gradient(target: torch.Tensor, grad: torch.Tensor) -> None:
    """target += grad summed over the axes target has size 1 along (a broadcast tensor's gradient), in place."""
    axes = tuple(axis for axis, size in enumerate(target.shape) if size == 1 and grad.shape[axis] != 1)
    target += grad.sum(dim=axes, keepdim=True) if axes else grad


class _FlashAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, sinks, plan: FlashPlan):
        out, lse = _forward(plan, q, k, v)
        ctx.plan = plan
        ctx.save_for_backward(q, k, v, out, lse)
        shape = (plan.batch, plan.heads, plan.n_q)
        return out.view(shape + (plan.d_v,)).to(q.dtype), lse.view(shape)

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        d_q, d_k, d_v, d_bias, d_sinks = _backward(ctx.plan, q, k, v, out, lse, d_out,
                                                   None if d_lse is None else d_lse.flatten(0, 1))
        bias, sinks = ctx.plan.bias_input, ctx.plan.sinks
        d_bias = None if d_bias is None else d_bias.reshape(bias.shape).to(bias.dtype)
        d_sinks = None if d_sinks is None else d_sinks.to(sinks.dtype)
        return d_q, d_k, d_v, d_bias, d_sinks, None


def flash_attention_tiled(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    causal: bool = False,
    causal_alignment: str = "top_left",
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    dropout_seed: int | None = None,
    block_rows: int = 256,
    block_cols: int = 512,
    return_lse: bool = False,
    bias: torch.Tensor | None = None,
    window_size: tuple[int, int] | None = None,
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
):
    """Attention of q (batch, heads, n_q, d), k (batch, heads_kv, n_k, d), v (batch, heads_kv, n_k, d_v).

    causal_alignment "top_left": query i sees keys j <= i; "bottom_right": j <= i + n_k - n_q.
    mask: boolean, broadcastable to (batch, heads, n_q, n_k), True = may attend. dropout_seed selects
    the mask (specs.dropout_mask); None draws one from torch's default generator. return_lse=True
    returns (out, lse) with lse (batch, heads, n_q) in float32 (float64 for float64 input).
    The score modifications (docs/checking-your-implementation.md, "Score modifications beyond the seeds"), in
    the alignment's offset: a float `bias` broadcastable to the scores, `window_size=(left, right)`, `softcap`,
    `alibi_slopes` (heads,) or (batch, heads), `sinks` (heads,); autograd reaches q, k, v, the bias and the sinks.
    """
    if dropout_seed is None and dropout_p:
        dropout_seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
    mods = dict(bias=bias, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks)
    plan = FlashPlan(q, k, v, scale=scale, causal=bool(causal), causal_alignment=causal_alignment, mask=mask,
                 dropout_p=dropout_p, dropout_seed=dropout_seed, block_rows=block_rows, block_cols=block_cols,
                 mods=mods)
    out, lse = _FlashAttentionFunction.apply(q, k, v, bias, sinks, plan)
    return (out, lse) if return_lse else out


LAYOUTS = ("bhsd", "bshd")


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: float | None = None, *, layout: str = "bhsd", causal: bool = False,
                    causal_alignment: str = "top_left", dropout_seed: int | None = None,
                    return_lse: bool = False, block_rows: int = 256, block_cols: int = 512):
    """Seed 000 § Flash Attention's entry point, `flash_attention(q, k, v, dropout_p=0.1, softmax_scale=1.0)`.

    layout "bhsd" is the seed's [batch, heads, seq_len, dim]; "bshd" is flash-attn's [batch, seq_len, heads,
    dim]. A shape such as (2, 16, 4096, 64) is valid in both, so the layout is never guessed: name it.
    Differentiable; the LSE, when returned, is (batch, heads, seq_len) in either layout.
    """
    if layout not in LAYOUTS:
        raise AttentionInputError(f"layout must be one of {LAYOUTS} ('bhsd': [batch, heads, seq_len, dim], "
                                  f"'bshd': [batch, seq_len, heads, dim]), got {layout!r}")
    if layout == "bshd":
        q, k, v = (x.transpose(1, 2) if isinstance(x, torch.Tensor) else x for x in (q, k, v))
    out, lse = flash_attention_tiled(q, k, v, scale=softmax_scale, causal=causal, causal_alignment=causal_alignment,
                                     dropout_p=dropout_p, dropout_seed=dropout_seed, block_rows=block_rows,
                                     block_cols=block_cols, return_lse=True)
    if layout == "bshd":
        out = out.transpose(1, 2)
    return (out, lse) if return_lse else out


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: float | None = None, causal: bool = False, *, dropout_seed: int | None = None,
                    return_lse: bool = False):
    """The same attention with flash-attn's face: q (batch, seq_len_q, heads, dim), k and v (batch, seq_len_k,
    heads_kv, dim), output (batch, seq_len_q, heads, dim_v). causal is aligned bottom-right, as flash-attn
    >= 2.1 does: query i sees keys j <= i + seq_len_k - seq_len_q."""
    return flash_attention(q, k, v, dropout_p, softmax_scale, layout="bshd", causal=causal,
                           causal_alignment="bottom_right", dropout_seed=dropout_seed, return_lse=return_lse)
