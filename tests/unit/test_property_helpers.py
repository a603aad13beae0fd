"""The small helpers properties share, on their own: an implementation's default block sizes are the integer
defaults of the keywords it names as tile keywords, and a kv-cache plan is drawn within the capabilities (a page
size only with a block table, left padding only where the cache takes it, lengths between the new keys and n_k)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from properties.block_sizes import default_block_sizes
from properties.kv_cache_plans import PAGE_SIZES, cache_plans
from protocol.registry import Capabilities
from specs.problems import build


def _tiled(q, k, v, *, block_rows: int = 64, block_cols=None, scale: float = 1.0):
    return q


def test_default_block_sizes_are_the_integer_defaults_of_the_tile_keywords():
    variant = SimpleNamespace(impl=SimpleNamespace(fn=_tiled),
                              capabilities=SimpleNamespace(tile_keywords=("block_rows", "block_cols", "absent")))
    assert default_block_sizes(variant) == {"block_rows": 64}


@given(data=st.data(), paged=st.booleans(), leftpad=st.booleans())
def test_a_cache_plan_stays_within_the_capabilities(data, paged, leftpad):
    caps = Capabilities(block_table=paged, cache_leftpad=leftpad)
    problem = build(batch=3, n_q=2, n_k=9, seed=4)
    plan = data.draw(cache_plans(SimpleNamespace(capabilities=caps), problem))
    assert len(plan["lengths_k"]) == 3 and all(plan["n_new"] <= n <= 9 for n in plan["lengths_k"])
    assert "page_size" not in plan or (paged and plan["page_size"] in PAGE_SIZES)
    assert "leftpad" not in plan or leftpad
    assert "spare_rows" not in plan or not paged
