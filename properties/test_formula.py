"""The formula itself: Attention(Q,K,V) = softmax(QK^T / sqrt(d_k)) V, its inputs and its worked examples.

Seed 000 § 注意力机制的Q、K、V, § 具体过程, § Fused Attention; seed 001 § 1.1,
§ 1.3 (2), the multi-head pseudo-code's `assert k_len == v_len` and the 四不像 example;
seed 003 § 第一个概念 (我爱你) and § 2- qk点乘 (x1 against x2, x3, x4).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.observe import observe_weights
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, check_against_oracle, problems_for
from properties.formula_checks import expect_distribution, expect_own_key_ignored, expect_rejected, mismatched_values
from specs import examples
from specs.catalogue import load_claims
from specs.derivations import self_attention_of_queries, values_of
from specs.problems import Problem, build
from specs.reference import attention
from specs.tolerance import row_sum_allowance
from specs.validation import AttentionInputError

seeds = st.integers(0, 2**32 - 1)


@checks("sdpa-formula")
@given(data=st.data())
def test_output_matches_oracle(variant, data):
    check_against_oracle(variant, data.draw(problems_for(variant), label="problem"))


@checks("cross-and-self-same-computation")
@pytest.mark.requires("cross")
@given(data=st.data())
def test_cross_attention_matches_oracle(variant, data):
    check_against_oracle(variant, data.draw(problems_for(variant, different_lengths=True), label="problem"))


@checks("cross-and-self-same-computation")
@given(data=st.data())
def test_self_attention_on_one_sequence(variant, data):
    """Q = K = V = X: self-attention is the same call with one sequence in all three places."""
    problem = data.draw(problems_for(variant), label="problem")
    check_against_oracle(variant, problem.derive(self_attention_of_queries))


@checks("output-shape-follows-query")
@given(data=st.data())
def test_output_has_one_row_per_query(variant, data):
    """Shape (batch, heads, n_q, d_v): the query's own shape whenever the strategy draws d_v = d."""
    problem = data.draw(problems_for(variant), label="problem")
    check_output_has_one_row_per_query(variant, problem)


@reproducible
def check_output_has_one_row_per_query(variant, problem) -> None:
    """The check of test_output_has_one_row_per_query on one problem."""
    trial = Trial(variant, problem)
    b, h, n_q, _ = problem.q.shape
    trial.check_output(trial.call_raw(), problem, expect_shape=(b, h, n_q, problem.v.shape[-1]))


def expect_weight_rows_sum_to_one(trial: Trial) -> None:
    """Read through one-hot values where they fit (the output is then the n_q x n_k weight matrix), otherwise
    through values all ones (softmax(S) 1 = 1)."""
    problem = trial.problem
    if trial.variant.capabilities.value_dim or problem.q.shape[-1] >= problem.n_k:
        observed = observe_weights(trial)
        sums = observed.weights.sum(axis=-1, keepdims=True)
        trial.expect_close(sums, np.ones_like(sums), row_sum_allowance(observed.allowance, observed.weights),
                           what=f"row sums of the {problem.n_q}x{problem.n_k} weights", versus="1",
                           problem=observed.problem)
        return
    ones = problem.derive(values_of, "ones")
    _, allowance = trial.oracle(ones)
    out = trial.call(ones)
    trial.expect_close(out, np.ones_like(out), allowance, what="row sums of the weights (out with values all ones)",
                       versus="1", problem=ones)


def expect_worked_example(variant, problem: Problem) -> None:
    """The example's output, one row per query and d_v columns, equals the oracle; its weight rows sum to 1.
    (tests/unit/test_weak_checks.py checks that the example has the sizes the seed states.)"""
    check_against_oracle(variant, problem)
    expect_weight_rows_sum_to_one(Trial(variant, problem))


@checks("worked-example-shapes")
@given(seed=seeds)
def test_seed000_worked_example(variant, seed):
    """5 tokens, Q, K, V 5x4: a 5x4 output equal to the oracle, and 5x5 weights whose rows sum to 1."""
    expect_worked_example(variant, examples.worked_example_000(seed))


