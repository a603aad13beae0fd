"""Deviations of tiled kernels: what seed 002's shared-memory kernel computes, and where what it reads is undefined
(impls/cuda/kernels/seed002_optimized_attention_kernel_repaired.cu); a backward that weighs the zero keys padding its
last key tile (flash-attn's Triton backend); a merge of partial results that rounds at their size, not their share
(torch's ring attention)."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from specs.deviations.base import Call, Deviation, DeviationError
from specs.deviations.ring_steps import RingBlock, rank_dq, ring_schedule
from specs.reference import repeat_kv
from specs.tolerance import SAFETY, unit_roundoff


class UnwrittenSharedMemoryRead(Deviation):
    name = "unwritten-shared-memory-read"
    summary = ("seed 002's shared-memory kernel: thread t of a block of T stores its q row at s_mem[t d] and its k "
               "row at s_mem[(t + 1) d], where thread t + 1 stores its q row, with no barrier between (a race), "
               "and reads key k_idx at s_mem[k_idx T d], past the 2 T d floats of the launch for k_idx > 1: a "
               "query's output is defined only for one key (v_0), or with T = 1 for two keys "
               "(softmax([q.q, q.k] / sqrt(d)) over v_0, v_1); every other output is undefined")
    parameters: ClassVar[dict[str, str]] = {"block_threads": "threads per block (the launch's default)",
                                            "block_keyword": "the tile keyword that sets them"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.block_threads = self.positive_int("block_threads")

    def _threads(self, tiles) -> int:
        return int(tiles.get(self.params.get("block_keyword"), self.block_threads))

    def transform(self, result, q, k, v, keywords):
        n = q.shape[2]
        if n != 2 or self._threads(keywords) != 1:
            return result
        dtype = result.out.dtype
        scale = dtype.type(1.0 / np.sqrt(q.shape[-1]))
        scores = np.stack([np.sum(q * q, axis=-1), np.sum(q * k, axis=-1)], axis=-1) * scale  # keys: q_i, k_i
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = weights / weights.sum(axis=-1, keepdims=True)
        out = weights[..., :1] * v[:, :, :1, :] + weights[..., 1:] * v[:, :, 1:2, :]
        return dataclasses.replace(result, out=out.astype(dtype))

    def predicted_values(self, call: Call) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """One key: every row's output is v_0, whatever the keys hold (the kernel reads a query row as the key)."""
        if call.q.shape[2] != 1:
            return {}
        shape = call.oracle.out.shape
        return {"out": (np.ones(shape, dtype=bool), np.broadcast_to(call.v[:, :, :1, :], shape))}

    def undefined(self, call: Call) -> dict[str, np.ndarray]:
        n = call.q.shape[2]
        if n == 1 or (n == 2 and self._threads(call.tiles) == 1):
            return {}
        return {"out": np.ones(call.oracle.out.shape, dtype=bool)}


# the kernel computes the padding's weight in float32 (exp2 overflows from 2^128) and dS in the inputs' dtype; the
# oracle's lse and D_i = <out_i, dO_i> stand in for the kernel's within far less than 1% (rounding of a few ulps), so
# a row within 1% of a ceiling (0.01 in the log) is left unpredicted rather than guessed
FLOAT32_LOG_MAX = float(np.log(np.finfo(np.float32).max))  # 88.72
LOG_MARGIN = 0.01


class _PaddedLastKeyTile(Deviation):
    """A kernel's behaviour on the keys padding its last tile of `block_n`: only a kernel call without the causal mask
    on a number of keys not a multiple of the tile has such keys, and every row it takes reads them. Declared with
    ring_steps, the kernel runs once per block of ring-flash-attn's ring (specs.deviations.ring_steps), on one rank's
    keys at a time; otherwise once over the call's keys (a dense call, or Ulysses' over every key)."""

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.block_n = self.positive_int("block_n")
        self.ring_steps = params.get("ring_steps", False)
        if not isinstance(self.ring_steps, bool):
            raise DeviationError(f"{self.name}: ring_steps is true or false ({self.parameters['ring_steps']}), got "
                                 f"{self.ring_steps!r}")

    def padded_rows(self, call: Call) -> np.ndarray:
        """(batch, heads, n_q): the query rows some kernel call of `call` takes with padded keys unmasked."""
        rows = np.zeros(call.q.shape[:3], dtype=bool)
        schedule = ring_schedule(call) if self.ring_steps else None
        if schedule is None:
            rows[...] = not call.keywords.get("causal") and call.k.shape[2] % self.block_n != 0
            return rows
        for held, blocks in schedule:
            for block in blocks:
                if self.pads(block):
                    rows[:, :, held[block.rows]] = True
        return rows

    def pads(self, block: RingBlock) -> bool:
        """Whether the kernel call of a ring's `block` has padded keys unmasked."""
        return not block.causal and len(block.keys) % self.block_n != 0


RING_STEPS = "true: the kernel runs once per block of ring-flash-attn's ring, on one rank's keys (absent: once on all)"


