"""The bounds the probabilistic and information-theoretic readings rest on (specs.tolerance, specs.statistics):
each holds where the theory says, is not so loose that it cannot fail, and the seed-code and oracle checks of
interpretations/test_information.py fail and pass where they should."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specs.dtypes import finfo
from specs.statistics import bernstein_radius
from specs.tolerance import (
    Allowance,
    entropy_regularised_gap_allowance,
    normalised_weights_allowance,
    temperature_limit,
    underflow_gap_window,
    weights_entropy_allowance,
)

rows = st.lists(st.floats(-8, 8), min_size=2, max_size=12).map(np.array)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max())
    return e / e.sum()


def _entropy(p: np.ndarray) -> float:
    return float(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)))


def test_bernstein_radius_covers_the_deviation_and_is_clt_shaped():
    """At N = 2000 draws of a two-point law the radius at alpha = 1e-3 is exceeded in no more than a few of 2000
    repetitions (expected <= 2), and it is within 20 % of the CLT's z sigma / sqrt(N) with z^2 = 2 log(2 / alpha)."""
    rng = np.random.default_rng(0)
    p, n, alpha = 0.1, 2000, 1e-3
    variance, spread = p * (1 - p), 1 - p
    radius = float(bernstein_radius(n, variance, spread, alpha))
    means = rng.binomial(n, p, size=2000) / n
    assert np.sum(np.abs(means - p) >= radius) <= 5
    clt = math.sqrt(2 * math.log(2 / alpha) * variance / n)
    assert clt < radius < 1.2 * clt


@given(rows, st.integers(1, 3))
def test_cold_limit_bound_holds_and_is_tight(s, ties):
    """Integer scores with `ties` tied at the top: softmax(40 s) is within the bound of 1/t on ties and 0 elsewhere,
    and at scale 1 the deviation reaches at least a tenth of the bound (it is not vacuous)."""
    s = np.round(s)
    s[:ties] = s.max() + 1
    for scale in (40.0, 1.0):
        limit, bound = temperature_limit(scale * s[None], "cold")
        deviation = np.abs(_softmax(scale * s) - limit[0])
        assert np.all(deviation <= bound.bound[0] * (1 + 1e-12) + 1e-300)
    if np.any(s < s.max()):
        assert deviation.max() >= 0.1 * bound.bound.max()


@given(rows)
def test_hot_limit_bound_holds_with_a_mask(s):
    masked = np.where(np.arange(len(s)) % 3 == 1, -np.inf, s) if len(s) > 2 else s
    for scale in (1e-9, 1e-3, 1.0):
        limit, bound = temperature_limit(scale * masked[None], "hot")
        weights = _softmax(scale * masked)
        assert np.all(np.abs(weights - limit[0]) <= bound.bound[0] * (1 + 1e-9) + 1e-18)


def test_temperature_limit_names_its_limits():
    with pytest.raises(ValueError, match="cold"):
        temperature_limit(np.zeros((1, 2)), "warm")


@settings(max_examples=60)
@given(rows, st.floats(1e-12, 0.3), st.integers(0, 2**32 - 1))
def test_entropy_allowance_covers_any_weights_within_the_weight_allowance(s, size, seed):
    """Weights moved by up to the allowance (random signs, clipped at 0) change the entropy by no more than
    weights_entropy_allowance; a bound of a tenth of it is exceeded for some moves (not loose by orders)."""
    p = _softmax(s)
    a = size * np.maximum(p, 1e-3)
    rng = np.random.default_rng(seed)
    moved = np.clip(p + a * rng.choice([-1.0, 1.0], size=p.shape), 0.0, None)
    allowed = weights_entropy_allowance(Allowance(a, "test"), p).bound
    assert abs(_entropy(moved) - _entropy(p)) <= float(allowed[0])


def test_entropy_allowance_is_not_vacuous():
    p = np.full(8, 1 / 8)
    a = np.full(8, 1e-3)
    moved = p + a * np.array([1, 1, 1, 1, -1, -1, -1, -1.0])
    moved[0] += 4e-3  # not a distribution any more: the entropy moves by ~ sum a |log p + 1|
    change = abs(_entropy(moved) - _entropy(p))
    bound = float(weights_entropy_allowance(Allowance(a, "test"), p).bound[0])
    assert bound < 2.0 * 8 * 1e-3 * (math.log(8) + 1) and change > 0.1 * bound


