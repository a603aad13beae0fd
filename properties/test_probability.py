"""Attention weights as probability distributions and the output as their weighted sum.

Seed 001 § 1.1 (归一化之后...都是一个离散的概率分布), seed 003 § 第一个概念 ([0,1]区间),
seed 000 § 值 / § 具体过程 (加权和), § 键 (相关性), § 具体过程 (全连接的GNN).
Weights are read off every implementation the same way: one-hot values make
the output equal to the weights (harness.api.observe).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.observe import observe_weights
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, problems_for
from specs.constructions import queries_seek_keys
from specs.derivations import values_of, with_arrays
from specs.problems import Problem, build
from specs.tolerance import exponent_range, product_allowance, row_sum_allowance


@checks("rows-sum-to-one", "weights-in-unit-interval")
@given(data=st.data())
def test_observed_weights_are_distributions(variant, data):
    problem = data.draw(problems_for(variant, weights_visible=True), label="problem")
    check_observed_weights_are_distributions(variant, problem)


@reproducible
def check_observed_weights_are_distributions(variant, problem) -> None:
    """The check of test_observed_weights_are_distributions on one problem."""
    trial = Trial(variant, problem)
    observed = observe_weights(trial)
    weights, allowance = observed.weights, observed.allowance
    trial.expect_close(np.clip(weights, 0.0, 1.0), weights, allowance, what="weights",
                       versus="the interval [0, 1]", problem=observed.problem, claim="weights-in-unit-interval")
    sums = weights.sum(axis=-1, keepdims=True)
    trial.expect_close(sums, np.ones_like(sums), row_sum_allowance(allowance, weights),
                       what="row sums of the weights", versus="1", problem=observed.problem, claim="rows-sum-to-one")


@checks("rows-sum-to-one")
@given(data=st.data())
def test_values_all_ones_give_outputs_all_ones(variant, data):
    """softmax(S) 1 = 1: visible to implementations whatever d_v they accept."""
    problem = data.draw(problems_for(variant), label="problem")
    check_values_all_ones_give_outputs_all_ones(variant, problem)


@reproducible
def check_values_all_ones_give_outputs_all_ones(variant, problem) -> None:
    """The check of test_values_all_ones_give_outputs_all_ones on one problem."""
    ones = problem.derive(values_of, "ones")
    trial = Trial(variant, ones)
    _, allowance = trial.oracle()
    out = trial.call()
    trial.expect_close(out, np.ones_like(out), allowance, versus="1 (values all ones)")


@checks("output-in-convex-hull")
@given(data=st.data())
def test_output_lies_in_convex_hull_of_values(variant, data):
    problem = data.draw(problems_for(variant), label="problem")
    check_output_lies_in_convex_hull_of_values(variant, problem)


@reproducible
def check_output_lies_in_convex_hull_of_values(variant, problem) -> None:
    """The check of test_output_lies_in_convex_hull_of_values on one problem."""
    trial = Trial(variant, problem)
    _, allowance = trial.oracle()
    out = trial.call()
    values = trial.values_per_query_head()
    lowest, highest = values.min(axis=-2, keepdims=True), values.max(axis=-2, keepdims=True)
    trial.expect_close(np.clip(out, lowest, highest), out, allowance,
                       what="out", versus="the per-coordinate range [min_j v_j, max_j v_j]")


@checks("output-is-weighted-sum-of-values")
@given(data=st.data())
def test_output_equals_observed_weights_times_values(variant, data):
    problem = data.draw(problems_for(variant, weights_visible=True), label="problem")
    check_output_equals_observed_weights_times_values(variant, problem)


@reproducible
def check_output_equals_observed_weights_times_values(variant, problem) -> None:
    """The check of test_output_equals_observed_weights_times_values on one problem."""
    trial = Trial(variant, problem)
    observed = observe_weights(trial)
    _, out_allowance = trial.oracle()
    values = trial.values_per_query_head()
    expected = observed.weights @ values
    allowance = out_allowance + product_allowance(observed.allowance, observed.weights, values)
    trial.expect_close(trial.call(), expected, allowance, versus="W @ V with W read off one-hot values")


@checks("weights-measure-relevance")
@given(data=st.data())
def test_weights_are_monotone_in_scores(variant, data):
    """Sorted by the oracle's scores, each row's weights never decrease (beyond the allowance)."""
    problem = data.draw(problems_for(variant, weights_visible=True), label="problem")
    check_weights_are_monotone_in_scores(variant, problem)


@reproducible
def check_weights_are_monotone_in_scores(variant, problem) -> None:
    """The check of test_weights_are_monotone_in_scores on one problem."""
    trial = Trial(variant, problem)
    observed = observe_weights(trial)
    order = np.argsort(observed.oracle.scores, axis=-1, kind="stable")
    weights = np.take_along_axis(observed.weights, order, axis=-1)
    bound = np.take_along_axis(observed.allowance.bound, order, axis=-1)
    drop = weights[..., :-1] - weights[..., 1:]
    slack = bound[..., :-1] + bound[..., 1:]
    if np.any(drop > slack):
        where = np.unravel_index(int(np.argmax(drop - slack)), drop.shape)
        after = (*where[:-1], where[-1] + 1)
        trial.fail("a key with a higher score got a smaller weight", observed.problem,
                   details=(f"row {where[:-1]}: weights {weights[where]!r} then {weights[after]!r} in order of "
                            f"increasing score; allowed drop {slack[where]:.3g}",))


def _expect_every_key_weighted(trial: Trial, problem) -> None:
    observed = observe_weights(trial, problem)
    if np.any(observed.weights <= 0):
        where = np.unravel_index(int(np.argmin(observed.weights)), observed.weights.shape)
        trial.fail("a key got no weight although no mask hides it and exp cannot underflow here",
                   observed.problem, details=(f"weights{where} = {observed.weights[where]!r}",))


def far_from_zero(n: int = 3) -> Problem:
    """A fixed witness the draws may miss: identical tokens of 30s, every score ~1559 and the spread 0.
    Positivity depends on the spread only, so every weight is 1/n; e^S alone would overflow."""
    thirties = np.full((1, 1, n, n), 30.0).tolist()
    return build(n_q=n, n_k=n, d=n, d_v=n).derive(with_arrays, q=thirties, k=thirties)


def queries_far_apart() -> Problem:
    """A fixed witness for the normalising axis: two identical keys and two opposite queries. Each row's
    scores are equal (spread 0: both weights 1/2), while each key's scores over the queries span
    2 * 30^2 / sqrt(2) ~ 1273, so a softmax over queries instead of keys underflows one weight to 0."""
    return build(n_q=2, n_k=2, d=2, d_v=2).derive(with_arrays, q=[[[[30.0, 0.0], [-30.0, 0.0]]]],
                                                   k=[[[[30.0, 0.0], [30.0, 0.0]]]])


@checks("complete-graph-positive-weights")
@given(data=st.data())
def test_every_key_gets_positive_weight(variant, data):
    problem = data.draw(problems_for(variant, weights_visible=True, score_styles=("normal", "integers", "spiky")),
                        label="problem")
    check_every_key_gets_positive_weight(variant, problem)


@reproducible
def check_every_key_gets_positive_weight(variant, problem) -> None:
    """The check of test_every_key_gets_positive_weight on one problem."""
    trial = Trial(variant, problem)
    scores = trial.oracle()[0].scores
    spread = float((scores.max(axis=-1) - scores.min(axis=-1)).max())
    limit = exponent_range(variant.dtype, problem.n_k)
    if spread > limit:
        problem = problem.scale_queries(limit / (2 * spread))
    _expect_every_key_weighted(trial, problem)
    _expect_every_key_weighted(trial, far_from_zero())
    _expect_every_key_weighted(trial, queries_far_apart())


@checks("score-large-when-query-seeks-key")
@given(data=st.data())
def test_query_pointing_at_key_weights_it_most(variant, data):
    """Keys of equal norm; query i = a * k_{j(i)}: k_{j(i)} has the top score and the top weight.
    Head dims up to 4 keep other keys close in direction to the target: the hard case for the claim."""
    problem = data.draw(problems_for(variant, weights_visible=True, score_styles=("normal",), scale=False, max_d=4),
                        label="problem")
    check_query_pointing_at_key_weights_it_most(variant, problem)


@reproducible
def check_query_pointing_at_key_weights_it_most(variant, problem) -> None:
    """The check of test_query_pointing_at_key_weights_it_most on one problem."""
    targets = np.arange(problem.n_q) % problem.n_k
    problem = problem.derive(queries_seek_keys, 5.0)  # score 5 on the target key: a * |k|^2 / sqrt(d) = 5
    trial = Trial(variant, problem)
    observed = observe_weights(trial)
    chosen = observed.weights[..., np.arange(problem.n_q), targets]
    bound = observed.allowance.bound
    others = observed.weights - bound
    others[..., np.arange(problem.n_q), targets] = -np.inf
    if np.any(chosen + bound[..., np.arange(problem.n_q), targets] < others.max(axis=-1)):
        trial.fail("the key a query points at is not its most weighted key", observed.problem)
