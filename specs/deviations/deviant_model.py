"""The model of an implementation with documented deviations: the oracle's formula (specs.reference.attention), then
each deviation's change of its result, in the inputs' precision. In float64 it is what the deviations predict; run on
low-precision inputs it is the naive same-precision formula the tolerance model scales (specs.tolerance `model=`), so
an implementation is judged against its deviations by the rule that judges every implementation against the oracle.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from specs.deviations.base import Deviation
from specs.reference import AttentionResult, attention


class DeviantModel:
    """attention(q, k, v, **keywords) as computed with `deviations`: the oracle on the keywords they read, then each
    one's change of its result, in order; `tiles`: keywords of the call the oracle does not take but a deviation
    reads (the block size of a tiled implementation)."""

    def __init__(self, deviations: tuple[Deviation, ...], tiles: Mapping | None = None) -> None:
        self.deviations = tuple(d for d in deviations if type(d).transform is not Deviation.transform
                                or type(d).read_keywords is not Deviation.read_keywords)
        self.tiles = dict(tiles or {})

    def content_key(self) -> str:
        """What specs.memo keys this model's results by."""
        return " + ".join(deviation.describe() for deviation in self.deviations) + f" {sorted(self.tiles.items())}"

    def __call__(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, **keywords) -> AttentionResult:
        for deviation in self.deviations:
            keywords = deviation.read_keywords(keywords)
        result = attention(q, k, v, **keywords)
        for deviation in self.deviations:
            result = deviation.transform(result, q, k, v, {**keywords, **self.tiles})
        return result

    def __repr__(self) -> str:
        return f"DeviantModel({self.content_key() or 'the oracle'})"
