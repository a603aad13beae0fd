"""Symmetries: permutations of queries, keys and heads; what position encodings break and keep.

Seed 000 § 具体过程 (置换不变性, 全连接的GNN, 位置编码), seed 001 § 2.2 (并行计算,
长距离依赖), seed 003 (RoPE, 在经过了位置编码之后; the causal mask, 一个句子的token，它毕竟是有时序的).
The position properties run one fixed problem per implementation: 8 tokens of head dim 8 (one-hot values
fit 8 keys even where d_v must equal d), tokens stored in ORDER, positions shifted by ROPE_SHIFT.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from harness.api.assertions import assert_within
from harness.api.exhibits import exhibit, record_headroom
from harness.api.markers import checks
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, problems_for
from specs.constructions import rope_projected, rope_rotated, sinusoidally_encoded
from specs.derivations import one_hot_valued, positions_taken, self_attention_of_queries, with_keywords
from specs.positional import rotary_embedding, sinusoidal_encoding
from specs.problems import Problem, build
from specs.tolerance import (
    difference_allowance,
    forward_allowance,
    rope_score_allowance,
    rotated_inputs_allowance,
)


def _permutation(data, n: int, label: str) -> np.ndarray:
    """A permutation drawn through its seed: it shrinks to seed 0 in one step, and the repro lists it."""
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label=label)).permutation(n)


@checks("permutation-equivariance")
@given(data=st.data())
def test_permuting_queries_permutes_outputs(variant, data):
    problem = data.draw(problems_for(variant), label="problem")
    perm = _permutation(data, problem.n_q, "query permutation")
    moved = problem.derive(positions_taken, queries=perm.tolist())
    Trial(variant, problem).expect_unchanged(moved, expected_index=(slice(None), slice(None), perm),
                                          what="out(q permuted)", versus="out with its rows permuted")


@checks("permutation-equivariance", "long-range-in-one-step")
@given(data=st.data())
def test_permuting_keys_with_values_changes_nothing(variant, data):
    problem = data.draw(problems_for(variant), label="problem")
    perm = _permutation(data, problem.n_k, "key permutation")
    moved = problem.derive(positions_taken, keys=perm.tolist())
    Trial(variant, problem).expect_unchanged(moved, what="out(k, v permuted together)", versus="out")


@checks("permutation-invariance-literal")
@given(data=st.data())
def test_shuffling_the_sequence_leaves_output_unchanged(variant, data):
    """The seed's sentence taken literally: self-attention on a shuffled X (two tokens swapped) gives
    the same output. It fails on every implementation, so Hypothesis always shrinks: small problems
    (n, d <= 16) keep that cheap, and a swap of two tokens is already a counterexample."""
    base = data.draw(problems_for(variant, min_n=2, max_n=16, max_d=16), label="problem")
    problem = base.derive(self_attention_of_queries)
    first = data.draw(st.integers(0, problem.n_q - 2), label="first swapped token")
    second = data.draw(st.integers(first + 1, problem.n_q - 1), label="second swapped token")
    perm = np.arange(problem.n_q)
    perm[[first, second]] = second, first
    shuffled = problem.derive(positions_taken, queries=perm.tolist(), keys=perm.tolist())
    Trial(variant, problem).expect_unchanged(shuffled, what="out(X shuffled)", versus="out(X) (\"得到的结果相同\")")


@checks("parallel-over-positions")
@pytest.mark.requires("cross")
@given(data=st.data())
def test_any_subset_of_queries_gives_the_same_rows(variant, data):
    problem = data.draw(problems_for(variant), label="problem")
    rows = np.array(sorted(data.draw(st.sets(st.integers(0, problem.n_q - 1), min_size=1), label="queries")))
    subset = problem.derive(positions_taken, queries=rows.tolist())
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


TOKENS = 8
HEAD_DIM = 8
ORDER = [5, 2, 7, 0, 3, 6, 1, 4]  # tokens stored in this order: a permutation without fixed points
ROPE_SHIFT = 1000
POSITION_SEED = 60_000
POSITIONS = list(range(TOKENS))
SHIFTED_POSITIONS = list(range(ROPE_SHIFT, ROPE_SHIFT + TOKENS))


def _tokens(value_dim: bool, *, one_hot: bool) -> Problem:
    """8 tokens (q, k, v) of one head; one_hot: values e_j, so the output is the weight matrix (d_v = 8 where the
    implementation takes d_v != d, `value_dim`)."""
    d_v = TOKENS if one_hot and value_dim else HEAD_DIM
    problem = build(batch=1, heads=1, heads_kv=1, n_q=TOKENS, n_k=TOKENS, d=HEAD_DIM, d_v=d_v, seed=POSITION_SEED)
    return problem.derive(one_hot_valued, d_v) if one_hot else problem


def _stored_in_order(problem: Problem) -> Problem:
    return problem.derive(positions_taken, queries=ORDER, keys=ORDER)


def _rotated(problem: Problem, positions: list[int]) -> Problem:
    """RoPE applied as models apply it: to q and k (after the projections), at `positions`."""
    return problem.derive(rope_rotated, positions)


@reproducible
def expect_same_up_to_order(variant, base: Problem, moved: Problem, *, what: str, versus: str,
                            order: list[int] = ORDER) -> None:
    """out(moved) = out(base)[order]: moved holds base's tokens stored in `order`, rotated at positions that
    should give the same scores. Allowed: each output's allowance against its oracle, plus each oracle's distance
    from the exact rotated inputs' (rotated_inputs_allowance: float64 rotations and the cast to the dtype)."""
    trial = Trial(variant, base)
    index = (slice(None), slice(None), order)
    out, got = trial.call(base), trial.call(moved)
    sides = []
    for problem in (base, moved):
        _, allowance = trial.oracle(problem)
        rounding = rotated_inputs_allowance(problem.q, problem.k, problem.v, dtype=trial.dtype,
                                            max_position=TOKENS + ROPE_SHIFT, **trial.oracle_kwargs(problem))
        sides.append(allowance + rounding)
    bound = difference_allowance(sides[1], sides[0].take(index))
    ratio = trial.expect_close(got, out[index], bound, what=what, versus=versus, problem=moved)
    record_headroom("rope-relative", what, ratio, "Per implementation, RoPE applied to q and k after the projections: "
                    f"the largest change of the weights when every position moves by {ROPE_SHIFT} (tokens reordered), "
                    "relative to its allowance.")