@given(rows, st.floats(1e-12, 1e-3), st.integers(0, 2**32 - 1))
def test_gap_allowance_covers_the_kl_of_weights_within_their_allowance(s, size, seed):
    """logsumexp(s) - <W~, s> - H(W~) = KL(W~ || P) for W within its allowance of P: inside the chi-square bound."""
    p = _softmax(s)
    a = size * p
    rng = np.random.default_rng(seed)
    w = p + a * rng.uniform(-1, 1, size=p.shape)
    w_n = w / w.sum()
    gap = (np.log(np.sum(np.exp(s - s.max()))) + s.max()) - (w_n @ s + _entropy(w_n))
    allowed = entropy_regularised_gap_allowance(Allowance(a, "test"), w[None], p[None], s[None]).bound
    assert abs(gap) <= float(allowed[0, 0])
    moved = normalised_weights_allowance(Allowance(a, "test"), p).bound
    assert np.all(np.abs(w_n - p) <= moved * (1 + 1e-9) + 1e-18)


def test_gap_allowance_catches_a_dropped_weight():
    s = np.array([0.0, -1.0, -2.0, -7.5])
    p = _softmax(s)
    pruned = np.where(p < 1e-3, 0.0, p)
    pruned /= pruned.sum()
    gap = (np.log(np.sum(np.exp(s))) - (pruned @ s + _entropy(pruned)))
    exact = np.finfo(np.float64).eps * p
    assert gap > float(entropy_regularised_gap_allowance(Allowance(exact, "float64"), pruned[None], p[None],
                                                         s[None]).bound[0, 0])


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_underflow_window_brackets_numpy_exp_in_each_dtype(dtype):
    """exp(-g) computed in the dtype (float32 for float16 and bfloat16, as kernels do) then stored in it: the
    first g on a fine ladder giving 0 lies inside the window, and the window is not wider than FTZ vs gradual."""
    from specs.dtypes import numpy_dtype

    lowest, highest = underflow_gap_window(dtype)
    gaps = np.linspace(lowest - 5, highest + 5, 20_000)
    inner = np.float32 if finfo(dtype).bits < 32 else numpy_dtype(dtype).type
    with np.errstate(under="ignore"):
        stored = np.exp(-gaps.astype(inner)).astype(numpy_dtype(dtype)).astype(np.float64)
    first = gaps[np.argmax(stored == 0)]
    assert stored[-1] == 0 and lowest <= first <= highest
    out = finfo(dtype)
    assert highest - lowest <= math.log(float(out.tiny) / float(out.smallest_subnormal)) + math.log(8) + 1e-9 \
        or dtype == "float16"


def test_mutual_information_check_fails_softmax_and_passes_a_balanced_assignment():
    from interpretations.information_checks import expect_largest_mutual_information

    expect_largest_mutual_information(np.eye(3)[[0, 1, 2, 0, 1, 2]], "a balanced one-hot assignment")
    with pytest.raises(AssertionError, match=r"mutual information I\(i; J\) of the softmax weights"):
        expect_largest_mutual_information(np.array([[0.9, 0.1], [0.1, 0.9]]), "the softmax weights")


def test_query_rows_check_passes_code_whose_weights_follow_the_query():
    torch = pytest.importorskip("torch")
    from impls.seeds.seed_code.seed002_readings import information_theoretic_attention
    from interpretations.information_checks import expect_one_row_per_query

    def per_query(query, key, value):
        """Softmax over keys of q.k: query-by-key weights, one row per query."""
        return torch.softmax(query @ key.T, dim=-1) @ value

    expect_one_row_per_query(per_query, 3, 5, 4, 0)
    with pytest.raises(AssertionError, match=r"returns 5 rows \(one per key\) for 3 queries"):
        expect_one_row_per_query(information_theoretic_attention, 3, 5, 4, 0)
