"""Multi-head attention: independent heads, grouped kv heads, projections and concatenation.

Seed 000 § 多头注意力机制, seed 001 § 1.3 and § 2.1, seed 003 § 第三个概念 多头.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from harness.markers import checks
from harness.trial import Trial, problems_for
from specs import examples
from specs.reference import attention, merge_heads, multi_head_attention, repeat_kv, split_heads
from specs.tolerance import Allowance, dot_product_allowance, product_allowance

PSEUDO_CODE = """\
q_len, k_len, v_len = 3, 4, 4
batch_size, hdim = 2, 512
head_dim = 64
assert hdim % head_dim = 0
assert k_len == v_len
num_head = hdim // head_dim
"""  # seed 001 § 1.3, the lines that run before `tensor(...)` (its sizes filled in)


@checks("multi-head-independent-subspaces")
@given(data=st.data())
def test_changing_one_head_changes_no_other(impl, data):
    problem = data.draw(problems_for(impl), label="problem")
    heads, heads_kv = problem.q.shape[1], problem.k.shape[1]
    assume(heads >= 2)
    trial = Trial(impl, problem)
    h = data.draw(st.integers(0, heads - 1), label="query head changed")
    q = problem.q.copy()
    q[:, h] = -3.0 * q[:, h] + 1.0
    changed = problem.derive(f"q = p.q.copy(); q[:, {h}] = -3 * q[:, {h}] + 1; p = p.replace(q=q)", q=q)
    others = (slice(None), np.flatnonzero(np.arange(heads) != h))
    trial.expect_unchanged(changed, got_index=others, expected_index=others,
                           what=f"out of heads other than {h} after changing query head {h}", versus="before")
    g = data.draw(st.integers(0, heads_kv - 1), label="kv head changed")
    readers = np.arange(heads) // (heads // heads_kv) == g
    assume(not readers.all())
    k, v = problem.k.copy(), problem.v.copy()
    k[:, g], v[:, g] = -3.0 * k[:, g] + 1.0, -3.0 * v[:, g] + 1.0
    changed = problem.derive(f"k, v = p.k.copy(), p.v.copy(); k[:, {g}] = -3 * k[:, {g}] + 1; "
                              f"v[:, {g}] = -3 * v[:, {g}] + 1; p = p.replace(k=k, v=v)", k=k, v=v)
    others = (slice(None), np.flatnonzero(~readers))
    trial.expect_unchanged(changed, got_index=others, expected_index=others,
                           what=f"out of heads not reading kv head {g} after changing it", versus="before")


@checks("gqa-shares-kv-heads")
@pytest.mark.requires("gqa")
@given(data=st.data())
def test_grouped_kv_heads_equal_repeated_kv_heads(impl, data):
    problem = data.draw(problems_for(impl), label="problem")
    group = problem.q.shape[1] // problem.k.shape[1]
    assume(group > 1)
    repeated = problem.derive(f"p = p.replace(k=np.repeat(p.k, {group}, axis=1), v=np.repeat(p.v, {group}, axis=1))",
                               k=repeat_kv(problem.k, group), v=repeat_kv(problem.v, group))
    Trial(impl, problem).expect_unchanged(repeated, what="out with each kv head repeated for its query group",
                                          versus="out with grouped kv heads")


@checks("self-attention-four-steps", "concat-then-output-projection")
@given(data=st.data())
def test_projection_pipeline_with_implementation_as_core(impl, data):
    """x -> (x W_Q, x W_K, x W_V) -> heads -> attention -> concat -> W_O, with the implementation as the
    per-head core, against the same pipeline around the float64 oracle."""
    problem = data.draw(problems_for(impl, max_d=24), label="problem")
    heads, heads_kv = problem.q.shape[1], problem.k.shape[1]
    w_q, w_k, w_v, w_o = examples.projection_weights(problem)
    x_q, x_kv = merge_heads(problem.q), merge_heads(problem.k)
    trial = Trial(impl, problem)
    seen: dict = {}

    def implementation_core(q, k, v):
        projected = problem.derive("p = p.replace(**dict(zip('qkv', examples.project(p))))", q=q, k=k, v=v)
        seen["problem"] = projected
        seen["out"] = trial.call(projected)
        seen["oracle"], seen["allowance"] = trial.oracle(projected)
        return seen["out"]

    got = multi_head_attention(x_q, x_kv, w_q, w_k, w_v, w_o, heads=heads, heads_kv=heads_kv,
                               core=implementation_core)
    expected = multi_head_attention(x_q, x_kv, w_q, w_k, w_v, w_o, heads=heads, heads_kv=heads_kv,
                                    core=lambda q, k, v: seen["oracle"].out)
    allowance = product_allowance(Allowance(merge_heads(seen["allowance"].bound), seen["allowance"].rule),
                                  merge_heads(seen["out"]), w_o)
    trial.expect_close(got, expected, allowance, what="multi-head output", problem=seen["problem"])
    d_v = seen["out"].shape[-1]
    per_head = sum(seen["out"][:, h] @ w_o[h * d_v:(h + 1) * d_v] for h in range(heads))
    concatenated = merge_heads(seen["out"])
    assert np.all(np.abs(per_head - got) <= 2 * dot_product_allowance(np.abs(concatenated), np.abs(w_o.T))), (
        "concat(Z_1..Z_h) W_O differs from sum_h Z_h W_O[rows of head h]")


@checks("multi-head-split-merge-roundtrip")
@given(batch=st.integers(1, 3), n=st.integers(1, 20), heads=st.integers(1, 8), head_dim=st.integers(1, 16),
       seed=st.integers(0, 2**32 - 1))
def test_split_then_merge_is_identity(batch, n, heads, head_dim, seed):
    x = np.random.default_rng(seed).standard_normal((batch, n, heads * head_dim))
    split = split_heads(x, heads)
    assert split.shape == (batch, heads, n, head_dim)
    assert np.array_equal(merge_heads(split), x)
    assert np.array_equal(split_heads(merge_heads(split), heads), split)


@checks("multi-head-split-merge-roundtrip")
def test_512_features_split_into_8_heads_of_64():
    """Seed 001's numbers: 512 = 8 x 64; per-head attention then merge keeps (batch, len, 512)."""
    x = np.random.default_rng(0).standard_normal((2, 10, 512))
    heads = split_heads(x, 8)
    assert heads.shape == (2, 8, 10, 64)
    out = merge_heads(attention(heads, heads, heads).out)
    assert out.shape == x.shape


@checks("multi-head-pseudocode-as-written", subject="seed001-pseudocode")
def test_seed001_pseudocode_runs_as_written():
    namespace: dict = {}
    exec(compile(PSEUDO_CODE, "seed001_pseudocode", "exec"), namespace)
    assert "MultiHeadAttention" in namespace, "MultiHeadAttention is called but never defined"
