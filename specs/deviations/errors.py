"""Deviations of what a call does rather than what it returns: an error raised where the protocol expects an output
(OpInfo's ErrorInput: the error's type and a short pattern of its text), an input the protocol rejects accepted and
computed some documented way, a checker's report on a kernel, a measurement."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from specs.deviations.base import Call, Deviation, DeviationError, PatternDeviation
from specs.deviations.ring_steps import LAYOUT, WORLD_SIZE, ring_schedule

ACCEPTS_READS = {
    "values-past-the-keys-ignored": "v longer than k: the values past the last key are never read",
    "keys-past-the-end-read-as-zeros": "v longer than k: every value is attended, the keys past k's last read as "
                                       "zeros (a score of 0)",
    "keys-past-the-end-undefined": "v longer than k: every value is attended, the keys past k's last read from "
                                   "memory past k (the output undefined)",
    "length-one-keys-broadcast": "k (and its bias) of one key broadcast against v's (or the bias's) keys; against "
                                 "a bias of no key, the row has no key left (output 0)",
    "leading-bias-axes-broadcast": "a bias of rank above 4 read as leading batch axes: the output gains them "
                                   "(flax's `[batch..., heads, q, k]`), each of length 1 here",
    "one-key-weight-summed-over-values": "v longer than k of one key: that key's weight, 1, broadcast against every "
                                         "value, so the output is the values' sum",
}


class Rejects(PatternDeviation):
    name = "rejects"
    summary = "raises `raises` with a message matching `match` on inputs the protocol accepts"
    parameters: ClassVar[dict[str, str]] = {"raises": "the exception's type name",
                                            "match": "a regex of its message (under 200 characters)"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.raises = _exception_type(self.name, params.get("raises"))

    def explains_raise(self, call: Call, error: str) -> bool:
        kind, _, message = error.partition(": ")
        return kind == self.raises and self.pattern.search(message) is not None


def _exception_type(deviation: str, raises: object) -> str:
    """The declared `raises`, an exception's type name, or a DeviationError naming what it must be."""
    if not isinstance(raises, str) or not raises.isidentifier():
        raise DeviationError(f"{deviation}: `raises` names the exception's type (TypeError, ...), got {raises!r}")
    return raises


RANK_NAMED = re.compile(r"\(rank (\d+)\)$")  # how protocol.rank_pool names the rank whose error a call raises


