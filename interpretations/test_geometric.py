"""The geometric reading (seed 002 § 3.1.2; seed 000 § 向量化 and § 自注意力; seed 003 § 第一个概念).

The seeds' readings of the dot product (a cosine on unit vectors, a distance, X times its own transpose)
are checked on every implementation through its observed weights (harness.api.observe); seed 002's cosine
code is checked as written. The geometric reading in its correct form is checked on every implementation
too: cosine attention is the implementation on unit vectors with scale 1/tau, and translating the keys or
mapping the values affinely acts as geometry says (a fixed exact problem per implementation,
interpretations/exact_problems.py; the checks are interpretations/geometric_checks.py). Outputs lying in the
convex hull of the values is `output-in-convex-hull` (properties/test_probability.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from harness.api.assertions import assert_within
from harness.api.exhibits import record_headroom
from harness.api.markers import checks
from harness.api.observe import observe_weights
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, problems_for
from interpretations.geometric_checks import (
    check_cosine_attention,
    check_key_translation,
    check_value_affine_map,
    expect_cosine_weights,
    expect_dot_product_ranks_like_distance,
    expect_symmetric_scores,
    expect_weights_rank_by_distance,
    keys_of_many_lengths,
    orthogonal_move,
    self_attention,
    unit_queries_and_keys,
)
from specs.derivations import with_arrays
from specs.problems import Problem, build
from specs.strategies import head_dims, lengths
from specs.tolerance import (
    Allowance,
    difference_allowance,
    entropy_allowance,
    forward_allowance,
)

SUBJECT = "seed002-geometric"
seeds = st.integers(0, 2**32 - 1)
unbatched = st.builds(lambda n_q, n_k, d, d_v, seed, style: build(n_q=n_q, n_k=n_k, d=d, d_v=d_v, seed=seed,
                                                                    score_style=style),
                      lengths(64), lengths(64), head_dims(32), head_dims(8), seeds,
                      st.sampled_from(["normal", "integers", "large", "spiky"]))
# Scores stay inside exp's range (default scale, no "large"/"huge"/"mixed" styles): these properties read
# log-weights and weight ratios, which need weights that neither overflow nor vanish.
MODERATE = ("normal", "spiky", "tiny")


def _seed_code(q, k, v):
    torch = pytest.importorskip("torch", reason="the seed's interpretation code is written in torch")
    from impls.seeds.seed_code.seed002_readings import geometric_attention_interpretation

    out, weights = geometric_attention_interpretation(*(torch.from_numpy(x[0, 0]) for x in (q, k, v)))
    return out.numpy()[None, None], weights.numpy()[None, None]


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@checks("geometric-cosine-temperature", subject=SUBJECT)
@given(problem=unbatched, rescale=st.floats(1e-2, 1e2))
def test_cosine_attention_is_sdpa_on_unit_vectors_with_scale_10(problem, rescale):
    q, k, v = problem.q, problem.k, problem.v
    assume(np.all(np.linalg.norm(q, axis=-1) > 0) and np.all(np.linalg.norm(k, axis=-1) > 0))
    out, weights = _seed_code(q, k, v)
    oracle, allowance = forward_allowance(_unit(q), _unit(k), v, dtype="float64", scale=10.0)
    assert_within(out, oracle.out, allowance, what="cosine attention's out", versus="SDPA(q/|q|, k/|k|, scale=10)")
    _, weights_allowance = forward_allowance(_unit(q), _unit(k), np.eye(k.shape[2])[None, None], dtype="float64",
                                             scale=10.0)
    _, rescaled = _seed_code(q * rescale, k / rescale, v)
    assert_within(rescaled, weights, difference_allowance(weights_allowance, weights_allowance),
                  what=f"the cosine weight matrix of ({rescale!r} q, k / {rescale!r})", versus="that of (q, k)")


@checks("geometric-projection-literal", subject=SUBJECT)
@given(n_k=st.integers(1, 6), extra=st.integers(1, 6), seed=seeds)
def test_weights_depend_only_on_projection_onto_key_span(n_k, extra, seed):
    """The cosine code's weights against the seed's projection reading (dot-product attention satisfies it:
    tests/unit/test_weak_checks.py)."""
    p = build(n_q=3, n_k=n_k, d=n_k + extra, d_v=2, seed=seed)
    q, k, v = p.q, p.k, p.v
    moved = orthogonal_move(q, k, seed)
    _, allowance = forward_allowance(_unit(q), _unit(k), np.eye(n_k)[None, None], dtype="float64", scale=10.0)
    _, weights = _seed_code(q, k, v)
    _, weights_moved = _seed_code(moved, k, v)
    assert_within(weights_moved, weights, difference_allowance(allowance.largest(), allowance.largest()),
                  what="the cosine weight matrix of q + a component orthogonal to every key",
                  versus="that of q (the same projection onto the keys' span)")


@checks("softmax-temperature")
@given(scores=st.lists(st.floats(-50, 50), min_size=2, max_size=40),
       temperatures=st.lists(st.floats(1e-3, 1e3), min_size=2, max_size=6, unique=True))
def test_entropy_grows_with_temperature(scores, temperatures):
    x = np.array(scores)
    entropies = []
    for t in sorted(temperatures):
        w = np.exp((x - x.max()) / t)
        w /= w.sum()
        entropies.append(-np.sum(w[w > 0] * np.log(w[w > 0])))
    entropies = np.array(entropies)
    slack = difference_allowance(entropy_allowance(len(x)), entropy_allowance(len(x)))
    drops = np.maximum(entropies[:-1] - entropies[1:], 0.0)
    assert_within(drops, np.zeros_like(drops), slack, what="entropy drop from T_i to T_i+1 (T ascending)",
                  versus="0 (entropy non-decreasing in T)")
    assert_within(np.maximum(entropies[-1] - np.log(len(x)), 0.0), np.asarray(0.0), slack,
                  what="entropy above log n at the highest T", versus="0 (entropy at most log n)")


@checks("softmax-temperature")
@given(scores=st.lists(st.integers(-20, 20), min_size=2, max_size=40, unique=True))
def test_temperature_limits_are_argmax_and_uniform(scores):
    """Gaps between distinct integer scores are >= 1: at T = 1/40 the top weight exceeds
    1 - n e^-40; at T = 1e6 every weight is within 40 / 1e6 of 1/n (|x_i - x_j| <= 40)."""
    x = np.array(scores, dtype=float)
    n = len(x)
    cold = np.exp((x - x.max()) * 40.0)
    cold /= cold.sum()
    assert_within(cold[np.argmax(x)], np.asarray(1.0),
                  Allowance(n * np.exp(-40.0), "T = 1/40, score gaps >= 1: 1 - top weight <= (n - 1) e^-40"),
                  what="the top weight of softmax(40 x)", versus="1")
    hot = np.exp((x - x.max()) / 1e6)
    hot /= hot.sum()
    assert_within(hot, np.full(n, 1 / n),
                  Allowance(40.0 / 1e6 / n * np.e, "T = 1e6, |x_i - x_j| <= 40: |w_i - 1/n| <= (e^(40/T) - 1)/n"),
                  what="softmax(x / 1e6)", versus="1/n")


def opposite_unit_tokens() -> Problem:
    """A fixed witness at the edge of the cosine range: tokens (1, 0) and (-1, 0), cosines exactly +-1, so each
    row's two weights differ by exactly e^(2s) and only the float64 rounding of the check separates a correct
    implementation from one whose weights are off (drawn tokens reach this edge only with d = 1)."""
    tokens = [[[[1.0, 0.0], [-1.0, 0.0]]]]
    return build(n_q=2, n_k=2, d=2, d_v=2).derive(with_arrays, q=tokens, k=tokens, v=tokens)


@checks("unit-dot-product-is-cosine")
@given(data=st.data())
def test_unit_tokens_are_scored_by_cosine(variant, data):
    problem = data.draw(problems_for(variant, weights_visible=True, min_n=2, scale=False,
                                     score_styles=("normal", "spiky")), label="problem")
    check_unit_tokens_are_scored_by_cosine(variant, problem)


@reproducible
def check_unit_tokens_are_scored_by_cosine(variant, problem) -> None:
    """The check of test_unit_tokens_are_scored_by_cosine on one problem."""
    trial = Trial(variant, problem)
    expect_cosine_weights(trial, observe_weights(trial, self_attention(problem, unit=True)))
    expect_cosine_weights(trial, observe_weights(trial, opposite_unit_tokens()))


@checks("self-attention-scores-symmetric")
@given(data=st.data())
def test_self_attention_scores_are_symmetric(variant, data):
    problem = data.draw(problems_for(variant, weights_visible=True, min_n=2, scale=False,
                                     score_styles=MODERATE + ("integers",)), label="problem")
    check_self_attention_scores_are_symmetric(variant, problem)


@reproducible
def check_self_attention_scores_are_symmetric(variant, problem) -> None:
    """The check of test_self_attention_scores_are_symmetric on one problem."""
    trial = Trial(variant, problem)
    expect_symmetric_scores(trial, observe_weights(trial, self_attention(problem)))


@checks("dot-product-as-distance")
@given(data=st.data())
def test_unit_vectors_weighted_by_nearness(variant, data):
    problem = data.draw(problems_for(variant, weights_visible=True, min_n=2, scale=False,
                                     score_styles=("normal", "spiky")), label="problem")
    check_unit_vectors_weighted_by_nearness(variant, problem)


@reproducible
def check_unit_vectors_weighted_by_nearness(variant, problem) -> None:
    """The check of test_unit_vectors_weighted_by_nearness on one problem."""
    trial = Trial(variant, problem)
    expect_weights_rank_by_distance(trial, observe_weights(trial, unit_queries_and_keys(problem)))


@checks("dot-product-as-distance-literal")
@given(data=st.data())
def test_dot_product_ranks_like_distance(variant, data):
    problem = data.draw(problems_for(variant, weights_visible=True, min_n=2, scale=False, score_styles=("normal",)),
                        label="problem")
    check_dot_product_ranks_like_distance(variant, problem)


@reproducible
def check_dot_product_ranks_like_distance(variant, problem) -> None:
    """The check of test_dot_product_ranks_like_distance on one problem."""
    trial = Trial(variant, problem)
    expect_dot_product_ranks_like_distance(trial, observe_weights(trial, keys_of_many_lengths(problem)))


# -- every implementation: the geometric reading in its correct form (seed 002 § 3.1.2, seed 000 § 向量化) --


GEOMETRIC_TABLE = ("geometric-invariances", "Per implementation, the largest error of each geometric reading relative "
                   "to its allowance on one exact problem: below 1 passes, and a small ratio says the reading holds "
                   "with room to spare.")


@checks("geometric-cosine-every-implementation")
def test_cosine_attention_is_the_implementation_on_unit_vectors(variant):
    ratio = check_cosine_attention(variant)
    record_headroom(GEOMETRIC_TABLE[0], "cosine attention = unit q, k at scale 1/tau", ratio, GEOMETRIC_TABLE[1])


@checks("key-translation-invariance")
def test_translating_every_key_changes_nothing(variant):
    ratio = check_key_translation(variant)
    record_headroom(GEOMETRIC_TABLE[0], "every key + c", ratio, GEOMETRIC_TABLE[1])


@checks("value-affine-equivariance")
def test_affine_map_of_values_maps_outputs(variant):
    ratio = check_value_affine_map(variant)
    record_headroom(GEOMETRIC_TABLE[0], "V -> a V + b", ratio, GEOMETRIC_TABLE[1])
