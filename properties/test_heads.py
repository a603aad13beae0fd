"""Multi-head attention: independent heads, grouped kv heads, projections and concatenation.

Seed 000 § 多头注意力机制, seed 001 § 1.3, § 2.1 and § 2.3, seed 003 § 第三个概念 多头.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, problems_for
from impls.seeds.seed_code.seed001_multihead import PSEUDO_CODE
from properties.head_checks import (
    TORCH_MHA,
    check_projection_pipeline,
    expect_concat_then_projection,
    expect_head_as_if_alone,
    expect_kv_head_read_by_its_group,
    expect_output_projection_reduces_to_one_head,
    expect_split_merge,
    heads_torch,
    run_torch_multihead,
    seed_split_merge,
    torch_multihead,
)
from specs.derivations import affinely_changed, kv_heads_repeated
from specs.strategies import head_dims, lengths

seeds = st.integers(0, 2**32 - 1)


@checks("multi-head-independent-subspaces")
@given(data=st.data())
def test_changing_one_head_changes_no_other(variant, data):
    problem = data.draw(problems_for(variant), label="problem")
    heads, heads_kv = problem.q.shape[1], problem.k.shape[1]
    assume(heads >= 2)
    trial = Trial(variant, problem)
    h = data.draw(st.integers(0, heads - 1), label="query head changed")
    changed = problem.derive(affinely_changed, "q", 1, h, h + 1, -3.0, 1.0)
    others = (slice(None), np.flatnonzero(np.arange(heads) != h))
    trial.expect_unchanged(changed, got_index=others, expected_index=others,
                           what=f"out of heads other than {h} after changing query head {h}", versus="before")
    g = data.draw(st.integers(0, heads_kv - 1), label="kv head changed")
    readers = np.arange(heads) // (heads // heads_kv) == g
    assume(not readers.all())
    changed = problem.derive(affinely_changed, "kv", 1, g, g + 1, -3.0, 1.0)
    others = (slice(None), np.flatnonzero(~readers))
    trial.expect_unchanged(changed, got_index=others, expected_index=others,
                           what=f"out of heads not reading kv head {g} after changing it", versus="before")


@checks("gqa-shares-kv-heads")
@pytest.mark.requires("gqa")
@given(data=st.data())
def test_each_kv_head_is_read_by_exactly_its_group(variant, data):
    """Query head h reads kv head h // group: adding a constant c to every value of kv head g moves the outputs
    of its group's query heads by c times their weights' row sums (1; the implementation's own sums, read with
    values all ones, so a normalisation bug is blamed on rows-sum-to-one, not here) and no other head's,
    within specs.tolerance.value_shift_allowance (the three outputs' own allowances: a head reading a fifth of
    another kv head is caught in every dtype)."""
    problem = data.draw(problems_for(variant), label="problem")
    assume(problem.k.shape[1] >= 2)
    expect_kv_head_read_by_its_group(Trial(variant, problem),
                                     data.draw(st.integers(0, problem.k.shape[1] - 1), label="kv head changed"))


@checks("gqa-shares-kv-heads")
@pytest.mark.requires("gqa")
@given(data=st.data())
def test_grouped_kv_heads_equal_repeated_kv_heads(variant, data):
    problem = data.draw(problems_for(variant), label="problem")
    check_grouped_kv_heads_equal_repeated_kv_heads(variant, problem)


@reproducible
def check_grouped_kv_heads_equal_repeated_kv_heads(variant, problem) -> None:
    """The check of test_grouped_kv_heads_equal_repeated_kv_heads on one problem."""
    group = problem.q.shape[1] // problem.k.shape[1]
    assume(group > 1)
    repeated = problem.derive(kv_heads_repeated, group)
    Trial(variant, problem).expect_unchanged(repeated, what="out with each kv head repeated for its query group",
                                          versus="out with grouped kv heads")


@checks("heads-weight-positions-differently")
@given(data=st.data())
def test_each_head_weights_by_its_own_queries_and_keys(variant, data):
    """Seed 001 § 2.3 (在同一位置学会关注不同的信息, 每个头部独立进行自注意力计算): head h of a multi-head call
    equals head h run alone, so heads whose queries or keys differ weight the same position differently;
    an implementation that reuses one head's weights for the others fails it."""
    # scores stay inside exp's range (default scale, moderate styles): the claim is about structure, not magnitude
    styles = ("normal", "integers", "spiky")
    problem = data.draw(problems_for(variant, scale=False, score_styles=styles), label="problem")
    assume(problem.q.shape[1] >= 2)
    expect_head_as_if_alone(Trial(variant, problem), data.draw(st.integers(0, problem.q.shape[1] - 1), label="head"))


@checks("self-attention-four-steps", "concat-then-output-projection")
@given(data=st.data())
def test_projection_pipeline_with_implementation_as_core(variant, data):
    """x -> (x W_Q, x W_K, x W_V) -> heads -> attention -> concat -> W_O, with the implementation as the
    per-head core, against the same pipeline around the float64 oracle: the implementation's heads,
    concatenated in head order, give the oracle's multi-head output."""
    check_projection_pipeline(variant, data.draw(problems_for(variant, max_d=24), label="problem"))

@checks("concat-then-output-projection", subject=TORCH_MHA)
@given(heads=st.integers(1, 4), head_dim=head_dims(16), n=lengths(20), seed=seeds)
def test_torch_multihead_output_is_concatenation_times_w_o(heads, head_dim, n, seed):
    module, w_o = torch_multihead(heads, head_dim, seed)
    x = np.random.default_rng(seed).standard_normal((1, n, heads * head_dim))
    expect_concat_then_projection(run_torch_multihead(module, x), x, heads, w_o)


@checks("output-projection-reduces-to-one-head", subject=TORCH_MHA)
@given(heads=st.integers(2, 8), head_dim=head_dims(16), seed=seeds)
def test_output_projection_reduces_to_one_head(heads, head_dim, seed):
    """torch's module, like the Transformer (512 = 8 x 64), has d_model = h * d_v and a square W_O."""
    module, _ = torch_multihead(heads, head_dim, seed)
    x = np.random.default_rng(seed).standard_normal((1, 3, heads * head_dim))
    expect_output_projection_reduces_to_one_head(run_torch_multihead(module, x), heads, head_dim)


@checks("multi-head-split-merge-roundtrip", subject="seed001-pseudocode")
@example(batch=2, q_len=3, k_len=4, num_head=8, head_dim=64, seed=0)  # the seed's sizes: 512 = 8 x 64
@given(batch=st.integers(1, 3), q_len=lengths(20), k_len=lengths(20), num_head=st.integers(1, 8),
       head_dim=head_dims(16), seed=seeds)
def test_seed_split_merge_cut_and_rejoin_feature_blocks(batch, q_len, k_len, num_head, head_dim, seed):
    rng = np.random.default_rng(seed)
    torch = heads_torch()
    q, k, v = (torch.from_numpy(rng.standard_normal((batch, n, num_head * head_dim))) for n in (q_len, k_len, k_len))
    split, merge = seed_split_merge(num_head, head_dim)
    expect_split_merge(split, merge, q, k, v, num_head)


@checks("multi-head-pseudocode-as-written", subject="seed001-pseudocode")
def test_seed001_pseudocode_runs_as_written():
    namespace: dict = {}
    exec(compile(PSEUDO_CODE, "seed001_pseudocode", "exec"), namespace)
    assert "MultiHeadAttention" in namespace, "MultiHeadAttention is called but never defined"
