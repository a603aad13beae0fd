"""Deviations of precision: every element of every call is explained, and judged by the tolerance model of the
precision the implementation really computes in (or of a naive formula that rounds where it rounds)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from specs.deviations.base import Deviation, DeviationError
from specs.dtypes import accumulator
from specs.gradients import attention_backward, sum_groups
from specs.reference import matmul, repeat_kv
from specs.score_mods import alignment_offset, modify_scores
from specs.tolerance import unit_roundoff
from specs.validation import check_shapes


class Float32Softmax(Deviation):
    name = "float32-softmax"
    summary = ("float64 inputs get a float32 softmax (an upcast meant for half precision, or x64 arithmetic that "
               "stops at the softmax): float64 results of float32 accuracy, weights that underflow to exactly 0 "
               "where float64's would not; judged by float32's tolerance model")

    def judging_dtype(self, dtype: str) -> str:
        return "float32" if dtype == "float64" else dtype


class Float32Result(Float32Softmax):
    name = "float32-result"
    summary = ("float64 inputs are computed in float32 and returned as float32: judged by float32's tolerance "
               "model, the float32 output taken for the float64 one")

    def output_dtypes(self, dtype: str) -> tuple[str, ...]:
        return ("float32",) if dtype == "float64" else (dtype,)


class ScoresRoundedBeforeSoftmax(Deviation):
    name = "scores-rounded-before-softmax"
    summary = ("in half precision q k^T is rounded to the dtype, then scaled by the scale as a float32 number (a "
               "tensor times a Python float) and rounded again, modified (the cap a float32 number too, each step "
               "rounded) before a float32 softmax, whose weights are rounded again before P V: judged against that "
               "formula's own error in the dtype (K x the naive error, as every implementation is); "
               "`max_subtracted` 'dtype': the row's maximum is first subtracted in the dtype, each difference rounded")
    parameters: ClassVar[dict[str, str]] = {
        "max_subtracted": "'softmax' (default): inside the float32 softmax; 'dtype': before it, in the dtype "
                          "(gpt-oss' overflow guard, then a softmax in the dtype)"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.max_subtracted = params.get("max_subtracted", "softmax")
        if self.max_subtracted not in ("softmax", "dtype"):
            raise DeviationError("scores-rounded-before-softmax: max_subtracted is 'softmax' or 'dtype', got "
                                 f"{self.max_subtracted!r}")

    def explains_everything(self, dtype: str) -> bool:
        return dtype in ("float16", "bfloat16")

    def transform(self, result, q, k, v, keywords):
        dtype = result.out.dtype
        if dtype.name not in ("float16", "bfloat16") or result.mods.sinks is not None:
            return result
        shape = check_shapes(q, k, v, finite=False)
        products = matmul(q.astype(dtype), repeat_kv(k.astype(dtype), shape.group).swapaxes(-1, -2)).astype(dtype)
        scores = (products.astype(np.float32) * np.float32(result.scale)).astype(dtype)  # the scale not rounded
        mods = result.mods
        if mods.softcap > 0:  # a tensor over a Python float, tanh, times it again: each in float32, then rounded
            cap = np.float32(mods.softcap)
            scores = (np.tanh((scores.astype(np.float32) / cap).astype(dtype).astype(np.float32)).astype(dtype)
                      .astype(np.float32) * cap).astype(dtype)
            mods = dataclasses.replace(mods, softcap=0.0)
        if mods.any:
            offset = alignment_offset(shape, keywords.get("causal_alignment", "top_left"))
            with np.errstate(invalid="ignore"):
                scores = modify_scores(scores, mods, shape, offset)
        if result.allowed is not None:
            scores = np.where(result.allowed, scores, dtype.type(-np.inf))
        if self.max_subtracted == "dtype":
            top = scores.max(axis=-1, keepdims=True)
            with np.errstate(invalid="ignore"):
                scores = (scores.astype(np.float32) - np.where(np.isfinite(top), top, dtype.type(0))).astype(dtype)
        inside = scores.astype(np.float32)
        top = inside.max(axis=-1, keepdims=True)
        e = np.exp(inside - np.where(np.isfinite(top), top, np.float32(0)))
        total = e.sum(axis=-1, keepdims=True, dtype=accumulator(np.dtype(np.float32)))
        weights = (e / np.where(total > 0, total, np.float32(1))).astype(dtype)
        v_all = repeat_kv(v.astype(dtype, copy=False), q.shape[1] // v.shape[1])
        return dataclasses.replace(result, weights=weights, out=matmul(weights, v_all).astype(dtype))




class GqaBackwardRoundsPerHead(Deviation):
    name = "gqa-backward-rounds-per-head"
    summary = ("with grouped kv heads the backward rounds each query head's dK and dV to the dtype before summing "
               "the group: dK and dV may err by a rounding of each head's part, u sum_h |dK_h|, beyond the "
               "tolerance model's (whose naive backward sums the group in float32)")

    def extra_allowance(self, call):
        if call.d_out is None or call.group == 1 or call.dtype not in ("float16", "bfloat16"):
            return {}
        keywords = call.oracle_keywords()
        k_all, v_all = (repeat_kv(x, call.group) for x in (call.k, call.v))
        _, d_k, d_v = attention_backward(call.q, k_all, v_all, call.d_out, **keywords)
        u = unit_roundoff(call.dtype)
        return {"dk": u * sum_groups(np.abs(d_k), call.k.shape[1]), "dv": u * sum_groups(np.abs(d_v), call.k.shape[1])}


PRECISION_DEVIATIONS = (Float32Softmax, Float32Result, ScoresRoundedBeforeSoftmax, GqaBackwardRoundsPerHead)
