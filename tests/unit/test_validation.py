"""Bad input to public functions gives an error naming the problem (never a deep NumPy crash)."""

from __future__ import annotations

import numpy as np
import pytest

from impls.numpy.numpy_paged import paged_attention
from impls.numpy.numpy_tiled import tiled_attention
from specs.problems import Recipe, build, one_hot_values
from specs.reference import attention, merge_heads, multi_head_attention, split_heads
from specs.validation import AttentionInputError

q, k, v = (np.zeros(shape) for shape in ((1, 2, 3, 4), (1, 1, 5, 4), (1, 1, 5, 6)))


@pytest.mark.parametrize("args, kwargs, message", [
    ((q[0], k, v), {}, "q must be 4-D (batch, heads, seq, dim); got 3-D"),
    ((q, k[..., :3], v), {}, "q has d=4 but k has d=3"),
    ((q, k, v[:, :, :4]), {}, "k has n_k=5 keys but v has 4 values"),
    ((np.zeros((1, 3, 3, 4)), np.zeros((1, 2, 5, 4)), np.zeros((1, 2, 5, 6))), {},
     "heads=3 (q.shape[1]) is not a multiple of heads_kv=2 (k.shape[1])"),
    ((q, np.zeros((1, 2, 5, 4)), v), {}, "k has 2 heads but v has 1"),
    ((np.zeros((2, 2, 3, 4)), k, v), {}, "batch sizes differ: q 2, k 1, v 1"),
    ((q, np.zeros((1, 1, 0, 4)), np.zeros((1, 1, 0, 6))), {}, "empty input: n_k = 0"),
    ((np.zeros((1, 2, 0, 4)), k, v), {}, "empty input: n_q = 0"),
    ((q.astype(int), k, v), {}, "q has dtype int64; expected a floating-point dtype"),
    ((q.tolist(), k, v), {}, "q must be a numpy array, got list"),
    ((np.full_like(q, np.nan), k, v), {}, "q contains a non-finite value nan at index (0, 0, 0, 0)"),
    ((q, k, v), {"mask": np.ones((3, 4), dtype=bool)}, "mask of shape (3, 4) does not broadcast"),
    ((q, k, v), {"mask": np.ones((3, 5))}, "mask must be boolean (True = may attend), got dtype float64"),
    ((q, k, v), {"scale": float("inf")}, "scale must be finite"),
    ((q, k, v), {"scale": "0.5"}, "scale must be a real number or None, got str"),
    ((q, k, v), {"causal": "yes"}, "causal must be a bool"),
    ((q, k, v), {"causal_alignment": "diagonal"}, "causal_alignment must be one of"),
])
def test_oracle_names_the_bad_argument(args, kwargs, message):
    with pytest.raises(AttentionInputError, match=None) as info:
        attention(*args, **kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize("fn", [tiled_attention, paged_attention])
def test_implementations_validate_too(fn):
    with pytest.raises(AttentionInputError, match="is not a multiple of heads_kv"):
        fn(np.zeros((1, 3, 3, 4)), np.zeros((1, 2, 5, 4)), np.zeros((1, 2, 5, 6)))


@pytest.mark.parametrize("keyword", ["block_rows", "block_cols"])
def test_tiled_block_sizes_must_be_positive(keyword):
    with pytest.raises(AttentionInputError, match=f"{keyword} must be a positive int, got 0"):
        tiled_attention(q, k, v, **{keyword: 0})


def test_page_size_must_be_positive():
    with pytest.raises(AttentionInputError, match="page_size must be a positive int, got -1"):
        paged_attention(q, k, v, page_size=-1)


def test_head_helpers_name_their_problem():
    with pytest.raises(AttentionInputError, match="features=10 do not split into 3 heads"):
        split_heads(np.zeros((1, 2, 10)), 3)
    with pytest.raises(AttentionInputError, match="merge_heads expects"):
        merge_heads(np.zeros((2, 3)))
    x = np.zeros((1, 4, 6))
    w = np.zeros((6, 6))
    with pytest.raises(AttentionInputError, match="w_k must have 6 rows, got shape"):
        multi_head_attention(x, x, w, np.zeros((5, 6)), w, w, heads=2)
    with pytest.raises(AttentionInputError, match="w_o must have heads\\*d_v = 6 rows"):
        multi_head_attention(x, x, w, w, w, np.zeros((4, 6)), heads=2)


def test_recipes_name_their_problem():
    with pytest.raises(AttentionInputError, match="recipe n_q must be a positive int, got 0"):
        Recipe(n_q=0)
    with pytest.raises(AttentionInputError, match="heads=3 is not a multiple of heads_kv=2"):
        Recipe(heads=3, heads_kv=2)
    with pytest.raises(AttentionInputError, match="unknown score_style 'loud'"):
        build(score_style="loud")
    with pytest.raises(AttentionInputError, match="either a causal flag or a mask"):
        build(causal=True, mask_layout="full")
    with pytest.raises(AttentionInputError, match="one-hot values need d_v >= n_k"):
        one_hot_values((1, 1, 5, 2), 3)
