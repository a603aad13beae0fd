"""The geometric, differential-geometric and Bayesian readings on every implementation (seed 002 § 3.1.2,
§ 3.1.4, § 3.1.5) fail on real variants of attention that break them and pass on correct code written
unusually; the seed-code claims fail for the reason their catalogue entries give; the affine-image allowance
bounds float64's a x + b. Run in-process on the properties' own fixed problems (float64, plus float32 for
the correct forms)."""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from interpretations import basis_checks, geometric_checks, posterior_checks, reading_code_checks
from interpretations.exact_problems import exact_problem
from protocol.registry import Variant, load_impl
from specs.catalogue import load_claims
from specs.tolerance import Allowance, affine_image_allowance
from tests.fixtures.runs import ROOT

pytest.importorskip("torch")

CHECKS = {  # claim -> the check its every-implementation property makes
    "geometric-cosine-every-implementation": geometric_checks.check_cosine_attention,
    "key-translation-invariance": geometric_checks.check_key_translation,
    "value-affine-equivariance": geometric_checks.check_value_affine_map,
    "orthogonal-basis-change-invariance": basis_checks.check_rotation,
    "dual-basis-change-invariance": basis_checks.check_dual_basis,
    "bayesian-uniform-prior-posterior-mean": posterior_checks.check_uniform_prior,
    "bayesian-prior-as-log-bias": posterior_checks.check_log_prior_bias,
}
BAYES = {"bayesian-uniform-prior-posterior-mean", "bayesian-prior-as-log-bias"}
# wrong implementation -> the claims it breaks (it must pass every other one of CHECKS)
WRONG = {
    "sigmoid_weights": {"geometric-cosine-every-implementation", "key-translation-invariance",
                        "value-affine-equivariance", *BAYES},
    "key_norm_penalty": {"key-translation-invariance", "dual-basis-change-invariance", *BAYES},
    "cosine_scores": {"key-translation-invariance", "dual-basis-change-invariance", *BAYES},
    "rope_inside": {"geometric-cosine-every-implementation", "key-translation-invariance",
                    "orthogonal-basis-change-invariance", "dual-basis-change-invariance", *BAYES},
    "unscaled": {"geometric-cosine-every-implementation", *BAYES},
    "column_softmax": {"geometric-cosine-every-implementation", "key-translation-invariance",
                       "value-affine-equivariance", *BAYES},
}
CORRECT = ("exp2_attention", "lse_halves_attention", "polarised_scores")
HERE = {"exp2_attention", "lse_halves_attention", "unscaled"}  # from tests/fixtures/wrong_head_impls.py


def _variant(name: str, dtype: str = "float64") -> Variant:
    module = "wrong_head_impls" if name in HERE else "readings_geom_impls"
    return Variant(load_impl(f"{ROOT}/tests/fixtures/{module}.py:{name}"), dtype)


@pytest.mark.parametrize("name", sorted(WRONG))
def test_each_wrong_implementation_breaks_exactly_its_readings(name):
    variant = _variant(name)
    broken = set()
    for claim, check in CHECKS.items():
        try:
            check(variant)
        except PropertyViolation as violation:
            assert "raised" not in violation.message().splitlines()[0], violation.message()[:400]
            broken.add(claim)
    assert broken == WRONG[name]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", CORRECT)
def test_correct_unusual_implementations_pass_every_reading(name, dtype):
    variant = _variant(name, dtype)
    for check in CHECKS.values():
        check(variant)


def test_fixed_problems_follow_the_capabilities():
    """No cross-attention, no GQA, d_v = d: the problem still has head dim 16 and fits; grouped heads and
    n_q != n_k where the implementation takes them."""
    plain = Variant(load_impl("impls.seeds.seed002_tiled:memory_optimized_tiled_attention"), "float64")
    p = exact_problem(plain, seed=0)
    assert (p.q.shape, p.k.shape, p.v.shape) == ((2, 2, 11, 16), (2, 2, 11, 16), (2, 2, 11, 16))
    full = exact_problem(_variant("exp2_attention"), seed=0)
    assert (full.q.shape, full.k.shape, full.v.shape) == ((2, 2, 7, 16), (2, 1, 11, 16), (2, 1, 11, 13))


def _refutes(slug: str, message: str) -> bool:
    return re.search(load_claims()[slug].refutation, message) is not None


@pytest.mark.parametrize("shape", [(1, 2, 1), (3, 3, 4), (2, 3, 2), (3, 2, 1), (5, 4, 2)])
def test_differential_code_fails_off_its_shapes_for_the_stated_reason(shape):
    with pytest.raises(AssertionError) as excinfo:
        reading_code_checks.expect_runs_on_attention_shapes(*shape, seed=0)
    assert _refutes("differential-code-shapes", str(excinfo.value))


@pytest.mark.parametrize("shape", [(1, 1, 1), (4, 4, 4), (6, 6, 2)])
def test_differential_code_runs_on_its_shapes(shape):
    reading_code_checks.expect_runs_on_attention_shapes(*shape, seed=0)


@pytest.mark.parametrize("n_q, n_k", [(1, 3), (2, 3), (4, 3)])
def test_bayesian_code_fails_on_cross_attention_for_the_stated_reason(n_q, n_k):
    with pytest.raises(AssertionError) as excinfo:
        reading_code_checks.expect_takes_cross_attention(n_q, n_k, 2, seed=0)
    assert _refutes("bayesian-code-cross-attention", str(excinfo.value))


def test_bayesian_code_takes_one_key_and_self_attention():
    """The two cases where its pairing of query i with value i does not show."""
    reading_code_checks.expect_takes_cross_attention(3, 1, 2, seed=0)
    reading_code_checks.expect_takes_cross_attention(3, 3, 2, seed=0)


def test_affine_image_allowance_bounds_float64_rounding():
    """fl(a x + b) against the exact rational a x + b, with x exact (allowance 0): within the rounding
    term, which is a few ulps of the magnitudes and no more."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200) * 10.0 ** rng.integers(-3, 4, 200)
    b = rng.standard_normal(200) * 100
    for a in (-1.5, 1 / 3, 7.25e3):
        bound = affine_image_allowance(Allowance(0.0, "exact"), a, x, b).bound
        got = a * x + b
        exact = [Fraction(a) * Fraction(xi) + Fraction(bi) for xi, bi in zip(x.tolist(), b.tolist(), strict=True)]
        error = np.array([abs(Fraction(g) - e) for g, e in zip(got.tolist(), exact, strict=True)], dtype=float)
        assert np.all(error <= bound)
        assert np.all(bound <= 8 * np.finfo(float).eps * (abs(a) * np.abs(x) + np.abs(b)))
    carried = affine_image_allowance(Allowance(np.full(3, 1e-3), "x"), -2.0, np.zeros(3), np.zeros(3))
    assert np.allclose(carried.bound, 2e-3)
