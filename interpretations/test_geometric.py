"""The geometric reading (seed 002 § 3.1.2; seed 000 § 向量化; seed 003 § 第一个概念; seed 000 § 自注意力)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from harness.markers import checks
from specs.problems import build
from specs.reference import attention
from specs.strategies import head_dims, lengths
from specs.tolerance import dot_product_allowance, entropy_allowance, forward_allowance, unit_vector_allowance

torch = pytest.importorskip("torch", reason="the seed's interpretation code is written in torch")

from interpretations.seed002_readings import geometric_attention_interpretation  # noqa: E402

SUBJECT = "seed002-geometric"
seeds = st.integers(0, 2**32 - 1)
unbatched = st.builds(lambda n_q, n_k, d, d_v, seed, style: build(n_q=n_q, n_k=n_k, d=d, d_v=d_v, seed=seed,
                                                                    score_style=style),
                      lengths(64), lengths(64), head_dims(32), head_dims(8), seeds,
                      st.sampled_from(["normal", "integers", "large", "spiky"]))


def _seed_code(q, k, v):
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
    assert np.all(np.abs(out - oracle.out) <= allowance.bound), (
        f"cosine attention != SDPA(q/|q|, k/|k|, scale=10) on {problem!r}")
    _, weights_allowance = forward_allowance(_unit(q), _unit(k), np.eye(k.shape[2])[None, None], dtype="float64",
                                             scale=10.0)
    _, rescaled = _seed_code(q * rescale, k / rescale, v)
    assert np.all(np.abs(rescaled - weights) <= 2 * weights_allowance.bound), "weights change when q, k are rescaled"


@checks("geometric-projection-literal", subject=SUBJECT)
@given(n_k=st.integers(1, 6), extra=st.integers(1, 6), seed=seeds)
def test_weights_depend_only_on_projection_onto_key_span(n_k, extra, seed):
    """Dot-product attention passes this (shown first); the cosine code does not."""
    p = build(n_q=3, n_k=n_k, d=n_k + extra, d_v=2, seed=seed)
    q, k, v = p.q, p.k, p.v
    keys = k[0, 0]
    residual = np.random.default_rng(seed).standard_normal(keys.shape[1])
    residual -= keys.T @ np.linalg.lstsq(keys.T, residual, rcond=None)[0]  # orthogonal to every key
    moved = q + 3.0 * np.linalg.norm(q, axis=-1, keepdims=True) * residual / np.linalg.norm(residual)
    plain, allowance = forward_allowance(q, k, np.eye(n_k)[None, None], dtype="float64")
    shifted, allowance_shifted = forward_allowance(moved, k, np.eye(n_k)[None, None], dtype="float64")
    assert np.all(np.abs(plain.out - shifted.out) <= allowance.bound + allowance_shifted.bound), \
        "dot-product weights should ignore a query component orthogonal to the keys"
    _, weights = _seed_code(q, k, v)
    _, weights_moved = _seed_code(moved, k, v)
    gap = np.abs(weights - weights_moved).max()
    assert gap <= 2 * allowance.bound.max(), (
        f"adding a component orthogonal to every key (same projection onto their span) changes the cosine "
        f"weights by {gap:.3g}: q {q[0, 0, 0].round(3).tolist()} -> {moved[0, 0, 0].round(3).tolist()}")


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
    slack = 2 * entropy_allowance(len(x))
    assert all(a <= b + slack for a, b in itertools.pairwise(entropies)), (
        f"entropy {entropies} is not non-decreasing in T = {sorted(temperatures)}")
    assert entropies[-1] <= np.log(len(x)) + slack


@checks("softmax-temperature")
@given(scores=st.lists(st.integers(-20, 20), min_size=2, max_size=40, unique=True))
def test_temperature_limits_are_argmax_and_uniform(scores):
    """Gaps between distinct integer scores are >= 1: at T = 1/40 the top weight exceeds
    1 - n e^-40; at T = 1e6 every weight is within 40 / 1e6 of 1/n (|x_i - x_j| <= 40)."""
    x = np.array(scores, dtype=float)
    n = len(x)
    cold = np.exp((x - x.max()) * 40.0)
    cold /= cold.sum()
    assert cold[np.argmax(x)] >= 1 - n * np.exp(-40.0)
    hot = np.exp((x - x.max()) / 1e6)
    hot /= hot.sum()
    assert np.all(np.abs(hot - 1 / n) <= 40.0 / 1e6 / n * np.e)


@checks("unit-dot-product-is-cosine")
@given(d=head_dims(64), seed=seeds)
def test_dot_product_of_unit_vectors_is_cosine(d, seed):
    p = build(d=d, seed=seed)
    a, b = _unit(p.q[0, 0, 0]), _unit(p.k[0, 0, 0])
    dot = float(a @ b)
    cosine = float(torch.cosine_similarity(torch.from_numpy(a), torch.from_numpy(b), dim=0))
    slack = 2 * unit_vector_allowance(d)
    assert abs(dot - cosine) <= slack
    assert -1 - slack <= dot <= 1 + slack
    assert abs(float(a @ a) - 1) <= slack and dot <= float(a @ a) + slack


@checks("dot-product-as-distance")
@given(d=head_dims(64), seed=seeds)
def test_unit_dot_product_ranks_like_distance(d, seed):
    p = build(n_q=1, n_k=8, d=d, seed=seed)
    a, keys = _unit(p.q[0, 0, 0]), _unit(p.k[0, 0])
    dots, distances = keys @ a, np.sum((keys - a) ** 2, axis=-1)
    slack = 2 * unit_vector_allowance(d)
    assert np.all(np.abs(distances - (2 - 2 * dots)) <= slack), "|a - b|^2 != 2 - 2 a.b for unit vectors"
    # Without normalisation the dot product does not rank like distance: 2a is farther from a than a is.
    assert float(a @ (2 * a)) > float(a @ a) and np.linalg.norm(2 * a - a) > np.linalg.norm(a - a)


@checks("self-attention-scores-symmetric")
@given(n=lengths(64), d=head_dims(64), seed=seeds, style=st.sampled_from(["normal", "integers", "large", "mixed"]))
def test_self_attention_scores_are_symmetric(n, d, seed, style):
    x = build(n_q=n, n_k=n, d=d, seed=seed, score_style=style).q
    scores = attention(x, x, x).scores[0, 0]
    slack = 2 * dot_product_allowance(x[0, 0], x[0, 0]) / np.sqrt(d)
    assert np.all(np.abs(scores - scores.T) <= slack)
