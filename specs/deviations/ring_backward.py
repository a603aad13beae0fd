"""Deviations of a sharded implementation's backward, read from the ring it runs (issue 39; seed 000 § Flash
Attention's "tiled output equals global output", one level up): what a rank's dQ and dK are when the ring keeps them
wrongly.

The model re-enacts, rank by rank, the steps of ring-flash-attn 0.1.8's three backwards (ring_flash_attn_backward,
zigzag_ring_flash_attn_backward, stripe_flash_attn_backward; their blocks are specs.deviations.ring_steps'): which
query rows and key positions each step's block backward takes, which rows of the dQ buffer it writes, and which rows
of dq the buffer is added to. A block's share is
the global gradient restricted to its rows and keys (its weights use the global log-sum-exp the forward returned),
held in the inputs' dtype: inf past its range."""

from __future__ import annotations

import numpy as np

from specs.deviations.base import Call, Deviation
from specs.deviations.ring_steps import LAYOUT, WORLD_SIZE, rank_dq, ring_schedule
from specs.dtypes import numpy_dtype
from specs.gradients import sum_groups
from specs.reference import repeat_kv
from specs.tolerance import SAFETY, ToleranceUndefined, gradient_allowance, rounding_below_normal, unit_roundoff


def _d_out_as_read(d_out_local: np.ndarray, rows: slice) -> np.ndarray:
    """The dO flash-attn's Triton backward uses in rowsum(O * dO) for a block over `rows` of a rank whose out was
    copied contiguous (head dim 1): its preprocessing reads dO at that copy's strides, (batch, rows, heads) order,
    from dO's element at rows.start, while the rank's dO lies in (batch, heads, n_local) order (the protocol's layout
    transposed): element (b, h, m) is the storage's b * rows * heads + rows.start + m * heads + h."""
    batch, heads, n_local = d_out_local.shape[:3]
    length = rows.stop - rows.start
    storage = d_out_local.reshape(batch * heads * n_local)
    at = (np.arange(batch)[:, None, None] * length * heads + rows.start
          + np.arange(length)[None, None, :] * heads + np.arange(heads)[None, :, None])
    return storage[at][..., None]


def _overflowed(values: np.ndarray, *casts: str) -> np.ndarray:
    """`values` (float64) with +-inf where rounding them to each of `casts` in turn overflows (a float16 buffer holds
    no share of 65520 or more: it rounds to inf); elsewhere unchanged, their rounding being the bound's."""
    stored = values
    with np.errstate(over="ignore", invalid="ignore"):
        for dtype in casts:
            stored = stored.astype(numpy_dtype(dtype))
    stored = stored.astype(np.float64)
    return np.where(np.isinf(stored) & np.isfinite(values), stored, values)


def _stored(values: np.ndarray, bound: np.ndarray, kernel: np.ndarray, *casts: str,
            unsure: np.ndarray | float = 0.0) -> np.ndarray:
    """(value, bound, kernel, unsure) of `values` cast to each of `casts` in turn: +-inf past the last's range, and
    unsure where `values` give or take their rounding bound and kernel error hold both a finite element and an
    overflowing one."""
    with np.errstate(invalid="ignore"):
        error = bound + kernel
        low, high = np.maximum(np.abs(values) - error, 0.0), np.abs(values) + error
    straddles = np.isfinite(values) & np.isinf(_overflowed(high, *casts)) & np.isfinite(_overflowed(low, *casts))
    return np.stack(np.broadcast_arrays(_overflowed(values, *casts), bound, kernel, unsure + straddles))


