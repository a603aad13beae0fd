"""Deviations of the log-sum-exp an implementation returns beside its output (capability lse): conventions of
shipped kernels for a row with no key, and FlashAttention's causal ALiBi, which shifts each row's scores by a
constant (the output unchanged in exact arithmetic, the log-sum-exp moved by it)."""

from __future__ import annotations

import dataclasses
import numbers
from typing import ClassVar

import numpy as np

from specs.deviations.base import Call, Deviation, DeviationError
from specs.deviations.rows import keyless_rows
from specs.score_mods import alignment_offset
from specs.tolerance import SAFETY, unit_roundoff
from specs.validation import check_shapes


class KeylessLseFinite(Deviation):
    name = "keyless-lse-finite"
    summary = ("a row with no visible key has the log-sum-exp of its hidden keys' large finite score `fill` "
               "(fill + log n_k), not -inf")
    parameters: ClassVar[dict[str, str]] = {
        "fill": "the finite score a hidden key gets (jax: -0.7 x float32's largest)"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.fill = params.get("fill")
        if not isinstance(self.fill, numbers.Real) or not np.isfinite(self.fill) or self.fill >= 0:
            raise DeviationError(f"keyless-lse-finite: fill is a finite negative number, got {self.fill!r}")

    def transform(self, result, q, k, v, keywords):
        rows = keyless_rows(result)
        if not rows.any():
            return result
        value = result.lse.dtype.type(self.fill + np.log(k.shape[2]))
        return dataclasses.replace(result, lse=np.where(rows, value, result.lse))


class KeylessLsePlusInf(Deviation):
    name = "keyless-lse-plus-inf"
    summary = ("a row with no visible key has log-sum-exp +inf (FlashAttention's kernels: the early exit of a "
               "block range with no key, and softmax.h's row_sum of 0 turned into +inf), not -inf")

    value: ClassVar[float] = np.inf

    def transform(self, result, q, k, v, keywords):
        rows = keyless_rows(result)
        if not rows.any():
            return result
        return dataclasses.replace(result, lse=np.where(rows, result.lse.dtype.type(self.value), result.lse))


class KeylessLseZero(KeylessLsePlusInf):
    name = "keyless-lse-zero"
    summary = ("a row with no visible key has log-sum-exp 0, not -inf (flash-attn's Triton backend: the early "
               "exit of a block with no visible key stores an LSE of 0)")
    value: ClassVar[float] = 0.0


class CausalAlibiLseShift(Deviation):
    name = "causal-alibi-lse-shift"
    summary = ("under causal with ALiBi and no left window the kernel adds +slope * j to the scores instead of "
               "-slope * |i + n_k - n_q - j| (FlashAttention's alibi.h): each row's scores move by "
               "slope * (i + n_k - n_q), the output is unchanged in exact arithmetic but the scores round at "
               "slope * n_k, and the log-sum-exp is shifted by slope * (i + n_k - n_q)")

    @staticmethod
    def _applies(keywords: dict) -> bool:
        window = keywords.get("window_size")
        return (bool(keywords.get("causal")) and keywords.get("alibi_slopes") is not None
                and (window is None or window[0] < 0))

    def _shift(self, result, q, k, v, keywords) -> np.ndarray:
        shape = check_shapes(q, k, v, finite=False)
        offset = alignment_offset(shape, keywords.get("causal_alignment", "top_left"))
        slopes = np.broadcast_to(np.asarray(keywords["alibi_slopes"], dtype=np.float64), (shape.batch, shape.heads))
        rows = np.arange(shape.n_q) + offset
        return slopes[:, :, None] * rows[None, None, :]

    def transform(self, result, q, k, v, keywords):
        if not self._applies(keywords):
            return result
        shift = self._shift(result, q, k, v, keywords).astype(result.lse.dtype)
        return dataclasses.replace(result, lse=np.where(np.isfinite(result.lse), result.lse + shift, result.lse))

    def extra_allowance(self, call: Call) -> dict[str, np.ndarray]:
        """The scores round at slope * n_k instead of at their own size (in float32 inside a half-precision
        kernel): first order, a score error of u slope n_k moves the output by 2 u slope n_k times the spread of the
        values (specs.tolerance.model), and the log-sum-exp by u slope n_k."""
        keywords = call.oracle_keywords()
        if not self._applies(keywords):
            return {}
        result = call.oracle
        slopes = np.abs(np.broadcast_to(np.asarray(keywords["alibi_slopes"], dtype=np.float64),
                                        result.out.shape[:2]))
        u = unit_roundoff(np.float64 if call.dtype == "float64" else np.float32)
        v_all = np.repeat(call.v, call.group, axis=1) if call.group > 1 else call.v
        second = result.weights @ (v_all * v_all)
        spread = np.sqrt(np.maximum(second - result.out ** 2, 0.0))
        score_error = u * slopes * call.k.shape[2]
        return {"out": SAFETY * 2 * score_error[:, :, None, None] * spread,
                "lse": np.broadcast_to(SAFETY * score_error[:, :, None], result.lse.shape)}


LSE_DEVIATIONS = (KeylessLseFinite, KeylessLsePlusInf, KeylessLseZero, CausalAlibiLseShift)
