"""The heads' checks that tests reuse (seed 000 § 多头注意力机制, seed 001 § 1.3 and § 2.3): a kv head read by
exactly its group of query heads, a head computed as if alone, torch's MultiheadAttention as the concatenation of
the heads times W_O, and the seed's split and merge of feature blocks."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.assertions import assert_within
from harness.api.reproducible import reproducible
from harness.api.trial import Trial
from impls.seeds.seed_code.seed001_multihead import SEED_SPLIT_MERGE
from protocol.registry import Variant
from specs import examples
from specs.derivations import affinely_changed, heads_taken, projected, values_of
from specs.problems import Problem
from specs.reference import attention, merge_heads, multi_head_attention, split_heads
from specs.tolerance import Allowance, forward_allowance, product_allowance, value_shift_allowance

TORCH_MHA = "torch.nn.MultiheadAttention"


def _output_within(trial: Trial, problem: Problem) -> tuple[np.ndarray, Allowance]:
    """The output on `problem` and its allowance: the oracle's plus the rounding of the implementation's own
    weights (Trial.output_with_own_bound)."""
    out, allowance, own = trial.output_with_own_bound(problem)
    return out, allowance + own


@reproducible
def expect_kv_head_read_by_its_group(trial: Trial, g: int) -> None:
    """Move the values of kv head g by c = 10 (max|V| + 1): only its group's outputs move, by c x row sums."""
    problem = trial.problem
    heads, heads_kv = problem.q.shape[1], problem.k.shape[1]
    shift = 10.0 * (float(np.abs(problem.v).max()) + 1.0)
    changed = problem.derive(affinely_changed, "v", 1, g, g + 1, 1.0, shift)
    ones = problem.derive(values_of, "ones")
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


def one_head(problem: Problem, h: int) -> Problem:
    """Query head h alone, with the kv head it reads."""
    g = h // (problem.q.shape[1] // problem.k.shape[1])
    return problem.derive(heads_taken, h, g)


@reproducible
def expect_head_as_if_alone(trial: Trial, h: int) -> None:
    trial.expect_unchanged(one_head(trial.problem, h), expected_index=(slice(None), [h]),
                           what=f"out of query head {h} run alone", versus=f"head {h} of all heads")


def heads_torch():
    return pytest.importorskip("torch", reason="torch is not installed")


def torch_multihead(heads: int, head_dim: int, seed: int):
    """torch.nn.MultiheadAttention with identity input projections (so its heads are those of x itself)
    and a seeded W_O, in float64; returns the module and W_O as the (h d_v, d_model) matrix applied on the right."""
    torch = heads_torch()
    d_model = heads * head_dim
    module = torch.nn.MultiheadAttention(d_model, heads, bias=False, batch_first=True, dtype=torch.float64)
    w_o = np.random.default_rng(seed).standard_normal((d_model, d_model)) / np.sqrt(d_model)
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.eye(d_model, dtype=torch.float64).repeat(3, 1))
        module.out_proj.weight.copy_(torch.from_numpy(w_o.T))
    return module.eval(), w_o


def run_torch_multihead(module, x: np.ndarray) -> np.ndarray:
    torch = heads_torch()
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
    merged = merge(heads_torch().from_numpy(per_head), batch)
    assert tuple(merged.shape) == tuple(q.shape), (
        f"attention per head, merged, has shape {tuple(merged.shape)}, not the query's {tuple(q.shape)}")


@reproducible
def check_projection_pipeline(variant: Variant, problem: Problem) -> None:
    """test_projection_pipeline_with_implementation_as_core's check (seed 001 § multi-head: projections, heads,
    attention, concat, W_O): the pipeline with the implementation as its per-head core equals the pipeline around the
    float64 oracle, within the core's allowance carried through the concatenation and W_O."""
    heads, heads_kv = problem.q.shape[1], problem.k.shape[1]
    w_q, w_k, w_v, w_o = examples.projection_weights(problem)
    x_q, x_kv = merge_heads(problem.q), merge_heads(problem.k)
    through_weights = problem.derive(projected)
    trial = Trial(variant, problem)
    out = trial.call(through_weights)
    oracle, core_allowance = trial.oracle(through_weights)

    def core(result: np.ndarray):
        """A per-head core returning `result`, computed on `through_weights` (what the repro rebuilds), once the
        pipeline has handed it the same q, k, v."""
        def run(q, k, v):
            given = (through_weights.q, through_weights.k, through_weights.v)
            same = all(np.array_equal(a, b) for a, b in zip((q, k, v), given, strict=True))
            assert same, "multi_head_attention's per-head q, k, v differ from examples.project's"
            return result
        return run

    got = multi_head_attention(x_q, x_kv, w_q, w_k, w_v, w_o, heads=heads, heads_kv=heads_kv, core=core(out))
    expected = multi_head_attention(x_q, x_kv, w_q, w_k, w_v, w_o, heads=heads, heads_kv=heads_kv,
                                    core=core(oracle.out))
    allowance = product_allowance(core_allowance.carried(merge_heads, core_allowance.rule),
                                  merge_heads(out), w_o)
    trial.expect_close(got, expected, allowance, what="multi-head output", problem=through_weights)
