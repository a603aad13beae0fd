"""A score modification the implementation takes as a keyword and never reads: its output is the oracle's for the
same call without that keyword (flash-attn's Triton backend accepts window_size and softcap and computes plain
attention). A model (Deviation.transform): the rows the modification changes are explained, and must be what
attention without it gives; a row it leaves alone is judged against the oracle as before."""

from __future__ import annotations

import inspect
from typing import ClassVar

from specs.deviations.base import Deviation, DeviationError
from specs.reference import attention

IGNORABLE = ("alibi_slopes", "bias", "sinks", "softcap", "window_size")
_ORACLE_KEYWORDS = frozenset(inspect.signature(attention).parameters) - {"q", "k", "v"}


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

    def transform(self, result, q, k, v, keywords):
        if not _present(self.keyword, keywords.get(self.keyword)):
            return result
        kept = {name: value for name, value in keywords.items() if name in _ORACLE_KEYWORDS and name != self.keyword}
        return attention(q, k, v, **kept)


IGNORED_DEVIATIONS = (IgnoresKeyword,)
