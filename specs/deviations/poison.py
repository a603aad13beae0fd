"""Deviations of how a NaN or an Inf in the inputs travels: a poison in a key or value some row may not see reaches
that row (0 x NaN in the weighted sum, a NaN or +inf score plus an additive mask's -inf), a row whose visible scores
hold a NaN comes back as zeros, a hidden key reaches dQ through dS = 0. Each predicts the elements from where the
poison is, what each row may see and what its scores are in IEEE arithmetic; the rest of a poisoned call is judged
against the oracle, and again on the same example with finite garbage in place of the poison (specs.deviations.reach).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from specs.deviations.base import Call, Deviation, DeviationError
from specs.reference import repeat_kv
from specs.score_mods import causal_window, visible_key_range

THROUGH = ("values", "keys", "bias")
ACROSS = ("sequence", "pack")
GRADIENTS = ("dq", "dk", "dk-seen", "dv")
ROWS = ("every-row", "key-tiles")


def _visibility(call: Call) -> np.ndarray:
    """(batch, heads, n_q, n_k): may row i see key j."""
    allowed = call.oracle.allowed
    return np.ones(call.oracle.scores.shape, dtype=bool) if allowed is None else allowed


def _per_kv_head(x: np.ndarray, call: Call) -> np.ndarray:
    """A (batch, heads, ...) mask folded to (batch, heads_kv, ...): any query head of the group."""
    b, heads = x.shape[:2]
    return x.reshape(b, heads // call.group, call.group, *x.shape[2:]).any(axis=2)


class HiddenNonFiniteReaches(Deviation):
    name = "hidden-nonfinite-reaches-rows"
    summary = ("a NaN or Inf in a key or value that some row may not see reaches rows anyway: through `values`, "
               "0 x NaN puts it in that column of every row of its kv head; through `keys`, a hidden score that is "
               "NaN or +inf (IEEE: q.k with an Inf key) plus the additive mask's -inf is NaN, and so is its row; "
               "through `bias`, the same for keys hidden by a -inf bias alone (an implementation that masks by "
               "selection but adds the bias); "
               "`across` 'pack': the rows of every sequence packed in the call, not only its own")
    parameters: ClassVar[dict[str, str]] = {"through": "a list of 'values', 'keys' and 'bias'",
                                            "across": "'sequence' (default) or 'pack'"}

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
        out_shape = call.oracle.out.shape
        reached = np.zeros(out_shape, dtype=bool)
        if "values" in self.through:
            hidden_from_some = _per_kv_head(~visible, call).any(axis=2)  # (batch, heads_kv, n_k)
            poisoned = ~np.isfinite(call.v) & hidden_from_some[..., None]  # (batch, heads_kv, n_k, d_v)
            columns = repeat_kv(poisoned.any(axis=2)[:, :, None, :], call.group)[:, :, 0, :]  # (batch, heads, d_v)
            reached |= columns[:, :, None, :]
        if "keys" in self.through:
            scores = call.ieee_scores
            rows = (~visible & (np.isnan(scores) | np.isposinf(scores))).any(axis=-1)  # (batch, heads, n_q)
            reached |= rows[..., None]
        bias = call.oracle_keywords().get("bias")
        if "bias" in self.through and bias is not None:
            scores = call.ieee_scores
            hidden_by_bias = np.broadcast_to(np.isneginf(bias), scores.shape)
            reached |= (hidden_by_bias & np.isnan(scores)).any(axis=-1)[..., None]
        if self.across == "pack" and reached.any():
            reached |= reached.any(axis=0, keepdims=True)
        return reached & np.isfinite(call.oracle.out)

    def reached_in_pack(self, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray | None:
        """For a varlen pack (total, heads, dim) whose unused positions (seen by no sequence) hold a poison: the
        packed output's elements it reaches, (total_q, heads, d_v); None unless `across` is 'pack'."""
        if self.across != "pack":
            return None
        group = q.shape[1] // k.shape[1]
        reached = np.zeros((q.shape[0], q.shape[1], v.shape[2]), dtype=bool)
        if "values" in self.through:
            reached |= np.repeat(~np.isfinite(v).all(axis=0), group, axis=0)[None]
        if "keys" in self.through:
            with np.errstate(all="ignore"):
                scores = np.einsum("ihc,jhc->ihj", q, np.repeat(k, group, axis=1))
            reached |= (np.isnan(scores) | np.isposinf(scores)).any(axis=-1)[..., None]
        return reached

    def non_finite(self, call):
        if not call.poisoned:
            return {}
        reached = self._reached(call)
        if not reached.any():
            return {}
        whole_rows = reached.all(axis=-1)
        return {"out": reached, **({"lse": whole_rows & np.isfinite(call.oracle.lse)} if "keys" in self.through
                                   else {})}