def _ratio(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """part / whole of two term magnitudes; 1 where the whole has none and the part has some (the rule's floors)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(whole > 0, part / whole, np.where(part > 0, 1.0, 0.0))


class DqAccumulatorAliasesStepBuffer(Deviation):
    name = "dq-accumulator-aliases-step-buffer"
    summary = ("a ring backward that keeps dQ as `step_buffer.to(float32)`, which for float32 inputs is the buffer "
               "itself, not a copy: each later block backward writes its share into that buffer, which then is dq, "
               "and `dq += buffer` doubles it (ring: a rank that computes more than one block returns twice the "
               "share of the last; zigzag and stripe: their half- and shifted-row steps overwrite and add rows "
               "likewise); the ring returns dQ rounded to bfloat16 for every dtype; dK and dV of float32 inputs "
               "are undefined on two ranks or more: the first step's are the buffers themselves too, sent on "
               "asynchronously while the next step overwrites them, so what arrives depends on a race. On "
               "flash-attn's Triton backward, which reads dO at O's strides: a rank whose forward merged a block "
               "over all its rows holds O with head dim 1 at a stride other than 1, the backward copies it "
               "contiguous, and rowsum(O * dO) takes dO's elements from the wrong heads and rows, so dQ and dK "
               "follow that sum. Each block's dQ and dK share is held in a buffer of the inputs' dtype, so a "
               "float16 share past 65504 is inf whatever the other shares add (and the ring's dQ, through "
               "bfloat16, is inf as float16 from 65408) (ring-flash-attn 0.1.8's three ring backwards, flash-attn "
               "2.8.3's Triton backend)")

    def predicted_values(self, call: Call) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """dQ of every rank (and dK, where a rank reads dO misplaced) of a backward call with plain scaled scores, in
        float64 before the ring's bfloat16 rounding that extra_allowance allows; +-inf where a share, or the element
        returned, is past the inputs' dtype's range; not where it is within its error of it (undefined)."""
        grads = self._gradients(call) or {}
        return {name: (~unsure, value) for name, (value, _, unsure) in grads.items()}

    def extra_allowance(self, call: Call) -> dict[str, np.ndarray]:
        """What the gradient rule, which bounds the oracle's terms at each element, does not cover: each block's
        share is rounded to the inputs' dtype as its buffer takes it, and a returned element is at most twice one
        buffer plus the others (u |share| summed over the shares it takes, twice, and twice again: SAFETY); and the
        kernel errors of the shares an element takes past the rule at that element. A share's kernel error is the
        rule at its rows times its terms' magnitude over the row's (|scale| sum_j P_ij (|dP_ij| + |Delta_i|) |k_j|
        over its keys, with the Delta it read): the shares of a correct ring add up to the rule, a float32 share the
        aliased buffer returns twice counts twice, one written to other rows (zigzag's second half into the first)
        counts there, and a misread Delta makes a share's terms larger than the row's. Each share's Delta also reads
        the out the forward stored, whose blocks' outs were rounded to the inputs' dtype before the merge
        (_stored_out_error): |scale| sum_j P_ij |k_j| sum_c |dO_ic| e_ic over its keys; and the kernel rounds dS to
        the inputs' dtype before its products, absolutely below the smallest normal: up to half the smallest
        subnormal and no more than |dS_ij| (specs.tolerance.rounding_below_normal) times |scale| |k_j| (dQ) or
        |q_i| (dK) for each such dS_ij. The ring's dQ is also rounded to bfloat16: u_bf16 |dQ| (u_bf16 = 2^-8),
        twice (SAFETY); zigzag and stripe return it in the inputs' dtype."""
        grads = self._gradients(call)
        if grads is None:
            return {}
        allowed = {name: bound for name, (_, bound, _) in grads.items()}
        if not self._returns_inputs_dtype(call):
            dq = grads["dq"][0]  # none past the range: an allowance of inf there would let any element conform
            magnitude = np.where(np.isfinite(dq), np.abs(dq), 0.0)
            allowed["dq"] = allowed["dq"] + SAFETY * unit_roundoff("bfloat16") * magnitude
        return allowed

    def undefined(self, call: Call) -> dict[str, np.ndarray]:
        """dK and dV of a float32 backward on two ranks or more: the race of the first step's send with the next
        step's write (the summary); an element that its error may or may not take past its dtype's range (a
        float16 share near 65520, the ring's dQ near 65408: bfloat16 rounds it to 65536)."""
        unsure = {name: mask for name, (_, _, mask) in (self._gradients(call) or {}).items()}
        world = call.tiles.get(WORLD_SIZE)
        if call.d_out is None or call.dtype != "float32" or world is None or world < 2:
            return unsure
        return {**unsure, "dk": np.ones(call.k.shape, dtype=bool), "dv": np.ones(call.v.shape, dtype=bool)}

    @staticmethod
    def _returns_inputs_dtype(call: Call) -> bool:
        """zigzag and stripe return dq.to(q.dtype); the ring's backward returns dq.to(torch.bfloat16)."""
        return bool(call.keywords.get("causal")) and call.tiles.get(LAYOUT, "contiguous") != "contiguous"

    def _gradients(self, call: Call) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
        """The re-enactment of `call`, made once: predicted_values and extra_allowance both read it for one call."""
        last = getattr(self, "_last", None)
        if last is None or last[0] is not call:
            self._last = (call, self._re_enacted(call))
        return self._last[1]

    def _re_enacted(self, call: Call) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
        """The re-enacted dQ (and dK where a rank reads dO misplaced) in float64, each with the error its shares
        bring beyond the gradient rule (extra_allowance) and where it is unsure of an overflow; None where this
        deviation predicts nothing: a forward call, scores beyond scale q k^T (which it does not model), causal with
        n_q != n_k, no group size on the call, or a gradient past the dtype's range."""
        schedule = ring_schedule(call)
        if call.d_out is None or schedule is None or call.poisoned:
            return None
        result = call.oracle
        if ((call.keywords.get("causal") and call.q.shape[2] != call.k.shape[2]) or result.mods.any
                or result.dropped is not None or "mask" in call.keywords):
            return None
        try:  # the gradient rule at each element: the kernel's error of a share (and the harness's allowance)
            rules = gradient_allowance(call.q, call.k, call.v, call.d_out, dtype=call.dtype,
                                       **call.oracle_keywords()).allowances
        except ToleranceUndefined:  # the harness judges no such call against a deviation
            return None
        rule_q, rule_k = rules[0].bound, rules[1].bound
        k_all, v_all = (repeat_kv(x, call.group) for x in (call.k, call.v))
        d_p = call.d_out @ v_all.swapaxes(-1, -2)
        true_delta = np.sum(result.out * call.d_out, axis=-1, keepdims=True)
        terms_q, terms_k = self._terms(call, result.weights, d_p, true_delta, k_all)
        # each array is (value, rounding bound, kernel error, unsure): the rounding bound follows the value's steps;
        # a share's kernel error is the gradient rule at its rows scaled by its terms over the row's (a share holds
        # some of a row's terms, more where dO is misread); unsure (> 0) where a share or the returned element lies
        # within its error of its dtype's overflow, so that either side may be the kernel's
        dq, dk = np.zeros((4, *call.q.shape)), np.zeros((4, *call.k.shape))
        rounding = SAFETY * 2 * unit_roundoff(call.dtype)
        misread_any = False
        for held, steps in schedule:
            # the forward merges the same blocks; one over every row after the first replaces out by the merge's
            # result, whose size-1 head dim torch strides by n_local: the backward copies that out contiguous
            misread = call.q.shape[-1] == 1 and any(step.rows == steps[0].rows for step in steps[1:])
            misread_any |= misread
            out_error = self._stored_out_error(call, v_all, held, steps)
            dq_shares = []
            for step in steps:
                at = held[step.rows]
                read = _d_out_as_read(call.d_out[:, :, held], step.rows) if misread else call.d_out[:, :, at]
                delta = np.sum(result.out[:, :, at] * read, axis=-1, keepdims=True)
                # Delta_i = rowsum(O * dO) from the out the forward stored: off by sum_c |dO_ic| e_ic, into each term
                delta_error = np.sum(np.abs(read) * out_error[:, :, step.rows], axis=-1, keepdims=True)
                weights = result.weights[:, :, at][..., step.keys]
                d_s = weights * (d_p[:, :, at][..., step.keys] - delta)
                # the kernel rounds dS to the inputs' dtype before its products: below the smallest normal that
                # rounding is absolute (the rule's is of the oracle's dS, this share's is of the Delta it read)
                d_s_off = weights * delta_error
                d_s_error = abs(result.scale) * (d_s_off + rounding_below_normal(np.abs(d_s), d_s_off, call.dtype))
                share_q, share_k = self._terms(call, weights, d_p[:, :, at][..., step.keys], delta,
                                               k_all[:, :, step.keys], call.q[:, :, at])
                dq_share = result.scale * (d_s @ k_all[:, :, step.keys])
                dq_shares.append(_stored(dq_share,
                                         rounding * np.abs(dq_share) + d_s_error @ np.abs(k_all[:, :, step.keys]),
                                         rule_q[:, :, at] * _ratio(share_q, terms_q[:, :, at]), call.dtype))
                # the kernel sums a kv head's group into its dK share
                dk_heads = result.scale * (d_s.swapaxes(-1, -2) @ call.q[:, :, at])
                dk_error = d_s_error.swapaxes(-1, -2) @ np.abs(call.q[:, :, at])
                dk[..., step.keys, :] += _stored(sum_groups(dk_heads, call.k.shape[1]),
                                                 rounding * sum_groups(np.abs(dk_heads), call.k.shape[1])
                                                 + sum_groups(dk_error, call.k.shape[1]),
                                                 rule_k[:, :, step.keys] * _ratio(share_k, terms_k[:, :, step.keys]),
                                                 call.dtype)
            # float32's dq is the buffer itself: a share it adds comes twice
            dq[..., held, :] = rank_dq(steps, dq_shares, len(held), aliased=call.dtype == "float32")
        # dQ returned as the inputs' dtype (the ring's through bfloat16 first), dK as the inputs' dtype
        returned = {"dq": (dq, rule_q, (() if self._returns_inputs_dtype(call) else ("bfloat16",)) + (call.dtype,))}
        if misread_any and call.dtype != "float32":  # float32 dK is undefined (the race)
            returned["dk"] = (dk, rule_k, (call.dtype,))
        grads = {}
        for name, ((value, bound, kernel, unsure), rule, casts) in returned.items():
            value, _, _, unsure = _stored(value, bound, np.maximum(kernel, rule), *casts, unsure=unsure)
            # beyond the gradient rule: the shares' rounding, and their kernel errors past the rule's at the element
            grads[name] = (value, bound + np.maximum(kernel - rule, 0.0), unsure > 0)
        return grads

    @staticmethod
    def _stored_out_error(call: Call, v_all: np.ndarray, held: np.ndarray, steps) -> np.ndarray:
        """A bound on the error of the out a rank's forward stored, over its rows `held`: each block's out, O_b =
        sum_(j in b) P_ij v_j / w_b with w_b = sum_(j in b) P_ij, is returned in the inputs' dtype and merged in
        float32 with weight w_b, and the merged out rounded to the inputs' dtype: SAFETY u (sum_b |sum_(j in b) P_ij
        v_j| + |O_i|). The rule's D term takes u |O_i| only (one rounding of an accurate out), which is far below
        this where the blocks' outs cancel (O_i near 0 from blocks of size 4 in float16: an error near 2e-3). The
        blocks are the backward's steps (the forward merges the same); float32's block outs are its accumulators',
        so there the term only repeats the rule's own."""
        result = call.oracle
        blocks = np.zeros(result.out[:, :, held].shape)
        for step in steps:
            at = held[step.rows]
            blocks[:, :, step.rows] += np.abs(result.weights[:, :, at][..., step.keys] @ v_all[:, :, step.keys])
        return SAFETY * unit_roundoff(call.dtype) * (blocks + np.abs(result.out[:, :, held]))

    @staticmethod
    def _terms(call: Call, weights: np.ndarray, d_p: np.ndarray, delta: np.ndarray, k_all: np.ndarray,
               q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The magnitudes of the terms dQ and dK sum over the given keys (and query rows, q; all by default):
        |scale| sum_j P_ij (|dP_ij| + |Delta_i|) |k_j| at each row and its dual at each key, kv heads summed."""
        magnitudes = abs(call.oracle.scale) * weights * (np.abs(d_p) + np.abs(delta))
        q = call.q if q is None else q
        return (magnitudes @ np.abs(k_all),
                sum_groups(magnitudes.swapaxes(-1, -2) @ np.abs(q), call.k.shape[1]))


RING_BACKWARD_DEVIATIONS = (DqAccumulatorAliasesStepBuffer,)
