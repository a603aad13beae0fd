"""Implementations that take block sizes: draw sizes past every boundary and compare with the oracle.

Shared by the tiling (seed 000 § Flash Attention) and paged (seed 001 § 2.4)
properties: both say the blocked computation equals the global one for any
block size.
"""

from __future__ import annotations

from hypothesis import strategies as st

from harness.api.trial import check_against_oracle, problems_for
from protocol.registry import Variant
from specs.strategies import block_sizes, tile_limit


def check_any_block_sizes(variant: Variant, data: st.DataObject, keywords: tuple[str, ...]) -> None:
    """Draw a size for each keyword (1, sizes dividing nothing, larger than n) and a problem reaching past them."""
    __tracebackhide__ = True
    caps = variant.capabilities
    smallest = caps.min_block_size if keywords == caps.tile_keywords else 1
    blocks = {keyword: data.draw(block_sizes(min_block=smallest), label=keyword) for keyword in keywords}
    causal = caps.causal and data.draw(st.booleans(), label="causal")
    masked = caps.mask and not causal and data.draw(st.booleans(), label="masked")
    problem = data.draw(problems_for(variant, causal=causal, masked=masked, max_n=tile_limit(blocks.values()),
                                     near=tuple(blocks.values())), label="problem")
    check_against_oracle(variant, problem, **blocks)