class ProjectionsSpreadNonFinite(Deviation):
    name = "projections-spread-nonfinite"
    summary = ("q, k and v pass through projections that mix a position's heads and columns (x @ W, W = I in an "
               "adapter): a NaN or Inf in one element becomes NaN in every element of its position, every head; "
               "the attention then reaches the rows that see it (and, as `then` says, those that do not), and the "
               "output projection spreads each reached row over all its heads and columns")
    parameters: ClassVar[dict[str, str]] = {"then": "how the attention lets the spread poison through: a list of "
                                                    "'values' and 'keys', as hidden-nonfinite-reaches-rows' "
                                                    "`through` (empty: only rows that see it)"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        then = params.get("then", [])
        if any(part not in THROUGH for part in then):
            raise DeviationError(f"projections-spread-nonfinite: then is a list of {THROUGH}, got {then!r}")
        self.then = tuple(then)

    def replaces_poison(self) -> bool:
        return True

    @staticmethod
    def _spread(x: np.ndarray) -> np.ndarray:
        bad = ~np.isfinite(x).all(axis=(1, 3), keepdims=True)  # (batch, 1, n, 1): any head, any column
        return np.where(bad, np.nan, x)

    def non_finite(self, call):
        if not call.poisoned:
            return {}
        spread = dataclasses.replace(call, q=self._spread(call.q), k=self._spread(call.k), v=self._spread(call.v))
        reached = ~np.isfinite(spread.oracle.out)
        if self.then:
            reached |= HiddenNonFiniteReaches(through=list(self.then))._reached(spread)
        rows = reached.any(axis=(1, 3), keepdims=True)  # the output projection mixes a row's heads and columns
        reached = np.broadcast_to(rows, reached.shape) & np.isfinite(call.oracle.out)
        return {"out": reached.copy()} if reached.any() else {}


class HiddenNonFiniteGradients(Deviation):
    name = "hidden-nonfinite-reaches-gradients"
    summary = ("a NaN or Inf in a key that no query of its kv head sees reaches the gradients anyway: dQ = dS K "
               "multiplies it by dS = 0 (0 x NaN) in every row that reads the key; where the forward carried it "
               "into every row (an additive mask), dK and dV of its kv head too")
    parameters: ClassVar[dict[str, str]] = {
        "gradients": "which of dq, dk, dv it reaches (dk and dv: every element of the kv head; 'dk-seen': dK of "
                     "the keys some row sees, where the mask selects: a hidden NaN value makes D_i = sum_j P_ij dP_ij "
                     "NaN, and so dS of every key the row sees)",
        "rows": "'every-row' (default), or 'key-tiles': only the rows of query tiles whose key range holds the key "
                "(a tiled backward never reads keys past every row's causal horizon or outside the window), and "
                "dk and dv only where some tile reads it",
        "block_rows": "the query tile's rows, with rows = 'key-tiles'",
        "block_keyword": "the tile keyword that sets them when the call passes it"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        gradients = params.get("gradients", ["dq"])
        if not gradients or any(name not in GRADIENTS for name in gradients):
            raise DeviationError(f"hidden-nonfinite-reaches-gradients: gradients is a list of {GRADIENTS}, got "
                                 f"{gradients!r}")
        self.gradients = tuple(gradients)
        self.rows = params.get("rows", "every-row")
        if self.rows not in ROWS:
            raise DeviationError(f"hidden-nonfinite-reaches-gradients: rows is one of {ROWS}, got {self.rows!r}")
        self.block_rows = params.get("block_rows")
        if self.rows == "key-tiles" and (not isinstance(self.block_rows, int) or self.block_rows < 1):
            raise DeviationError("hidden-nonfinite-reaches-gradients: rows = 'key-tiles' needs block_rows, the "
                                 "query tile's rows")

    def _reading(self, call: Call) -> np.ndarray:
        """(n_q, n_k): does row i's query tile read key j."""
        n_q, n_k = call.q.shape[2], call.k.shape[2]
        if self.rows == "every-row":
            return np.ones((n_q, n_k), dtype=bool)
        block = int(call.tiles.get(self.params.get("block_keyword"), self.block_rows))
        keywords = call.oracle_keywords()
        offset = 0 if keywords["causal_alignment"] == "top_left" else n_k - n_q
        window = causal_window(keywords.get("window_size"), bool(keywords.get("causal")))
        reading = np.zeros((n_q, n_k), dtype=bool)
        for start in range(0, n_q, block):
            rows = range(start, min(start + block, n_q))
            keys = visible_key_range(rows, n_k, window, offset)
            reading[rows.start:rows.stop, keys.start:keys.stop] = True
        return reading

    def non_finite_gradients(self, call):
        if not call.poisoned:
            return {}
        unseen = ~_per_kv_head(_visibility(call).any(axis=2), call)  # (batch, heads_kv, n_k)
        bad_k = ~np.isfinite(call.k) & unseen[..., None]  # (batch, heads_kv, n_k, d)
        bad_v = ~np.isfinite(call.v) & unseen[..., None]
        if not (bad_k.any() or bad_v.any()):
            return {}
        reached = {}
        reading = self._reading(call)  # (n_q, n_k)
        if "dq" in self.gradients:
            per_head = repeat_kv(bad_k, call.group)  # (batch, heads, n_k, d)
            reached["dq"] = np.einsum("ij,bhjc->bhic", reading.astype(float), per_head.astype(float)) > 0
        read = reading.any(axis=0)[None, None, :, None]  # keys some query tile reads: only they reach the forward
        heads = ((bad_k & read).any(axis=(2, 3)) | (bad_v & read).any(axis=(2, 3)))[:, :, None, None]
        for name, array in (("dk", call.k), ("dv", call.v)):
            if name in self.gradients:
                reached[name] = np.broadcast_to(heads, array.shape).copy()
        if "dk-seen" in self.gradients:
            seen = _per_kv_head(_visibility(call).any(axis=2), call)[..., None]  # (batch, heads_kv, n_k, 1)
            reached["dk"] = reached.get("dk", np.zeros(call.k.shape, bool)) | np.broadcast_to(heads & seen,
                                                                                              call.k.shape)
        return {name: mask for name, mask in reached.items() if mask.any()}


class NanScoreRowZero(Deviation):
    name = "nan-score-row-zero"
    summary = ("a row whose scores hold a NaN it may see comes back as zeros, as if it saw no key (a kernel whose "
               "running maximum ignores NaN and whose empty-row branch then writes 0)")

    def predicted_values(self, call):
        if not call.poisoned:
            return {}
        scores = call.ieee_scores
        rows = (_visibility(call) & np.isnan(scores)).any(axis=-1)
        if not rows.any():
            return {}
        out = call.oracle.out
        return {"out": (np.broadcast_to(rows[..., None], out.shape).copy(), np.zeros(out.shape))}


POISON_DEVIATIONS = (HiddenNonFiniteReaches, ProjectionsSpreadNonFinite, HiddenNonFiniteGradients, NanScoreRowZero)
