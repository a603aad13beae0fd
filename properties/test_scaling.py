"""Scaling by 1/sqrt(d_k): variance control, the flat region of the softmax, explicit scales.

Seed 003 § 第一个概念 (维度大，方差也就变大了 ... d^1/2当分母), seed 000 § 具体过程
(让Softmax函数在一个比较平缓的区域工作), seed 000 § Flash Attention (softmax_scale=1.0).
The statistical properties run on fixed seeds (specs.statistics) and read the
implementation's weights through one-hot values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.exhibits import exhibit
from harness.api.markers import ORACLE, checks
from harness.api.observe import observe_weights
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, check_against_oracle, problems_for
from properties.scaling_checks import FLAT_GRID, VARIANCE_SAMPLES, score_spread
from specs.derivations import with_keywords
from specs.examples import coupled_scores, gaussian_queries
from specs.problems import Problem
from specs.reference import attention
from specs.statistics import ALPHA, unit_normal_variance_pvalue
from specs.strategies import SCALES
from specs.tolerance import Allowance, jacobian_norm_allowance, row_entropy_allowance


def _first_query_weights(variant, problem):
    """Weights of query row 0 of every batch entry (rows of one entry share keys, so only one is used)."""
    observed = observe_weights(Trial(variant, problem))
    return observed.weights[:, 0, 0, :], observed.problem


@checks("sqrt-dk-variance")
@pytest.mark.parametrize("d", [4, 16, 64])
def test_scaled_scores_have_unit_variance(variant, d):
    """Under H0 (scores q.k / sqrt(d)), log(w_1 / w_0) = q.(k_1 - k_0) / sqrt(d) is, given q,
    N(0, 2 |q|^2 / d) exactly; so z = log(w_1 / w_0) / (sqrt(2) |q| / sqrt(d)) is iid N(0, 1)."""
    check_scaled_scores_have_unit_variance(variant, d)


@reproducible
def check_scaled_scores_have_unit_variance(variant, d) -> None:
    """The check of test_scaled_scores_have_unit_variance."""
    problem = gaussian_queries(samples=VARIANCE_SAMPLES, n_k=2, d=d, seed=20_000 + d)
    weights, observed = _first_query_weights(variant, problem)
    trial = Trial(variant, observed)
    with np.errstate(divide="ignore"):
        gap = np.log(weights[:, 1]) - np.log(weights[:, 0])
    query_norm = np.linalg.norm(problem.q[:, 0, 0, :], axis=-1)
    z = gap / (math.sqrt(2) * query_norm / math.sqrt(d))
    p_value = unit_normal_variance_pvalue(z)
    if not p_value >= ALPHA:
        trial.fail(f"the scores' variance is not 1 at d_k = {d}",
                   details=(f"sample variance of the standardised log-weight gaps {np.var(z):.4g} "
                            f"(p = {p_value:.3g} < {ALPHA:g}); 1/sqrt(d) scaling gives 1, no scaling gives {d}",))
    unscaled_p = unit_normal_variance_pvalue(gap / (math.sqrt(2) * query_norm))
    assert unscaled_p < ALPHA, f"no power: the test cannot tell scaled from unscaled scores at d={d}"


def row_entropy(weights: np.ndarray) -> np.ndarray:
    """H(p) = -sum_j p_j log p_j of each row (last axis), 0 log 0 = 0; keepdims."""
    p = np.clip(weights, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1, keepdims=True)


def row_jacobian_norm(weights: np.ndarray) -> np.ndarray:
    """||diag(p) - p p^T||_F of each row (last axis), from the n x n matrix; keepdims. In [0, 1/2] on the simplex:
    J^2 = S2 - 2 S3 + S2^2 <= S2 - S3 = sum p_j^2 (1 - p_j) <= 1/4, as S2^2 <= S3 (Cauchy-Schwarz)."""
    jacobian = weights[..., :, None] * (np.eye(weights.shape[-1]) - weights[..., None, :])
    return np.sqrt(np.sum(jacobian**2, axis=(-2, -1)))[..., None]


FLAT_ROWS = 1024
FLAT_KEYS = 4
FLAT_SEED = 30_000


@dataclass(frozen=True)
class FlatRows:
    """Per-row statistics of the weights at one d_k: the implementation's, the oracle's, and their allowances."""

    entropy: np.ndarray
    jacobian: np.ndarray
    oracle_entropy: np.ndarray
    oracle_jacobian: np.ndarray
    entropy_allowance: np.ndarray
    jacobian_allowance: np.ndarray

    @classmethod
    def of(cls, weights: np.ndarray, oracle: np.ndarray, allowance: Allowance) -> FlatRows:
        bounded = Allowance(np.broadcast_to(allowance.bound, oracle.shape), allowance.rule)
        return cls(row_entropy(weights), row_jacobian_norm(weights), row_entropy(oracle), row_jacobian_norm(oracle),
                   row_entropy_allowance(oracle, bounded).bound, jacobian_norm_allowance(oracle, bounded).bound)


def flat_problem(variant, d: int, scaled: bool) -> Problem:
    """examples.coupled_scores at d; unscaled: scale=1.0, or q * sqrt(d) for implementations without `scale`."""
    problem = coupled_scores(FLAT_ROWS, FLAT_KEYS, d, FLAT_SEED, 1 if variant.capabilities.cross else FLAT_KEYS)
    if scaled:
        return problem
    return problem.derive(with_keywords, scale=1.0) if variant.capabilities.scale else problem.scale_queries(
        math.sqrt(d))


def _observed_rows(variant, problem: Problem) -> FlatRows:
    observed = observe_weights(Trial(variant, problem))
    bound = np.broadcast_to(observed.allowance.bound, observed.weights.shape)
    return FlatRows.of(observed.weights[:, 0, 0], observed.oracle.weights[:, 0, 0],
                       Allowance(bound[:, 0, 0], observed.allowance.rule))


def _formula_rows(problem: Problem, scale: float | None) -> FlatRows:
    """Rows of a wrong formula (softmax with `scale`) judged against the oracle's default scale, exactly:
    the power demonstrations."""
    def weights(s: float | None) -> np.ndarray:
        return attention(problem.q[:, :, :1], problem.k, problem.k[..., :1], scale=s).weights[:, 0, 0]
    return FlatRows.of(weights(scale), weights(None), Allowance(0.0, "exact"))


def constancy_failures(rows: dict[int, FlatRows]) -> list[str]:
    """Scaled: the mean entropy and Jacobian norm at every d_k equal those at the smallest d_k, up to the
    allowances propagated from the weights' (and the oracles' own difference, from inputs rounded in the dtype)."""
    first, failures = rows[FLAT_GRID[0]], []
    for d in FLAT_GRID[1:]:
        for name, got, oracle, allowed in (("entropy", "entropy", "oracle_entropy", "entropy_allowance"),
                                           ("Jacobian norm", "jacobian", "oracle_jacobian", "jacobian_allowance")):
            gap = abs(np.mean(getattr(rows[d], got)) - np.mean(getattr(first, got)))
            slack = (np.mean(getattr(rows[d], allowed)) + np.mean(getattr(first, allowed))
                     + abs(np.mean(getattr(rows[d], oracle)) - np.mean(getattr(first, oracle))))
            if not gap <= slack:
                failures.append(f"scaled mean row {name} at d_k={d} differs from d_k={FLAT_GRID[0]} by {gap:.3g} "
                                f"> allowed {slack:.3g}")
    return failures


def saturation_failures(scaled: dict[int, FlatRows], unscaled: dict[int, FlatRows]) -> list[str]:
    """Unscaled: the mean entropy falls at every step of the grid, the mean Jacobian norm falls from the smallest
    to the largest d_k, and at the largest they are below a third (entropy) and half (Jacobian) of the scaled."""
    entropy = [float(np.mean(unscaled[d].entropy)) for d in FLAT_GRID]
    jacobian = [float(np.mean(unscaled[d].jacobian)) for d in FLAT_GRID]
    reference_entropy = float(np.mean(scaled[FLAT_GRID[0]].entropy))
    reference_jacobian = float(np.mean(scaled[FLAT_GRID[0]].jacobian))
    failures = [f"unscaled mean row entropy does not fall from d_k={a} to d_k={b}: {x:.4g} -> {y:.4g}"
                for a, b, x, y in zip(FLAT_GRID, FLAT_GRID[1:], entropy, entropy[1:], strict=False) if not y < x]
    if not jacobian[-1] < jacobian[0]:
        failures.append(f"unscaled mean Jacobian norm does not fall: {jacobian[0]:.4g} at d_k={FLAT_GRID[0]}, "
                        f"{jacobian[-1]:.4g} at d_k={FLAT_GRID[-1]}")
    if not entropy[-1] < reference_entropy / 3:
        failures.append(f"unscaled mean row entropy at d_k={FLAT_GRID[-1]} is {entropy[-1]:.4g}, not below a third "
                        f"of the scaled {reference_entropy:.4g}")
    if not jacobian[-1] < reference_jacobian / 2:
        failures.append(f"unscaled mean Jacobian norm at d_k={FLAT_GRID[-1]} is {jacobian[-1]:.4g}, not below half "
                        f"of the scaled {reference_jacobian:.4g}")
    return failures


def _curve(rows: dict[int, FlatRows], field: str) -> dict:
    return {"x": list(FLAT_GRID), "y": [float(np.mean(getattr(rows[d], field))) for d in FLAT_GRID]}


_FLAT_ROWS: dict[str, tuple[dict[int, FlatRows], dict[int, FlatRows]]] = {}


def flat_rows(variant) -> tuple[dict[int, FlatRows], dict[int, FlatRows]]:
    """The implementation's rows at every d_k of FLAT_GRID, scaled and unscaled (computed once per variant, shared by
    the two properties below, and shown as the exhibits entropy-vs-dk and jacobian-vs-dk)."""
    if variant.name not in _FLAT_ROWS:
        scaled = {d: _observed_rows(variant, flat_problem(variant, d, True)) for d in FLAT_GRID}
        unscaled = {d: _observed_rows(variant, flat_problem(variant, d, False)) for d in FLAT_GRID}
        for name, field, label in (("entropy-vs-dk", "entropy", "mean row entropy (nats)"),
                                   ("jacobian-vs-dk", "jacobian", "mean ||diag(p) - p p^T||_F")):
            exhibit(name, "curves", {"x_label": "d_k", "y_label": label, "log_x": True,
                                     "series": {"scaled": _curve(scaled, field), "unscaled": _curve(unscaled, field)}},
                    caption=f"The {label} of the implementation's weights stays level with the 1/sqrt(d_k) scale "
                            f"and falls towards 0 without it ({FLAT_ROWS} rows of {FLAT_KEYS} keys per d_k).")
        _FLAT_ROWS[variant.name] = scaled, unscaled
    return _FLAT_ROWS[variant.name]


def _coupled_oracle_problems() -> dict[int, Problem]:
    return {d: coupled_scores(FLAT_ROWS, FLAT_KEYS, d, FLAT_SEED) for d in FLAT_GRID}


@checks("scale-keeps-softmax-flat")
def test_softmax_jacobian_does_not_vanish_as_d_grows(variant):
    """With the default scale, the mean row entropy and mean softmax-Jacobian norm of the implementation's weights
    are level across d_k (examples.coupled_scores: FLAT_ROWS rows of FLAT_KEYS keys per d_k)."""
    check_softmax_jacobian_does_not_vanish_as_d_grows(variant)


@reproducible
def check_softmax_jacobian_does_not_vanish_as_d_grows(variant) -> None:
    """The check of test_softmax_jacobian_does_not_vanish_as_d_grows."""
    scaled, _ = flat_rows(variant)
    failures = constancy_failures(scaled)
    if failures:
        Trial(variant, flat_problem(variant, FLAT_GRID[-1], True)).fail(
            "the scaled softmax does not stay in one region as d_k grows", details=tuple(failures))
    wrong = {d: _formula_rows(p, 1 / d) for d, p in _coupled_oracle_problems().items()}
    assert constancy_failures(wrong), "no power: the constancy check accepts a 1/d_k scale"


@checks("unscaled-softmax-saturates")
def test_unscaled_softmax_saturates_as_dk_grows(variant):
    """With scale = 1 (or q * sqrt(d_k) where there is no `scale`), the mean row entropy and mean softmax-Jacobian
    norm of the implementation's weights fall towards 0 as d_k grows (the thresholds: FLAT_GRID's comment)."""
    check_unscaled_softmax_saturates_as_dk_grows(variant)


@reproducible
def check_unscaled_softmax_saturates_as_dk_grows(variant) -> None:
    """The check of test_unscaled_softmax_saturates_as_dk_grows."""
    scaled, unscaled = flat_rows(variant)
    failures = saturation_failures(scaled, unscaled)
    if failures:
        Trial(variant, flat_problem(variant, FLAT_GRID[-1], False)).fail(
            "without the scale the softmax does not saturate as d_k grows", details=tuple(failures))
    exact = {d: _formula_rows(p, None) for d, p in _coupled_oracle_problems().items()}
    assert saturation_failures(exact, exact), "no power: the saturation check accepts scores that ignore scale=1"


@checks("unscaled-softmax-saturates", subject=ORACLE)
def test_score_spread_grows_with_dk_unless_scaled():
    """The scores behind the saturation, as the oracle computes them (Gaussian q, k): with scale = 1 their variance
    is d_k, so their spread grows as sqrt(d_k); the default 1/sqrt(d_k) keeps variance 1 (score_spread)."""
    samples, failures = score_spread()
    assert not failures, "; ".join(failures)
    assert unit_normal_variance_pvalue(samples[f"d_k={FLAT_GRID[-1]}, unscaled"]) < ALPHA, \
        "no power: the test cannot tell variance d_k from 1"
    exhibit("scores-vs-dk", "histograms", {"x_label": "score", "samples": samples},
            caption="Scores of Gaussian q, k: q.k spreads as sqrt(d_k) (the softmax saturates), "
                    "q.k / sqrt(d_k) keeps unit variance at every d_k.")


@checks("explicit-softmax-scale")
@pytest.mark.requires("scale")
@given(data=st.data())
def test_explicit_scale_replaces_default(variant, data):
    problem = data.draw(problems_for(variant, scale=False), label="problem")
    scale = data.draw(st.one_of(st.just(1.0), st.sampled_from(SCALES), st.floats(1e-3, 10.0)), label="scale")
    check_against_oracle(variant, problem.derive(with_keywords, scale=scale))
