"""The formula itself: Attention(Q,K,V) = softmax(QK^T / sqrt(d_k)) V and its worked examples.

Seed 000 § 注意力机制的Q、K、V, § 具体过程, § Fused Attention; seed 001 § 1.1,
§ 1.3 (2) and the 四不像 example.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.markers import checks
from harness.observe import observe_weights
from harness.trial import Trial, check_against_oracle, problems_for
from specs import examples
from specs.tolerance import row_sum_allowance

seeds = st.integers(0, 2**32 - 1)


@checks("sdpa-formula")
@given(data=st.data())
def test_output_matches_oracle(impl, data):
    check_against_oracle(impl, data.draw(problems_for(impl), label="problem"))


@checks("fused-equals-unfused")
@pytest.mark.requires("fused")
@given(data=st.data())
def test_fused_kernel_matches_unfused_sequence(impl, data):
    """The tolerance rule measures against the unfused sequence run in the same precision."""
    masked = data.draw(st.booleans(), label="masked") and impl.impl.capabilities.mask
    check_against_oracle(impl, data.draw(problems_for(impl, masked=masked), label="problem"))


@checks("cross-and-self-same-computation")
@pytest.mark.requires("cross")
@given(data=st.data())
def test_cross_attention_matches_oracle(impl, data):
    check_against_oracle(impl, data.draw(problems_for(impl, different_lengths=True), label="problem"))


@checks("cross-and-self-same-computation")
@given(data=st.data())
def test_self_attention_on_one_sequence(impl, data):
    """Q = K = V = X: self-attention is the same call with one sequence in all three places."""
    problem = data.draw(problems_for(impl), label="problem")
    check_against_oracle(impl, problem.derive("p = p.replace(k=p.q, v=p.q)", k=problem.q, v=problem.q))


@checks("output-shape-follows-query")
@given(data=st.data())
def test_output_has_one_row_per_query(impl, data):
    """Shape (batch, heads, n_q, d_v): the query's own shape whenever the strategy draws d_v = d."""
    problem = data.draw(problems_for(impl), label="problem")
    trial = Trial(impl, problem)
    b, h, n_q, _ = problem.q.shape
    trial.check_output(trial.call_raw(), problem, call=None, expect_shape=(b, h, n_q, problem.v.shape[-1]))


@checks("worked-example-shapes")
@given(seed=seeds)
def test_seed000_worked_example(impl, seed):
    problem = examples.worked_example_000(seed)
    assert problem.q.shape == problem.k.shape == problem.v.shape == (1, 1, 5, 4)
    check_against_oracle(impl, problem)


@checks("worked-example-cross-shapes")
@pytest.mark.requires("cross")
@given(seed=seeds)
def test_seed001_three_queries_four_keys(impl, seed):
    """3 queries, 4 keys and values of dimension 2: a 3x2 output, and 3x4 weights whose rows sum to 1."""
    problem = examples.worked_example_001(seed)
    check_against_oracle(impl, problem)
    if impl.impl.capabilities.value_dim:
        trial = Trial(impl, problem)
        observed = observe_weights(trial)
        sums = observed.weights.sum(axis=-1, keepdims=True)
        trial.expect_close(sums, np.ones_like(sums), row_sum_allowance(observed.allowance, observed.weights),
                           what="row sums of the 3x4 weights", versus="1", problem=observed.problem)


@checks("siwuxiang-weights-sum-to-one")
def test_siwuxiang_weights_form_a_distribution():
    assert all(w >= 0 for w in examples.SIWUXIANG_WEIGHTS)
    assert sum(examples.SIWUXIANG_WEIGHTS) == 1, f"1/3 + 1/6 + 1/4 + 1/4 + 0 = {sum(examples.SIWUXIANG_WEIGHTS)}"


@checks("siwuxiang-query-result")
@pytest.mark.requires("cross")
@given(seed=seeds)
def test_siwuxiang_query_result(impl, seed):
    """Weights 1/3, 1/6, 1/4, 1/4, 0 give 1/3 deer + 1/6 cow + 1/4 sheep + 1/4 donkey + 0 frog."""
    d_v = 3 if impl.impl.capabilities.value_dim else 2
    problem = examples.siwuxiang(seed, d_v)
    check_against_oracle(impl, problem)
    if impl.impl.capabilities.value_dim:
        trial = Trial(impl, problem)
        frog = observe_weights(trial).weights[..., -1]
        if np.any(frog != 0):
            trial.fail(f"the frog's weight is {frog.ravel()[0]!r}, not 0, although its score is "
                       f"{examples.UNDERFLOW_GAP:g} below the others")
