"""How a problem's sequences lie in a KV cache, drawn within an implementation's capabilities (paged or not, left
padding, cache_batch_idx): the plans the kv-cache face's properties and the CUDA decode kernels' share."""

from __future__ import annotations

from hypothesis import strategies as st

from specs.problems import Problem

PAGE_SIZES = (1, 16, 256)


@st.composite
def cache_plans(draw, variant, problem: Problem) -> dict:
    """How the problem's sequences lie in a cache: build_cache's keywords, drawn within the capabilities."""
    caps = variant.capabilities
    batch, n_k = problem.q.shape[0], problem.n_k
    n_new = draw(st.integers(0, min(n_k, 4)), label="n_new")
    lengths = draw(st.lists(st.integers(n_new, n_k), min_size=batch, max_size=batch), label="keys per sequence")
    paged = caps.block_table and draw(st.booleans(), label="paged")
    plan = dict(lengths_k=lengths, n_new=n_new, seed=problem.recipe.seed)
    if caps.cache_leftpad and draw(st.booleans(), label="left padding"):
        plan["leftpad"] = draw(st.lists(st.integers(0, 3), min_size=batch, max_size=batch), label="leftpad")
    if paged:
        plan["page_size"] = draw(st.sampled_from(PAGE_SIZES), label="page_size")
    elif caps.cache_batch_idx and draw(st.booleans(), label="cache_batch_idx"):
        plan["spare_rows"] = 2
    return plan