class RaisesOnEmptyRingBlock(Deviation):
    name = "raises-on-empty-ring-block"
    summary = ("a kernel that refuses an empty input run once per block of ring-flash-attn's ring "
               "(specs.deviations.ring_steps): the stripe ring's steps after a rank's own take its rows but the "
               "first and the keys but the last, none where each rank holds one position, and the kernel raises "
               "`raises` on that rank (flash-attn's Triton forward asserts a bare AssertionError); a call none of "
               "whose blocks is empty is not this behaviour, whatever it raises")
    parameters: ClassVar[dict[str, str]] = {"raises": "the exception's type name"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.raises = _exception_type(self.name, params.get("raises"))

    def explains_raise(self, call: Call, error: str) -> bool:
        """`error` is of the declared type and comes from a rank (where the error names one) that has an empty
        block."""
        schedule = ring_schedule(call)
        if schedule is None or error.partition(": ")[0] != self.raises:
            return False
        empty = {rank for rank, (held, blocks) in enumerate(schedule)
                 if any(held[block.rows].size == 0 or block.keys.size == 0 for block in blocks)}
        named = RANK_NAMED.search(error.rstrip())
        return bool(empty) and (named is None or int(named.group(1)) in empty)


class BackwardFailsOnOneRank(Deviation):
    name = "backward-fails-on-one-rank"
    summary = ("ring-flash-attn's backward on a process group of one rank (a length no larger group splits evenly): "
               "its forward guards its sends, but the backward sends each step's dK, dV shares on unguarded, to its "
               "own rank, which gloo refuses (a RuntimeError); the zigzag backward of a causal call first halves the "
               "rank's shard, and a shard of one position has no second half (an IndexError); a forward, or a call "
               "on two ranks or more, is not this behaviour")

    def explains_raise(self, call: Call, error: str) -> bool:
        """A backward (the call carries its cotangent) of a sharded call on one rank, raising the error its first
        failing step raises."""
        if call.d_out is None or call.tiles.get(WORLD_SIZE) != 1:
            return False
        halved = call.tiles.get(LAYOUT) == "zigzag" and bool(call.keywords.get("causal")) and call.q.shape[2] < 2
        return error.partition(": ")[0] == ("IndexError" if halved else "RuntimeError")


class Accepts(Deviation):
    name = "accepts"
    summary = "takes an input the protocol says it must refuse, and computes from it as `reads` says"
    parameters: ClassVar[dict[str, str]] = {
        "reads": "how the accepted input is read: " + "; ".join(f"'{k}': {v}" for k, v in ACCEPTS_READS.items())}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.reads = params.get("reads")
        if self.reads not in ACCEPTS_READS:
            raise DeviationError(f"accepts: `reads` is one of {sorted(ACCEPTS_READS)}, got {self.reads!r}")

    def accepts(self, call: Call, accepted: str) -> Call | None:
        n_k, n_v = call.k.shape[2], call.v.shape[2]
        if self.reads == "values-past-the-keys-ignored":
            if n_v <= n_k:
                return None
            return dataclasses.replace(call, v=call.v[:, :, :n_k])
        if self.reads == "keys-past-the-end-undefined":
            return call if n_v > n_k else None
        if self.reads == "keys-past-the-end-read-as-zeros":
            if n_v <= n_k:
                return None
            zeros = np.zeros(call.k.shape[:2] + (n_v - n_k, call.k.shape[3]))
            return dataclasses.replace(call, k=np.concatenate([call.k, zeros], axis=2))
        bias = call.keywords.get("bias")
        if self.reads == "leading-bias-axes-broadcast":
            if bias is None or np.ndim(bias) <= 4 or any(n != 1 for n in np.shape(bias)[:-4]):
                return None
            return dataclasses.replace(call, keywords={**call.keywords, "bias": np.reshape(bias, np.shape(bias)[-4:])})
        if self.reads == "one-key-weight-summed-over-values":
            if n_k != 1 or n_v <= n_k:
                return None  # the sum is the mean of n_v equal-scored keys of n_v times the values
            return dataclasses.replace(call, k=np.repeat(call.k, n_v, axis=2), v=call.v * n_v)
        if n_k == 1 and bias is not None and np.shape(bias)[-1] == 0:
            keywords = {key: value for key, value in call.keywords.items() if key != "bias"}
            return dataclasses.replace(call, keywords={**keywords, "mask": np.zeros((1, 1, 1, 1), dtype=bool)})
        longest = max(n_k, n_v, 0 if bias is None else np.shape(bias)[-1])
        if n_k != 1 or longest == 1:
            return None
        k = np.repeat(call.k, longest, axis=2)
        v = call.v if n_v == longest else np.repeat(call.v, longest, axis=2)
        keywords = dict(call.keywords)
        if bias is not None and np.shape(bias)[-1] == 1:
            keywords["bias"] = np.repeat(bias, longest, axis=-1)
        return dataclasses.replace(call, k=k, v=v, keywords=keywords)

    def accepted_output(self, out: np.ndarray) -> np.ndarray:
        """The output as the reading makes it, in the protocol's shape: leading axes of length 1 a bias of higher
        rank added, dropped."""
        if self.reads == "leading-bias-axes-broadcast" and out.ndim > 4 and all(n == 1 for n in out.shape[:-4]):
            return out.reshape(out.shape[-4:])
        return out

    def output_undefined(self) -> bool:
        """Whether the accepted input's output is undefined (read from memory past an input)."""
        return self.reads == "keys-past-the-end-undefined"


class CheckerReports(PatternDeviation):
    name = "checker-reports"
    summary = "a kernel run under a checker (memcheck, racecheck, synccheck) draws the report `match` describes"
    parameters: ClassVar[dict[str, str]] = {"checker": "memcheck, racecheck or synccheck",
                                            "match": "a regex of the report (under 200 characters)"}
    CHECKERS = ("memcheck", "racecheck", "synccheck")

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.checker = params.get("checker")
        if self.checker not in self.CHECKERS:
            raise DeviationError(f"checker-reports: `checker` is one of {self.CHECKERS}, got {self.checker!r}")

    def explains_report(self, summary: str, observed: Mapping) -> bool:
        return observed.get("checker") == self.checker and self.pattern.search(summary) is not None


class KeepsScoreMatrix(Deviation):
    name = "keeps-score-matrix"
    summary = ("the n_q x n_k weights are kept resident (returned or stored), so a call's peak memory grows like "
               "the score matrix: at least a quarter of it, at most `copies` of it")
    parameters: ClassVar[dict[str, str]] = {"copies": "how many n_q x n_k matrices the growth may reach (default 4)"}

    def explains_report(self, summary: str, observed: Mapping) -> bool:
        if "resident_growth" not in observed:
            return False
        matrix = observed["score_matrix_bytes"]
        return matrix / 4 <= observed["resident_growth"] <= self.params.get("copies", 4) * matrix


ERROR_DEVIATIONS = (Rejects, RaisesOnEmptyRingBlock, BackwardFailsOnOneRank, Accepts, CheckerReports,
                    KeepsScoreMatrix)
