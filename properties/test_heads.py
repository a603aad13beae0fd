"""Multi-head attention: independent heads, grouped kv heads, projections and concatenation.

Seed 000 § 多头注意力机制, seed 001 § 1.3, § 2.1 and § 2.3, seed 003 § 第三个概念 多头.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from harness.api.assertions import assert_within
from harness.api.markers import checks
from harness.api.trial import Trial, problems_for
from impls.seeds.seed_code.seed001_multihead import PSEUDO_CODE, SEED_SPLIT_MERGE
from specs import examples
from specs.problems import Problem
from specs.reference import attention, merge_heads, multi_head_attention, split_heads
from specs.strategies import head_dims, lengths
from specs.tolerance import Allowance, forward_allowance, product_allowance, value_shift_allowance

TORCH_MHA = "torch.nn.MultiheadAttention"
seeds = st.integers(0, 2**32 - 1)


@checks("multi-head-independent-subspaces")
@given(data=st.data())
def test_changing_one_head_changes_no_other(variant, data):
    problem = data.draw(problems_for(variant), label="problem")
    heads, heads_kv = problem.q.shape[1], problem.k.shape[1]
    assume(heads >= 2)
    trial = Trial(variant, problem)
    h = data.draw(st.integers(0, heads - 1), label="query head changed")
    changed = problem.derive(f"q = p.q.copy(); q[:, {h}] = -3 * q[:, {h}] + 1; p = p.replace(q=q)")
    others = (slice(None), np.flatnonzero(np.arange(heads) != h))
    trial.expect_unchanged(changed, got_index=others, expected_index=others,
                           what=f"out of heads other than {h} after changing query head {h}", versus="before")
    g = data.draw(st.integers(0, heads_kv - 1), label="kv head changed")
    readers = np.arange(heads) // (heads // heads_kv) == g
    assume(not readers.all())
    changed = problem.derive(f"k, v = p.k.copy(), p.v.copy(); k[:, {g}] = -3 * k[:, {g}] + 1; "
                             f"v[:, {g}] = -3 * v[:, {g}] + 1; p = p.replace(k=k, v=v)")
    others = (slice(None), np.flatnonzero(~readers))
    trial.expect_unchanged(changed, got_index=others, expected_index=others,
                           what=f"out of heads not reading kv head {g} after changing it", versus="before")


def _output_within(trial: Trial, problem: Problem) -> tuple[np.ndarray, Allowance]:
    """The output on `problem` and its allowance: the oracle's plus the rounding of the implementation's own
    weights (Trial.output_with_own_bound)."""
    out, allowance, own = trial.output_with_own_bound(problem)
    return out, allowance + own


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


def expect_kv_head_read_by_its_group(trial: Trial, g: int) -> None:
    """Move the values of kv head g by c = 10 (max|V| + 1): only its group's outputs move, by c x row sums."""
    problem = trial.problem
    heads, heads_kv = problem.q.shape[1], problem.k.shape[1]
    shift = 10.0 * (float(np.abs(problem.v).max()) + 1.0)
    changed = problem.derive(f"v = p.v.copy(); v[:, {g}] += {shift!r}; p = p.replace(v=v)")
    ones = problem.derive("p = p.replace(v=np.ones_like(p.v))")
    # each output with its allowance: the oracle's plus the rounding of the implementation's own weights
    (out_changed, changed_bound), (out, base_bound), (row_sums, sums_bound) = (
        _output_within(trial, p) for p in (changed, problem, ones))
    readers = np.arange(heads) // (heads // heads_kv) == g
    expected = np.where(readers[None, :, None, None], shift * row_sums, 0.0)
    allowance = value_shift_allowance(shift, changed_bound, base_bound, sums_bound,
                                      np.abs(out_changed) + np.abs(out) + np.abs(expected))
    trial.expect_close(out_changed - out, expected, allowance, problem=changed,
                       what=f"the change of out when the values of kv head {g} move by {shift:.4g}",
                       versus=f"{shift:.4g} x the row sums on query heads {np.flatnonzero(readers).tolist()}, 0 "
                              f"elsewhere (head h reads kv head h // {heads // heads_kv})")