class PaddedKeysWeightOverflow(_PaddedLastKeyTile):
    name = "padded-keys-weight-overflow"
    summary = ("a non-causal backward whose dQ kernel weighs the keys padding its last key tile (loaded as zeros: "
               "score 0) by p = exp(0 - lse) without masking them (flash-attn's Triton backend): dS = p (0 - D_i) "
               "with D_i = <out_i, dO_i> multiplies a zero key, harmless while finite; but where p overflows float32 "
               "(lse < -88.72) or dS overflows the inputs' dtype (float16: -lse + ln|D_i| > 11.09), inf x 0 makes "
               "the row's dQ NaN; only where n_k is not a multiple of the tile")
    parameters: ClassVar[dict[str, str]] = {
        "block_n": "keys per tile of the dQ kernel",
        "ring_steps": f"{RING_STEPS}; a block's NaN share goes where that ring's backward buffer puts it"}

    def non_finite_gradients(self, call):
        """dQ's rows whose kernel call reads padded keys and overflows; with ring_steps, a block's NaN share goes
        where ring-flash-attn's backward buffer puts it (specs.deviations.ring_steps.rank_dq: float32's aliased
        buffer spreads it to the rows it is written to, and a later share overwrites it)."""
        if call.d_out is None:
            return {}
        log_weight = -call.oracle.lse
        delta = np.abs(np.sum(call.oracle.out * call.d_out, axis=-1))
        with np.errstate(divide="ignore"):
            log_ds = log_weight + np.log(delta)
        ceiling = min(FLOAT32_LOG_MAX, float(np.log(np.finfo(call.dtype).max)))
        overflowing = (log_weight > FLOAT32_LOG_MAX + LOG_MARGIN) | (log_ds > ceiling + LOG_MARGIN)
        schedule = ring_schedule(call) if self.ring_steps else None
        if schedule is None:
            rows = overflowing & self.padded_rows(call)
        else:
            rows = np.zeros(call.q.shape[:3], dtype=bool)
            for held, blocks in schedule:
                shares = [np.where(overflowing[:, :, held[block.rows], None] & self.pads(block), np.nan, 0.0)
                          for block in blocks]
                dq = rank_dq(blocks, shares, len(held), aliased=call.dtype == "float32")
                rows[:, :, held] = np.isnan(dq[..., 0])
        return {"dq": np.broadcast_to(rows[..., None], call.q.shape).copy()} if rows.any() else {}


class PaddedKeysNanAtNonpositiveScale(_PaddedLastKeyTile):
    name = "padded-keys-nan-at-nonpositive-scale"
    summary = ("the keys padding the last key tile are given the score -inf before the scores are multiplied by the "
               "scale, which the kernel holds in float32 (flash-attn's Triton forward: a Python float argument): at "
               "scale 0, or one float32 rounds to 0 (float64's subnormals), -inf x 0 is NaN; below 0, -inf x scale "
               "is +inf, the row's maximum, and exp(inf - inf) NaN; every row a kernel call without the causal mask "
               "takes reads that tile, so its output and log-sum-exp are NaN; only where the call's keys are not a "
               "multiple of the tile")
    parameters: ClassVar[dict[str, str]] = {"block_n": "keys per tile of the forward kernel", "ring_steps": RING_STEPS}

    def non_finite(self, call):
        scale = call.keywords.get("scale")
        if scale is None or np.float32(scale) > 0.0:
            return {}
        rows = self.padded_rows(call)
        if not rows.any():
            return {}
        return {"out": np.broadcast_to(rows[..., None], call.oracle.out.shape).copy(), "lse": rows}


class MergeRoundsAtPartialSize(Deviation):
    name = "merge-rounds-at-partial-size"
    summary = ("partial results merged as out - sigmoid(lse_b - lse) (out - out_b) in float32 (torch's ring "
               "attention): each step rounds at the size of the partial outputs, not of their shares, so a block "
               "whose share is below float32's unit roundoff adds exactly nothing (a weight of exactly 0 that no mask "
               "hides), and the output may err by merges (7 + L_i) u_32 max_j |v_j| over the keys row i sees")
    parameters: ClassVar[dict[str, str]] = {"merges": "the most partial results a row merges (the most ranks)"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.merges = self.positive_int("merges")

    def extra_allowance(self, call):
        """One step, out - s (out - out_b) with s = sigmoid(x), |out|, |out_b| <= M_i (each a convex combination of
        the values the row sees): the difference, the product and the subtraction round at u (|out| + |out_b|) each,
        s itself at 2u relative (|out - out_b| <= 2 M_i): 7 u M_i; x = lse_b - lse carries u (|lse_b| + |lse|) <=
        2 u L_i, which moves s by s (1 - s) 2 u L_i <= u L_i / 2 and the output by at most u L_i M_i. The LSE's step
        lse - logsigmoid(lse - lse_b) rounds at u (|lse| + 2 + |x|) <= u (2 L_i + 2). Twice that (SAFETY), `merges`
        steps."""
        result = call.oracle
        visible = np.isfinite(result.scores)
        u = unit_roundoff(np.float32)
        v_all = repeat_kv(np.where(np.isfinite(call.v), call.v, 0.0), call.group)
        largest_value = np.max(np.where(visible, np.abs(v_all).max(axis=-1)[..., None, :], 0.0), axis=-1,
                               keepdims=True)
        magnitude = (np.max(np.where(visible, np.abs(np.where(visible, result.scores, 0.0)), 0.0), axis=-1,
                            keepdims=True) + math.log(max(call.k.shape[2], 1)) + 1.0)
        out = SAFETY * self.merges * (7 + magnitude) * u * largest_value
        lse = SAFETY * self.merges * (2 * magnitude + 2) * u
        return {"out": np.broadcast_to(out, result.out.shape).copy(), "lse": lse[..., 0]}


KERNEL_DEVIATIONS = (UnwrittenSharedMemoryRead, PaddedKeysWeightOverflow, PaddedKeysNanAtNonpositiveScale)
# widens every element a row sees: the broadest of the catalogue, so accept mode tries it last
MERGE_DEVIATIONS = (MergeRoundsAtPartialSize,)
