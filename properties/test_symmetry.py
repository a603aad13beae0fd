"""Symmetries: permutations of queries, keys and heads; what position encodings break and keep.

Seed 000 § 具体过程 (置换不变性, 全连接的GNN, 位置编码), seed 001 § 2.2 (并行计算,
长距离依赖), seed 003 (RoPE).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from harness.assertions import assert_within
from harness.markers import checks
from harness.trial import Trial, problems_for
from specs.positional import rotary_embedding, sinusoidal_encoding
from specs.problems import build
from specs.tolerance import difference_allowance, forward_allowance, rope_score_allowance


def _permutation(data, n: int, label: str) -> np.ndarray:
    """A permutation drawn through its seed: it shrinks to seed 0 in one step, and the repro lists it."""
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label=label)).permutation(n)


@checks("permutation-equivariance")
@given(data=st.data())
def test_permuting_queries_permutes_outputs(variant, data):
    problem = data.draw(problems_for(variant), label="problem")
    perm = _permutation(data, problem.n_q, "query permutation")
    moved = problem.derive(f"p = p.replace(q=p.q[:, :, {perm.tolist()}])")
    Trial(variant, problem).expect_unchanged(moved, expected_index=(slice(None), slice(None), perm),
                                          what="out(q permuted)", versus="out with its rows permuted")


@checks("permutation-equivariance", "long-range-in-one-step")
@given(data=st.data())
def test_permuting_keys_with_values_changes_nothing(variant, data):
    problem = data.draw(problems_for(variant), label="problem")
    perm = _permutation(data, problem.n_k, "key permutation")
    moved = problem.derive(f"p = p.replace(k=p.k[:, :, {perm.tolist()}], v=p.v[:, :, {perm.tolist()}])")
    Trial(variant, problem).expect_unchanged(moved, what="out(k, v permuted together)", versus="out")


@checks("permutation-invariance-literal")
@given(data=st.data())
def test_shuffling_the_sequence_leaves_output_unchanged(variant, data):
    """The seed's sentence taken literally: self-attention on a shuffled X (two tokens swapped) gives
    the same output. It fails on every implementation, so Hypothesis always shrinks: small problems
    (n, d <= 16) keep that cheap, and a swap of two tokens is already a counterexample."""
    base = data.draw(problems_for(variant, min_n=2, max_n=16, max_d=16), label="problem")
    problem = base.derive("p = p.replace(k=p.q, v=p.q)")
    first = data.draw(st.integers(0, problem.n_q - 2), label="first swapped token")
    second = data.draw(st.integers(first + 1, problem.n_q - 1), label="second swapped token")
    perm = np.arange(problem.n_q)
    perm[[first, second]] = second, first
    shuffled = problem.derive(f"x = p.q[:, :, {perm.tolist()}]; p = p.replace(q=x, k=x, v=x)")
    Trial(variant, problem).expect_unchanged(shuffled, what="out(X shuffled)", versus="out(X) (\"得到的结果相同\")")


@checks("parallel-over-positions")
@pytest.mark.requires("cross")
@given(data=st.data())
def test_any_subset_of_queries_gives_the_same_rows(variant, data):
    problem = data.draw(problems_for(variant), label="problem")
    rows = np.array(sorted(data.draw(st.sets(st.integers(0, problem.n_q - 1), min_size=1), label="queries")))
    subset = problem.derive(f"p = p.replace(q=p.q[:, :, {rows.tolist()}])")
    Trial(variant, problem).expect_unchanged(subset, expected_index=(slice(None), slice(None), rows),
                                          what="out(subset of queries)", versus="the same rows of the full output")


@checks("positional-encoding-breaks-symmetry")
@given(n=st.integers(2, 40), d=st.integers(2, 32), seed=st.integers(0, 2**32 - 1))
def test_sinusoidal_encoding_breaks_equivariance(n, d, seed):
    """Without encodings, swapping two tokens swaps two output rows; with them it does not."""
    x = build(n_q=n, n_k=n, d=d, d_v=d, seed=seed).q[0, 0]
    pe = sinusoidal_encoding(n, d)
    perm = np.arange(n)
    perm[[0, 1]] = [1, 0]

    def self_attention(tokens):
        t = tokens[None, None]
        return forward_allowance(t, t, t, dtype="float64")

    plain, plain_allowance = self_attention(x)
    swapped, swapped_allowance = self_attention(x[perm])
    assert_within(swapped.out[0, 0], plain.out[0, 0][perm],
                  difference_allowance(swapped_allowance.take((0, 0)), plain_allowance.take((0, 0, perm))),
                  what="out(x with tokens 0, 1 swapped), no encoding", versus="out(x) with rows 0, 1 swapped")
    encoded, encoded_allowance = self_attention(x + pe)
    swapped_encoded, swapped_encoded_allowance = self_attention(x[perm] + pe)
    gap = np.abs(swapped_encoded.out[0, 0] - encoded.out[0, 0][perm])
    slack = difference_allowance(swapped_encoded_allowance.take((0, 0)), encoded_allowance.take((0, 0, perm))).bound
    assert np.any(gap > slack), "with sinusoidal encodings, swapping two tokens should change the output"


@checks("rope-relative-positions")
@given(d_half=st.integers(1, 32), m=st.integers(0, 4096), n=st.integers(0, 4096),
       shift=st.integers(-4096, 4096), seed=st.integers(0, 2**32 - 1))
def test_rope_scores_depend_on_offset_only(d_half, m, n, shift, seed):
    assume(m + shift >= 0 and n + shift >= 0)
    p = build(n_q=1, n_k=1, d=2 * d_half, seed=seed)
    q, k = p.q[0, 0], p.k[0, 0]
    score = (rotary_embedding(q, np.array([m])) @ rotary_embedding(k, np.array([n])).T).item()
    shifted = (rotary_embedding(q, np.array([m + shift])) @ rotary_embedding(k, np.array([n + shift])).T).item()
    top = max(m, n) + max(shift, 0)
    allowed = difference_allowance(rope_score_allowance(q, k, max(m, n)), rope_score_allowance(q, k, top))
    assert_within(np.asarray(shifted), np.asarray(score), allowed,
                  what=f"rotary score at positions ({m + shift}, {n + shift})", versus=f"the score at ({m}, {n})")
