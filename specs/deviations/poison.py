"""Deviations of how a NaN or an Inf in the inputs travels: a poison in a key or value some row may not see reaches
that row (0 x NaN in the weighted sum, NaN + a large negative mask), or a row whose visible scores hold a NaN comes
back as zeros. Each predicts the elements from the positions of the poison and what each row may see; the rest of a
poisoned call is judged again on the same example with finite garbage in place of the poison (specs.deviations.reach).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from specs.deviations.base import Call, Deviation, DeviationError
from specs.deviations.reach import rows_to_gradients

THROUGH = ("values", "keys")
ACROSS = ("sequence", "pack")


def _visibility(call: Call) -> np.ndarray:
    """(batch, heads, n_q, n_k): may row i see key j."""
    allowed = call.oracle.allowed
    return np.ones(call.oracle.scores.shape, dtype=bool) if allowed is None else allowed


def _per_kv_head(x: np.ndarray, call: Call) -> np.ndarray:
    """A (batch, heads, ...) mask folded to (batch, heads_kv, ...): any query head of the group."""
    b, heads = x.shape[:2]
    return x.reshape(b, heads // call.group, call.group, *x.shape[2:]).any(axis=2)


def _to_query_heads(x: np.ndarray, call: Call) -> np.ndarray:
    return np.repeat(x, call.group, axis=1) if call.group > 1 else x


class HiddenNonFiniteReaches(Deviation):
    name = "hidden-nonfinite-reaches-rows"
    summary = ("a NaN or Inf in a key or value that some row may not see reaches rows anyway: through `values`, "
               "0 x NaN puts it in that column of every row of its kv head; through `keys`, its score (NaN, or NaN "
               "plus the mask's large negative) poisons every row of its kv head; `across` 'pack': the rows of every "
               "sequence packed in the call, not only its own")
    parameters: ClassVar[dict[str, str]] = {"through": "a list of 'values' and 'keys'", "across": "'sequence' (default) or 'pack'"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        through = params.get("through", ["values"])
        through = [through] if isinstance(through, str) else through
        if not through or any(part not in THROUGH for part in through):
            raise DeviationError(f"hidden-nonfinite-reaches-rows: through is a list of {THROUGH}, got {through!r}")
        self.through = tuple(through)
        self.across = params.get("across", "sequence")
        if self.across not in ACROSS:
            raise DeviationError(f"hidden-nonfinite-reaches-rows: across is one of {ACROSS}, got {self.across!r}")

    def replaces_poison(self) -> bool:
        return True

    def _reached(self, call: Call) -> np.ndarray:
        """(batch, heads, n_q, d_v): the output elements the hidden poison reaches."""
        visible = _visibility(call)
        hidden_from_some = _per_kv_head(~visible, call).any(axis=2)  # (batch, heads_kv, n_k)
        out_shape = call.oracle.out.shape
        reached = np.zeros(out_shape, dtype=bool)
        if "values" in self.through:
            poisoned = ~np.isfinite(call.v) & hidden_from_some[..., None]  # (batch, heads_kv, n_k, d_v)
            columns = _to_query_heads(poisoned.any(axis=2), call)  # (batch, heads, d_v)
            reached |= columns[:, :, None, :]
        if "keys" in self.through:
            poisoned = (~np.isfinite(call.k)).any(axis=-1) & hidden_from_some  # (batch, heads_kv, n_k)
            heads = _to_query_heads(poisoned.any(axis=2), call)  # (batch, heads)
            reached |= heads[:, :, None, None]
        if self.across == "pack" and reached.any():
            reached |= reached.any(axis=0, keepdims=True)
        return reached & np.isfinite(call.oracle.out)

    def non_finite(self, call):
        if not call.poisoned:
            return {}
        reached = self._reached(call)
        if not reached.any():
            return {}
        whole_rows = reached.all(axis=-1)
        return {"out": reached, **({"lse": whole_rows & np.isfinite(call.oracle.lse)} if "keys" in self.through
                                   else {})}

    def non_finite_gradients(self, call):
        if not call.poisoned:
            return {}
        return rows_to_gradients(call, self._reached(call).any(axis=-1))


class NanScoreRowZero(Deviation):
    name = "nan-score-row-zero"
    summary = ("a row whose scores hold a NaN it may see comes back as zeros, as if it saw no key (a kernel whose "
               "running maximum ignores NaN and whose empty-row branch then writes 0)")

    def predicted_values(self, call):
        if not call.poisoned:
            return {}
        visible = _visibility(call)
        bad_keys = _to_query_heads((~np.isfinite(call.k)).any(axis=-1), call)  # (batch, heads, n_k)
        with np.errstate(invalid="ignore"):
            q_bad = ~np.isfinite(call.q).all(axis=-1)  # (batch, heads, n_q)
        rows = ((visible & bad_keys[:, :, None, :]).any(axis=-1) | (q_bad & visible.any(axis=-1)))
        if not rows.any():
            return {}
        out = call.oracle.out
        return {"out": (np.broadcast_to(rows[..., None], out.shape).copy(), np.zeros(out.shape))}


POISON_DEVIATIONS = (HiddenNonFiniteReaches, NanScoreRowZero)
