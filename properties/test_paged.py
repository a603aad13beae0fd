"""Paged attention (seed 001 § 2.4): a KV cache in scattered pages equals the contiguous cache."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.blocked import check_any_block_sizes
from harness.api.markers import checks


@checks("paged-equals-contiguous")
@pytest.mark.requires("paged")
@given(data=st.data())
def test_paged_cache_equals_contiguous_cache(variant, data):
    check_any_block_sizes(variant, data, ("page_size",))