@reproducible
def expect_order_visible(variant, base: Problem, moved: Problem, *, what: str) -> None:
    """A counterexample to permutation equivariance: out(moved) differs from out(base)[ORDER] somewhere by more
    than the two outputs' allowances, where moved stores base's tokens in ORDER."""
    trial = Trial(variant, base)
    index = (slice(None), slice(None), ORDER)
    out, got = trial.call(base), trial.call(moved)
    (_, allowance), (_, moved_allowance) = trial.oracle(base), trial.oracle(moved)
    gap = np.abs(got - out[index])
    slack = difference_allowance(moved_allowance, allowance.take(index)).bound
    exhibit("order-visible", "table", {"cells": {what: float(np.max(gap / np.maximum(slack, np.finfo(float).tiny)))}},
            caption=f"Per implementation, storing 8 tokens in the order {ORDER}: the largest change of the output "
                    "beyond mere reordering, relative to the allowance (above 1: the token order is visible).")
    if not np.any(gap > slack):
        trial.fail(f"{what}: storing the tokens in another order only reordered the outputs, so the order of the "
                   "tokens stayed invisible", moved,
                   details=(f"largest |out(tokens in order {ORDER}) - out[{ORDER}]| {gap.max():.3g}, within "
                            "the outputs' allowances everywhere",))


@checks("rope-relative-in-attention")
def test_rope_attention_depends_on_relative_positions_only(variant):
    """RoPE on q and k at positions 0..7, against the same tokens stored in ORDER at positions + ROPE_SHIFT
    (rotated by ROPE_SHIFT after their own position: R(p + t) = R(t) R(p)): the weight matrices (one-hot values)
    are the same, rows and columns following the tokens. A bias on where a key sits in the array, or any
    absolute position, shows here."""
    base = _rotated(_tokens(variant.capabilities.value_dim, one_hot=True), POSITIONS)
    moved = _rotated(_stored_in_order(base), [ROPE_SHIFT] * TOKENS)
    expect_same_up_to_order(variant, base, moved, what=f"weights(tokens in order {ORDER}, positions + {ROPE_SHIFT})",
                            versus="the weights at positions 0..7, rows and columns following the tokens")


def _projected_rope(tokens: Problem, positions: list[int]) -> Problem:
    """Seed 003's placement: RoPE on the embeddings x at `positions`, then seeded Gaussian W_Q, W_K."""
    return tokens.derive(rope_projected, positions, POSITION_SEED)