@checks("worked-example-cross-shapes")
@pytest.mark.requires("cross")
@given(seed=seeds)
def test_seed001_three_queries_four_keys(variant, seed):
    """3 queries, 4 keys and values of dimension 2: a 3x2 output, and 3x4 weights whose rows sum to 1."""
    expect_worked_example(variant, examples.worked_example_001(seed))


@checks("woaini-self-attention-matrix")
@given(seed=seeds)
def test_seed003_woaini_three_by_three(variant, seed):
    """我, 爱, 你 against themselves: a 3x3 weight matrix whose rows sum to 1, and 3 output rows equal to the oracle."""
    expect_worked_example(variant, examples.woaini(seed))


@checks("query-compared-only-with-other-tokens")
@given(seed=seeds)
def test_first_token_is_compared_only_with_the_other_tokens(variant, seed):
    check_first_token_is_compared_only_with_the_other_tokens(variant, seed)


@reproducible
def check_first_token_is_compared_only_with_the_other_tokens(variant, seed) -> None:
    """The check of test_first_token_is_compared_only_with_the_other_tokens."""
    trial = Trial(variant, examples.four_tokens(seed))
    expect_own_key_ignored(trial, observe_weights(trial))


@checks("siwuxiang-weights-sum-to-one", subject="seed001-text")
def test_siwuxiang_weights_form_a_distribution():
    """The numbers as the seed's sentence states them (tests/unit/test_catalogue.py checks the quote is verbatim)."""
    expect_distribution(examples.similarities(load_claims()["siwuxiang-weights-sum-to-one"].original))


@checks("one-key-per-value")
@given(data=st.data())
def test_values_of_another_length_are_rejected(variant, data):
    """On the drawn problem, and on a fixed witness whose 64 keys fill whole blocks of any power-of-two
    size up to 64: an implementation that reads v block by block never reaches a 65th value."""
    problem = data.draw(problems_for(variant), label="problem")
    check_values_of_another_length_are_rejected(variant, problem)


@reproducible
def check_values_of_another_length_are_rejected(variant, problem) -> None:
    """The check of test_values_of_another_length_are_rejected on one problem."""
    trial = Trial(variant, problem)
    for mismatched in mismatched_values(problem) + mismatched_values(build(n_q=64, n_k=64, d=8, d_v=8)):
        expect_rejected(trial, mismatched)


@checks("one-key-per-value")
@given(n_k=st.integers(1, 9), seed=seeds)
def test_oracle_names_values_of_another_length(n_k, seed):
    for p in mismatched_values(build(n_q=2, n_k=n_k, d=3, d_v=2, seed=seed)):
        with pytest.raises(AttentionInputError, match=rf"k has n_k={n_k} keys but v has {p.v.shape[2]} values"):
            attention(p.q, p.k, p.v)


@checks("siwuxiang-query-result")
@pytest.mark.requires("cross")
@given(seed=seeds)
def test_siwuxiang_query_result(variant, seed):
    """Weights 1/3, 1/6, 1/4, 1/4, 0 give 1/3 deer + 1/6 cow + 1/4 sheep + 1/4 donkey + 0 frog."""
    check_siwuxiang_query_result(variant, seed)


@reproducible
def check_siwuxiang_query_result(variant, seed) -> None:
    """The check of test_siwuxiang_query_result."""
    d_v = 3 if variant.capabilities.value_dim else 2
    problem = examples.siwuxiang(seed, d_v)
    check_against_oracle(variant, problem)
    if variant.capabilities.value_dim:
        trial = Trial(variant, problem)
        frog = observe_weights(trial).weights[..., -1]
        if np.any(frog != 0):
            trial.fail(f"the frog's weight is {frog.ravel()[0]!r}, not 0, although its score is "
                       f"{examples.UNDERFLOW_GAP:g} below the others")
