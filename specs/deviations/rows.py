"""Deviations that change what some rows of the output are: rows with no visible key, key blocks normalised alone,
exponentials taken without the row maximum, scores past the dtype's range. Each is a model of the oracle's result
(Deviation.transform) and, where the rows turn non-finite, the rows that must be."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from specs.deviations.base import Call, Deviation, DeviationError
from specs.deviations.reach import rows_to_gradients
from specs.dtypes import finfo, numpy_dtype
from specs.reference import AttentionResult, attention, matmul, repeat_kv, visible_keys
from specs.tolerance import unit_roundoff
from specs.validation import check_shapes

MASKED_SCORES = ("added", "replaced")


def keyless_rows(result: AttentionResult) -> np.ndarray:
    """(batch, heads, n_q): rows that see no key and have no finite sink (the oracle gives them weight 0 and output 0;
    a finite sink takes the whole row, so an implementation's large negative scores leave its output 0 too)."""
    if result.allowed is None:
        return np.zeros(result.out.shape[:-1], dtype=bool)
    rows = ~result.allowed.any(axis=-1)
    if result.mods.sinks is not None:
        rows = rows & np.isneginf(result.mods.sinks)[None, :, None]
    return rows


def _hidden_by_boolean_parts(result: AttentionResult, shape, keywords: dict) -> np.ndarray:
    """(batch, heads, n_q, n_k): the keys the boolean parts of a call (mask, causal, window) hide, its bias aside."""
    boolean = visible_keys(shape, causal=keywords.get("causal", False),
                           causal_alignment=keywords.get("causal_alignment", "top_left"),
                           mask=None if keywords.get("mask") is None else np.broadcast_to(keywords["mask"],
                                                                                          shape.scores_shape),
                           mods=dataclasses.replace(result.mods, bias=None))
    return np.zeros(shape.scores_shape, dtype=bool) if boolean is None else ~boolean


class KeylessRowMean(Deviation):
    name = "keyless-row-mean"
    summary = ("a row that sees no key gets the mean of the values: hidden keys get a large finite score (a dtype's "
               "most negative value, -1e9), the same for each, so a row with nothing visible has a uniform softmax "
               "over them; NaN where no such key is left (every key's score -inf)")
    parameters: ClassVar[dict[str, str]] = {
        "masked_scores": "'added': the large negative is added to the score, so a key with a -inf bias stays -inf and "
                         "the row's gradients flow through its scores (transformers' eager_mask); 'replaced': hidden "
                         "scores are replaced, bias and all, and the row's weights are constants of the backward "
                         "(jax.nn, flax: jnp.where)",
        "pack_padding": "'none' (default), or 'zeros': a varlen pack's sequences are padded with zero keys and "
                        "values to its longest (the `pack_keys` of the call: jax.nn's sequence lengths), and a row "
                        "with no key averages the padding too"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.masked_scores = params.get("masked_scores", "added")
        if self.masked_scores not in MASKED_SCORES:
            raise DeviationError(f"keyless-row-mean: masked_scores is one of {MASKED_SCORES}, got "
                                 f"{self.masked_scores!r}")
        self.pack_padding = params.get("pack_padding", "none")
        if self.pack_padding not in ("none", "zeros"):
            raise DeviationError(f"keyless-row-mean: pack_padding is 'none' or 'zeros', got {self.pack_padding!r}")

    def _averaged(self, result: AttentionResult, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  keywords: dict) -> tuple[np.ndarray, np.ndarray]:
        """The keyless rows and, for each, the keys its uniform softmax runs over."""
        rows = keyless_rows(result)
        shape = check_shapes(q, k, v, finite=False)
        if self.masked_scores == "added":
            bias = result.mods.bias
            keys = np.ones(shape.scores_shape, dtype=bool) if bias is None else np.broadcast_to(
                bias > -np.inf, shape.scores_shape)
        else:  # replaced: the keys the boolean parts (mask, causal, window) hide get the large negative
            keys = _hidden_by_boolean_parts(result, shape, keywords)
        return rows, keys

    def transform(self, result, q, k, v, keywords):
        rows, keys = self._averaged(result, q, k, v, keywords)
        # zero keys and values a pack pads the sequence with, each hidden: weighed too, adding nothing to the sum
        padding = max(int(keywords.get("pack_keys") or 0) - k.shape[2], 0) if self.pack_padding == "zeros" else 0
        count = keys.sum(axis=-1) + padding
        averaged = rows & (count > 0)
        if not averaged.any():
            return result
        dtype = result.out.dtype
        uniform = np.where(keys, dtype.type(1) / np.maximum(count, 1)[..., None].astype(dtype), dtype.type(0))
        weights = np.where(averaged[..., None], uniform, result.weights).astype(dtype)
        v_all = repeat_kv(v.astype(dtype, copy=False), q.shape[1] // v.shape[1])
        out = np.where(averaged[..., None], matmul(weights, v_all).astype(dtype), result.out)
        scores = np.where(averaged[..., None] & keys, dtype.type(0), result.scores)
        constant = result.constant_rows
        if self.masked_scores == "replaced":
            constant = averaged if constant is None else constant | averaged
        return dataclasses.replace(result, weights=weights, out=out, scores=scores, constant_rows=constant)

    def _nan_rows(self, call: Call) -> np.ndarray:
        result = call.oracle
        rows, keys = self._averaged(result, call.q, call.k, call.v, call.oracle_keywords())
        if self.pack_padding == "zeros" and int(call.tiles.get("pack_keys") or 0) > call.k.shape[2]:
            return np.zeros(rows.shape, dtype=bool)  # the padding's zero keys are left to average
        return rows & (keys.sum(axis=-1) == 0)

    def _dead_rows(self, call: Call) -> tuple[np.ndarray, np.ndarray]:
        """In a call with an Inf in its inputs: the rows with no visible key or every visible one scored -inf (the
        oracle gives them weight 0 and output 0), and each one's mean over the keys the mask hid with a score left
        finite in IEEE arithmetic (added: finfo.min plus the score, so not a key the poison scores -inf; replaced:
        every key the boolean parts hide); NaN where none is left or a value averaged is not finite."""
        out = call.oracle.out
        none = np.zeros(out.shape[:-1], dtype=bool), np.zeros(out.shape)
        if not call.poisoned or call.oracle.allowed is None:
            return none
        visible = call.oracle.allowed
        scores = call.ieee_scores
        rows = ~(visible & ~np.isneginf(scores)).any(axis=-1) & np.isfinite(out).all(axis=-1)
        if not rows.any():
            return none
        if self.masked_scores == "added":
            keys = ~visible & np.isfinite(scores)
        else:
            keys = _hidden_by_boolean_parts(call.oracle, check_shapes(call.q, call.k, call.v, finite=False),
                                            call.oracle_keywords())
        count = keys.sum(axis=-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = matmul(keys / count, repeat_kv(np.where(np.isfinite(call.v), call.v, np.nan), call.group))
        if self.masked_scores == "added":  # finfo.min plus a NaN or +inf score is NaN or +inf: the row is NaN
            mean = np.where((~visible & (np.isnan(scores) | np.isposinf(scores))).any(axis=-1, keepdims=True),
                            np.nan, mean)
        return rows, np.where(rows[..., None], mean, 0.0)

    def non_finite(self, call):
        rows = self._nan_rows(call)
        dead, mean = self._dead_rows(call)
        reached = np.broadcast_to(rows[..., None], call.oracle.out.shape) | (dead[..., None] & ~np.isfinite(mean))
        if not reached.any():
            return {}
        return {"out": reached.copy(), "lse": rows}

    def extra_allowance(self, call):
        """A row the poison leaves with no finite visible score is a mean of `count` values, each weight 1/count
        rounded, summed in the dtype: (count + 1) u max|v| (the garbage call's allowance knows nothing of it)."""
        dead, _ = self._dead_rows(call)
        if not dead.any():
            return {}
        largest = float(np.abs(np.where(np.isfinite(call.v), call.v, 0.0)).max(initial=0.0))
        bound = (call.k.shape[2] + 1) * unit_roundoff(call.dtype) * largest
        return {"out": np.where(dead[..., None], bound, 0.0) * np.ones(call.oracle.out.shape)}

    def predicted_values(self, call):
        dead, mean = self._dead_rows(call)
        finite = dead[..., None] & np.isfinite(mean)
        return {"out": (finite, np.where(finite, mean, 0.0))} if finite.any() else {}

    def non_finite_gradients(self, call):
        return rows_to_gradients(call, self._nan_rows(call))


class KeylessRowNan(Deviation):
    name = "keyless-row-nan"
    summary = ("a row that sees no key is NaN: every score of the row is -inf (a mask value that rounds to -inf, "
               "finfo(float64).min cast to float32) and the softmax divides 0 by 0")

    def non_finite(self, call):
        rows = keyless_rows(call.oracle)
        if not rows.any():
            return {}
        return {"out": np.broadcast_to(rows[..., None], call.oracle.out.shape).copy(), "lse": rows}

    def non_finite_gradients(self, call):
        return rows_to_gradients(call, keyless_rows(call.oracle))


class InfiniteSinkRowNan(Deviation):
    name = "infinite-sink-row-nan"
    summary = ("every row of a head whose sink is +inf is NaN (the oracle gives it weight 0 on every key, output "
               "0): the row's maximum is taken over its scores and the sink, and the sink minus it is inf - inf")

    @staticmethod
    def _rows(call: Call) -> np.ndarray:
        sinks = call.oracle_keywords().get("sinks")
        out = call.oracle.out
        if sinks is None:
            return np.zeros(out.shape[:-1], dtype=bool)
        return np.broadcast_to(np.isposinf(np.asarray(sinks))[None, :, None], out.shape[:-1]) & np.isfinite(
            out).all(axis=-1)

    def non_finite(self, call):
        rows = self._rows(call)
        if not rows.any():
            return {}
        return {"out": np.broadcast_to(rows[..., None], call.oracle.out.shape).copy(), "lse": rows}

    def non_finite_gradients(self, call):
        return rows_to_gradients(call, self._rows(call))


class BlocksNormalisedAlone(Deviation):
    name = "key-blocks-normalised-alone"
    summary = ("the keys are split into blocks of `block` and each block gets its own softmax, the blocks' "
               "outputs summed without online-softmax rescaling: a row's weights sum to its number of key blocks")
    parameters: ClassVar[dict[str, str]] = {"block": "keys per block",
                  "block_keyword": "the tile keyword that sets the block when the call passes it",
                  "longer": "[[n, block], ...]: the block for sequences longer than n (the seed's own table)"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.block = self.positive_int("block")
        self.block_keyword = params.get("block_keyword")
        self.longer = tuple(tuple(pair) for pair in params.get("longer", ()))

    def block_for(self, n_k: int, keywords: dict) -> int:
        if self.block_keyword and self.block_keyword in keywords:
            return int(keywords[self.block_keyword])
        chosen = self.block
        for length, block in self.longer:
            if n_k > length:
                chosen = block
        return chosen

    def transform(self, result, q, k, v, keywords):
        n_k = k.shape[2]
        block = self.block_for(n_k, keywords)
        if n_k <= block:
            return result
        dtype = result.out.dtype
        scores = result.scores
        weights = np.zeros_like(result.weights)
        for start in range(0, n_k, block):
            part = scores[..., start:start + block]
            top = part.max(axis=-1, keepdims=True)
            e = np.exp(part - np.where(np.isfinite(top), top, dtype.type(0)))
            total = e.sum(axis=-1, keepdims=True)
            weights[..., start:start + block] = e / np.where(total > 0, total, dtype.type(1))
        v_all = repeat_kv(v.astype(dtype, copy=False), q.shape[1] // v.shape[1])
        return dataclasses.replace(result, weights=weights.astype(dtype), out=matmul(weights.astype(dtype), v_all)
                                   .astype(dtype))


class ExpWithoutMaxShift(Deviation):
    name = "exp-without-max-shift"
    summary = ("the output is the ratio of exponential sums (e^S V) / (sum e^S), no maximum subtracted (seed 000 § "
               "Flash Attention taken literally): a score above log(max) (709.78 in float64) overflows, a product "
               "e^S v past the largest finite value overflows the numerator, a row whose exponentials all underflow "
               "is 0 / 0, and subnormal exponentials cost the ratio its precision; each as the formula computes it")

    @staticmethod
    def _ratio(result: AttentionResult, v: np.ndarray, group: int) -> np.ndarray:
        dtype = result.out.dtype
        with np.errstate(all="ignore"):
            e = np.exp(result.scores)
            return (matmul(e, repeat_kv(v.astype(dtype, copy=False), group)) / e.sum(axis=-1, keepdims=True)
                    ).astype(dtype)

    def transform(self, result, q, k, v, keywords):
        if result.mods.any or result.allowed is not None:
            return result
        ratio = self._ratio(result, v, q.shape[1] // v.shape[1])
        kept = np.all(np.isfinite(ratio), axis=-1, keepdims=True)
        return dataclasses.replace(result, out=np.where(kept, ratio, result.out))

    def non_finite(self, call):
        result = call.oracle
        if result.mods.any or result.allowed is not None:
            return {}
        ratio = self._ratio(result, call.v, call.group)
        reached = ~np.isfinite(ratio) & np.isfinite(result.out)  # element by element: a visible NaN is the oracle's
        return {"out": reached} if reached.any() else {}

    def extra_allowance(self, call: Call) -> dict[str, np.ndarray]:
        """Exponentials in the subnormal range carry an absolute error of up to the smallest subnormal each (exp's
        last bit there is a large part of the value): relative to the row's sum, 2 n_k x that / sum_j e_ij of
        |v|'s largest, per row."""
        with np.errstate(all="ignore"):
            e = np.exp(call.oracle.scores)
            total = e.sum(axis=-1, keepdims=True)
            smallest = float(finfo(np.float64).smallest_subnormal)
            subnormal = (e.max(axis=-1, keepdims=True) < finfo(np.float64).tiny) & (total > 0)
            relative = np.where(subnormal, 2 * call.k.shape[2] * smallest / np.where(total > 0, total, 1.0), 0.0)
        return {"out": np.broadcast_to(relative * float(np.abs(call.v).max(initial=0.0)), call.oracle.out.shape)}


class ScoresOverflowDtype(Deviation):
    name = "scores-overflow-dtype"
    summary = ("the scores are computed in the implementation's own dtype before any softmax correction: a row "
               "with a score past the dtype's range (65504 in float16) is what the naive formula makes of it, NaN "
               "after a +inf score, 0 when every score is -inf")

    @staticmethod
    def _overflowing(call: Call) -> tuple[np.ndarray, np.ndarray]:
        """The rows with a score that leaves the dtype's range, and the naive formula's output (float64)."""
        if call.dtype == "float64":
            return np.zeros(call.oracle.out.shape[:-1], bool), call.oracle.out
        low = numpy_dtype(call.dtype)
        keywords = {key: value.astype(low) if isinstance(value, np.ndarray) and value.dtype.kind == "f" else value
                    for key, value in call.oracle_keywords().items()}
        with np.errstate(all="ignore"):
            naive = attention(*(x.astype(low) for x in (call.q, call.k, call.v)), finite=False, **keywords)
        visible = naive.allowed if naive.allowed is not None else np.ones(naive.scores.shape, bool)
        rows = (np.isinf(naive.scores) & visible).any(axis=-1) & np.isfinite(call.oracle.out).all(axis=-1)
        return rows, naive.out.astype(np.float64)

    def non_finite(self, call):
        rows, naive = self._overflowing(call)
        reached = rows[..., None] & ~np.isfinite(naive)
        return {"out": reached} if reached.any() else {}

    def predicted_values(self, call):
        rows, naive = self._overflowing(call)
        finite = rows[..., None] & np.isfinite(naive)
        return {"out": (finite, np.where(finite, naive, 0.0))} if finite.any() else {}


ROW_DEVIATIONS = (KeylessRowMean, KeylessRowNan, InfiniteSinkRowNan, BlocksNormalisedAlone, ScoresOverflowDtype,
                  ExpWithoutMaxShift)