@checks("gqa-shares-kv-heads")
@pytest.mark.requires("gqa")
@given(data=st.data())
def test_grouped_kv_heads_equal_repeated_kv_heads(variant, data):
    problem = data.draw(problems_for(variant), label="problem")
    group = problem.q.shape[1] // problem.k.shape[1]
    assume(group > 1)
    repeated = problem.derive(f"p = p.replace(k=np.repeat(p.k, {group}, axis=1), v=np.repeat(p.v, {group}, axis=1))")
    Trial(variant, problem).expect_unchanged(repeated, what="out with each kv head repeated for its query group",
                                          versus="out with grouped kv heads")


def one_head(problem: Problem, h: int) -> Problem:
    """Query head h alone, with the kv head it reads."""
    g = h // (problem.q.shape[1] // problem.k.shape[1])
    return problem.derive(f"p = p.replace(q=p.q[:, {h}:{h + 1}], k=p.k[:, {g}:{g + 1}], v=p.v[:, {g}:{g + 1}])")


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


def expect_head_as_if_alone(trial: Trial, h: int) -> None:
    trial.expect_unchanged(one_head(trial.problem, h), expected_index=(slice(None), [h]),
                           what=f"out of query head {h} run alone", versus=f"head {h} of all heads")


@checks("self-attention-four-steps", "concat-then-output-projection")
@given(data=st.data())
def test_projection_pipeline_with_implementation_as_core(variant, data):
    """x -> (x W_Q, x W_K, x W_V) -> heads -> attention -> concat -> W_O, with the implementation as the
    per-head core, against the same pipeline around the float64 oracle: the implementation's heads,
    concatenated in head order, give the oracle's multi-head output."""
    problem = data.draw(problems_for(variant, max_d=24), label="problem")
    heads, heads_kv = problem.q.shape[1], problem.k.shape[1]
    w_q, w_k, w_v, w_o = examples.projection_weights(problem)
    x_q, x_kv = merge_heads(problem.q), merge_heads(problem.k)
    projected = problem.derive("p = p.replace(**dict(zip('qkv', examples.project(p))))")
    trial = Trial(variant, problem)
    out = trial.call(projected)
    oracle, core_allowance = trial.oracle(projected)

    def core(result: np.ndarray):
        """A per-head core returning `result`, computed on `projected` (what the repro rebuilds), once the
        pipeline has handed it the same q, k, v."""
        def run(q, k, v):
            same = all(np.array_equal(a, b) for a, b in zip((q, k, v), (projected.q, projected.k, projected.v),
                                                            strict=True))
            assert same, "multi_head_attention's per-head q, k, v differ from examples.project's"
            return result
        return run

    got = multi_head_attention(x_q, x_kv, w_q, w_k, w_v, w_o, heads=heads, heads_kv=heads_kv, core=core(out))
    expected = multi_head_attention(x_q, x_kv, w_q, w_k, w_v, w_o, heads=heads, heads_kv=heads_kv,
                                    core=core(oracle.out))
    allowance = product_allowance(core_allowance.carried(merge_heads, core_allowance.rule),
                                  merge_heads(out), w_o)
    trial.expect_close(got, expected, allowance, what="multi-head output", problem=projected)


def _torch():
    return pytest.importorskip("torch", reason="torch is not installed")


def torch_multihead(heads: int, head_dim: int, seed: int):
    """torch.nn.MultiheadAttention with identity input projections (so its heads are those of x itself)
    and a seeded W_O, in float64; returns the module and W_O as the (h d_v, d_model) matrix applied on the right."""
    torch = _torch()
    d_model = heads * head_dim
    module = torch.nn.MultiheadAttention(d_model, heads, bias=False, batch_first=True, dtype=torch.float64)
    w_o = np.random.default_rng(seed).standard_normal((d_model, d_model)) / np.sqrt(d_model)
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.eye(d_model, dtype=torch.float64).repeat(3, 1))
        module.out_proj.weight.copy_(torch.from_numpy(w_o.T))
    return module.eval(), w_o


def run_torch_multihead(module, x: np.ndarray) -> np.ndarray:
    torch = _torch()
    with torch.no_grad():
        tokens = torch.from_numpy(x)
        return module(tokens, tokens, tokens, need_weights=False)[0].numpy()