@checks("rope-relative-in-attention")
def test_rope_placements_pictured_on_the_oracle():
    """The float64 oracle's weights for the 8 tokens: RoPE on q, k after the projections gives the same matrix at
    positions 0..7 and + ROPE_SHIFT (within the two allowances and the rotations' rounding); seed 003's placement,
    before W_Q, W_K, gives another (shown, and required to differ, so the picture shows what the claims say)."""
    tokens = _tokens(True, one_hot=True)
    start, shifted = POSITIONS, SHIFTED_POSITIONS
    pairs = {"after": (_rotated(tokens, start), _rotated(tokens, shifted)),
             "before": (_projected_rope(tokens, start), _projected_rope(tokens, shifted))}
    weights, gaps, slacks = {}, {}, {}
    for placement, problems in pairs.items():
        results = [forward_allowance(p.q, p.k, p.v, dtype="float64") for p in problems]
        rounding = [rotated_inputs_allowance(p.q, p.k, p.v, dtype="float64", max_position=TOKENS + ROPE_SHIFT)
                    for p in problems]
        for (result, _), label in zip(results, ("positions 0..7", f"positions + {ROPE_SHIFT}"), strict=True):
            weights[f"RoPE {placement} W_Q, W_K: {label}"] = result.out[0, 0]
        gaps[placement] = np.abs(results[1][0].out - results[0][0].out)
        slacks[placement] = difference_allowance(results[1][1] + rounding[1], results[0][1] + rounding[0]).bound
    assert np.all(gaps["after"] <= slacks["after"]), "RoPE after the projections moved the weights"
    assert np.any(gaps["before"] > slacks["before"]), "no contrast: RoPE before the projections left the weights"
    exhibit("rope-placement", "heatmaps", {"panels": weights},
            caption=f"Weights of 8 tokens (float64 oracle): RoPE on q, k after the projections gives the same matrix "
                    f"when every position moves by {ROPE_SHIFT}; on the embeddings before W_Q, W_K (seed 003's "
                    "placement) it does not.")


@checks("rope-before-projections")
def test_rope_on_embeddings_before_projections_depends_on_absolute_positions(variant):
    """Seed 003's placement: RoPE rotates the embeddings x, then W_Q, W_K (seeded Gaussian, which do not commute
    with the rotations) make q, k. If the scores depended on m - n only, shifting every position by ROPE_SHIFT
    would leave the weights unchanged; it changes them."""
    tokens = _tokens(variant.capabilities.value_dim, one_hot=True)
    base, moved = (_projected_rope(tokens, positions)
                   for positions in (POSITIONS, SHIFTED_POSITIONS))
    expect_same_up_to_order(variant, base, moved, order=list(range(TOKENS)),
                            what=f"weights(positions + {ROPE_SHIFT}, RoPE on the embeddings before W_Q, W_K)",
                            versus="the weights at positions 0..7")


@checks("positional-encoding-breaks-symmetry")
def test_rope_makes_token_order_visible(variant):
    """RoPE at positions 0..7 on the tokens, and on the same tokens stored in ORDER (same positions 0..7)."""
    tokens = _tokens(variant.capabilities.value_dim, one_hot=False)
    base, moved = (_rotated(p, POSITIONS) for p in (tokens, _stored_in_order(tokens)))
    expect_order_visible(variant, base, moved, what="RoPE")


@checks("positional-encoding-breaks-symmetry")
def test_sinusoidal_encoding_makes_token_order_visible(variant):
    """Self-attention on x + PE (sinusoidal, seed 000's 位置编码) for tokens x and for x stored in ORDER."""
    tokens = _tokens(variant.capabilities.value_dim, one_hot=False)
    base, moved = (p.derive(sinusoidally_encoded) for p in (tokens, _stored_in_order(tokens)))
    expect_order_visible(variant, base, moved, what="sinusoidal encoding")


@checks("causal-mask-breaks-equivariance")
@pytest.mark.requires("causal")
def test_causal_mask_makes_token_order_visible(variant):
    """A causal mask on the tokens, and on the same tokens stored in ORDER."""
    tokens = _tokens(variant.capabilities.value_dim, one_hot=False)
    base, moved = (p.derive(with_keywords, causal=True) for p in (tokens, _stored_in_order(tokens)))
    expect_order_visible(variant, base, moved, what="causal mask")
