"""Deviations of a sharded implementation's backward, read from the ring it runs (issue 39; seed 000 § Flash
Attention's "tiled output equals global output", one level up): what a rank's dQ is when the ring keeps it wrongly.
The group size and layout a call ran on are the call's (Call.tiles["world_size"], specs.sharding)."""

from __future__ import annotations

import numpy as np

from specs.deviations.base import Call, Deviation
from specs.gradients import score_gradient
from specs.reference import repeat_kv
from specs.sharding import shard_positions
from specs.tolerance import SAFETY, unit_roundoff

WORLD_SIZE = "world_size"  # the group size a sharded call ran on, in Call.tiles (harness.api.explain)


class DqAccumulatorAliasesStepBuffer(Deviation):
    name = "dq-accumulator-aliases-step-buffer"
    summary = ("a ring backward that keeps dQ as `step_buffer.to(float32)`, which for float32 inputs is the buffer "
               "itself, not a copy: the next step writes its key block's share of dQ into that buffer and `dq += "
               "buffer` doubles it, so a rank that computes more than one block returns twice the share of the last "
               "(causal: key chunk 0; without a mask: the chunk of rank r + 1), and dQ comes back rounded to "
               "bfloat16 for every dtype; dK and dV of float32 inputs are undefined on two ranks or more: the first "
               "step's are the buffers themselves too, sent on asynchronously while the next step overwrites them, "
               "so what arrives depends on a race (ring-flash-attn 0.1.8's ring_flash_attn_backward, contiguous "
               "shards)")

    def predicted_values(self, call: Call) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """dQ of every rank of a backward call with plain scaled scores (causal or not), in float64 before the
        bfloat16 rounding that extra_allowance allows."""
        dq = self._dq(call)
        return {} if dq is None else {"dq": (np.ones(dq.shape, dtype=bool), dq)}

    def extra_allowance(self, call: Call) -> dict[str, np.ndarray]:
        """The bfloat16 rounding of the returned dQ, u_bf16 |dQ| (u_bf16 = 2^-8), twice (SAFETY). It also covers the
        float32 rounding of the one block's share the rank doubles: that is within the float32 gradient rule the
        element already has, for a share sums a subset of the same terms."""
        dq = self._dq(call)
        return {} if dq is None else {"dq": SAFETY * unit_roundoff("bfloat16") * np.abs(dq)}

    def undefined(self, call: Call) -> dict[str, np.ndarray]:
        """dK and dV of a float32 backward on two ranks or more: the race of the first step's send with the next
        step's write (the summary)."""
        world = call.tiles.get(WORLD_SIZE)
        if call.d_out is None or call.dtype != "float32" or world is None or world < 2:
            return {}
        return {"dk": np.ones(call.k.shape, dtype=bool), "dv": np.ones(call.v.shape, dtype=bool)}

    def _dq(self, call: Call) -> np.ndarray | None:
        """The ring's dQ in float64, or None where this deviation predicts nothing: a forward call, scores beyond
        scale q k^T (which it does not model), causal with n_q != n_k, or no group size on the call."""
        world = call.tiles.get(WORLD_SIZE)
        if call.d_out is None or world is None or call.poisoned:
            return None
        causal = bool(call.keywords.get("causal"))
        n_q, n_k = call.q.shape[2], call.k.shape[2]
        result = call.oracle
        if (causal and n_q != n_k) or result.mods.any or result.dropped is not None or "mask" in call.keywords:
            return None
        k_all, v_all = (repeat_kv(x, call.group) for x in (call.k, call.v))
        d_s = score_gradient(result, v_all, call.d_out, {})
        rows, keys = shard_positions(n_q, world, "contiguous"), shard_positions(n_k, world, "contiguous")
        dq = result.scale * (d_s @ k_all)
        if call.dtype != "float32":  # .to(float32) copies: the accumulation is right
            return dq
        for rank in range(world):
            computed = rank + 1 if causal else world  # steps 0..rank see key chunks rank, rank - 1, ..., 0
            if computed < 2:
                continue
            last = keys[(rank - (computed - 1)) % world]  # the key chunk of the last step computed
            share = result.scale * (d_s[:, :, rows[rank]][..., last] @ k_all[:, :, last])
            dq[..., rows[rank], :] = 2 * share
        return dq


RING_BACKWARD_DEVIATIONS = (DqAccumulatorAliasesStepBuffer,)