def expect_concat_then_projection(out: np.ndarray, x: np.ndarray, heads: int, w_o: np.ndarray) -> None:
    """Seed 003 § 第三个概念 多头: out = concat(Z_1..Z_h) W_O, where Z_h is attention on head h's features
    of x (identity input projections) and the concatenation, h * d_v wide, is in head order."""
    per_head = split_heads(x, heads)
    oracle, allowance = forward_allowance(per_head, per_head, per_head, dtype="float64")
    concatenated = merge_heads(oracle.out)
    expected = concatenated @ w_o
    assert out.shape == expected.shape, f"the multi-head output has shape {out.shape}, not {expected.shape}"
    assert_within(out, expected, product_allowance(allowance.carried(merge_heads, allowance.rule),
                                                   concatenated, w_o),
                  what="the multi-head output", versus=f"concat(Z_1..Z_{heads}) W_O")


def expect_output_projection_reduces_to_one_head(out: np.ndarray, heads: int, head_dim: int) -> None:
    """Seed 003, literally: W_O takes the h * d_v concatenation back down to one head's width d_v."""
    assert out.shape[-1] == head_dim, (
        f"W_O maps the {heads * head_dim}-wide concatenation of {heads} heads to {out.shape[-1]} columns "
        f"(d_model), not back to one head's d_v = {head_dim}: with d_model = h * d_v it reduces nothing")


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


def seed_split_merge(num_head: int, head_dim: int) -> tuple:
    """The seed's multi_head_split and multi_head_merge, run as written with its globals num_head, head_dim."""
    namespace = {"num_head": num_head, "head_dim": head_dim}
    exec(compile(SEED_SPLIT_MERGE, "seed001_split_merge", "exec"), namespace)
    return namespace["multi_head_split"], namespace["multi_head_merge"]


def expect_split_merge(split, merge, q, k, v, num_head: int) -> None:
    """Seed 001 § 1.3: split cuts (batch, len, hdim) into num_head contiguous head_dim-wide feature blocks
    (batch, num_head, len, head_dim), merge restores the input bit for bit, and attention per head, merged,
    has the query's size (batch, q_len, hdim). q, k, v are torch tensors."""
    batch, length, hdim = q.shape
    head_dim = hdim // num_head
    heads = split(q)
    assert tuple(heads.shape) == (batch, num_head, length, head_dim), (
        f"multi_head_split gives shape {tuple(heads.shape)}, not (batch, num_head, len, head_dim) = "
        f"{(batch, num_head, length, head_dim)}")
    for h in range(num_head):
        assert np.array_equal(heads[:, h].numpy(), q[..., h * head_dim:(h + 1) * head_dim].numpy()), (
            f"head {h} of multi_head_split is not features {h * head_dim}..{(h + 1) * head_dim - 1}: the {hdim} "
            f"features are not cut into {num_head} disjoint {head_dim}-dim subspaces")
    assert np.array_equal(merge(heads, batch).numpy(), q.numpy()), "multi_head_merge(multi_head_split(q)) != q"
    per_head = attention(*(split(x).numpy() for x in (q, k, v))).out
    merged = merge(_torch().from_numpy(per_head), batch)
    assert tuple(merged.shape) == tuple(q.shape), (
        f"attention per head, merged, has shape {tuple(merged.shape)}, not the query's {tuple(q.shape)}")


@checks("multi-head-split-merge-roundtrip", subject="seed001-pseudocode")
@example(batch=2, q_len=3, k_len=4, num_head=8, head_dim=64, seed=0)  # the seed's sizes: 512 = 8 x 64
@given(batch=st.integers(1, 3), q_len=lengths(20), k_len=lengths(20), num_head=st.integers(1, 8),
       head_dim=head_dims(16), seed=seeds)
def test_seed_split_merge_cut_and_rejoin_feature_blocks(batch, q_len, k_len, num_head, head_dim, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (_torch().from_numpy(rng.standard_normal((batch, n, num_head * head_dim))) for n in (q_len, k_len, k_len))
    split, merge = seed_split_merge(num_head, head_dim)
    expect_split_merge(split, merge, q, k, v, num_head)


@checks("multi-head-pseudocode-as-written", subject="seed001-pseudocode")
def test_seed001_pseudocode_runs_as_written():
    namespace: dict = {}
    exec(compile(PSEUDO_CODE, "seed001_pseudocode", "exec"), namespace)
    assert "MultiHeadAttention" in namespace, "MultiHeadAttention is called but never defined"
