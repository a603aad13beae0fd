"""A score modification the implementation takes as a keyword and never reads: its output is the oracle's for the
same call without that keyword (flash-attn's Triton backend accepts window_size and softcap and computes plain
attention). A model (Deviation.read_keywords): the rows the modification changes are explained, and must be what
attention without it gives, with every other deviation of the call (two keywords ignored: neither read); a row it
leaves alone is judged against the oracle as before."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from specs.deviations.base import Deviation, DeviationError
from specs.reference import attention

IGNORABLE = ("alibi_slopes", "bias", "sinks", "softcap", "window_size")


def _present(keyword: str, value: object) -> bool:
    """Whether the call asks for the modification (specs.score_mods: a cap <= 0 and a window of two unbounded sides
    are none)."""
    if value is None:
        return False
    if keyword == "softcap":
        return value > 0
    if keyword == "window_size":
        return any(side >= 0 for side in value)
    return True


class IgnoresKeyword(Deviation):
    name = "ignores-keyword"
    summary = ("a score modification taken as a keyword and never read: the output is attention without it (the "
               "keyword accepted, the call computed as if it were absent)")
    parameters: ClassVar[dict[str, str]] = {"keyword": f"the modification ignored, one of {IGNORABLE}"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.keyword = params.get("keyword")
        if self.keyword not in IGNORABLE:
            raise DeviationError(f"ignores-keyword: keyword is one of {IGNORABLE}, got {self.keyword!r}")

    def read_keywords(self, keywords):
        if not _present(self.keyword, keywords.get(self.keyword)):
            return keywords
        return {name: value for name, value in keywords.items() if name != self.keyword}

    def non_finite(self, call):
        """A NaN or Inf in a key or value the modification hides reaches the rows that see it once it is ignored."""
        keywords = call.oracle_keywords()
        if not call.poisoned or not _present(self.keyword, keywords.get(self.keyword)):
            return {}
        with np.errstate(all="ignore"):
            ignored = attention(call.q, call.k, call.v, finite=False, **self.read_keywords(keywords))
        reached = {"out": ~np.isfinite(ignored.out) & np.isfinite(call.oracle.out),
                   "lse": ~np.isfinite(ignored.lse) & np.isfinite(call.oracle.lse)}
        return {name: mask for name, mask in reached.items() if mask.any()}


IGNORED_DEVIATIONS = (IgnoresKeyword,)
