"""The scaling and position readings: the seed's false sentence (rope-before-projections) is refuted on every
implementation of tests/fixtures/readings_scale_impls.py (in the run that shows them meeting their rows:
tests/suite_run/test_expectations_caught.py, group "readings-scale"), and the readings' allowances (specs.tolerance)
hold and are not vacuous."""

from __future__ import annotations

import numpy as np
import pytest

from specs.positional import rotary_embedding
from specs.reference import attention
from specs.tolerance import (
    Allowance,
    jacobian_norm_allowance,
    rotated_inputs_allowance,
    row_entropy_allowance,
    unit_roundoff,
)
from tests.fixtures.expectation_groups import GROUPS, group_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return group_run("readings-scale", tmp_path_factory)


def test_the_false_sentence_is_refuted_on_every_implementation(run):
    verdicts = [v for v in run.report["verdicts"] if v["claim"] == "rope-before-projections"]
    assert len(verdicts) == len(GROUPS["readings-scale"].targets)
    assert all(v["status"] == "fail" and v["declared"] for v in verdicts if not v["impl"].startswith(
        "wrong-mean-of-values")), [(v["impl"], v["detail"][:200]) for v in verdicts]


def _simplex(rng, rows: int, n: int, spread: float) -> np.ndarray:
    s = spread * rng.standard_normal((rows, n))
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


def _entropy(p):
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1, keepdims=True)


def _jacobian(p):
    return np.linalg.norm(p[..., :, None] * (np.eye(p.shape[-1]) - p[..., None, :]), axis=(-2, -1))[..., None]


@pytest.mark.parametrize("relative", [1e-12, 1e-3, 0.05])
def test_entropy_and_jacobian_allowances_hold_and_are_not_vacuous(relative):
    """Weights moved anywhere within a = relative * p + 1e-6 relative (corners, where the change is largest):
    H and J move by at most their allowances, and by at least a tenth of them somewhere."""
    rng = np.random.default_rng(7)
    p = _simplex(rng, 4000, 4, 4.0)
    a = relative * (p + 1e-6)
    allowance = Allowance(a, "test")
    h_bound = row_entropy_allowance(p, allowance).bound
    j_bound = jacobian_norm_allowance(p, allowance).bound
    worst_h, worst_j = np.zeros_like(h_bound), np.zeros_like(j_bound)
    for _ in range(16):
        w = np.clip(p + a * rng.choice([-1.0, 1.0], size=p.shape), 0.0, 1.0)
        worst_h = np.maximum(worst_h, np.abs(_entropy(w) - _entropy(p)))
        worst_j = np.maximum(worst_j, np.abs(_jacobian(w) - _jacobian(p)))
        assert np.all(worst_h <= h_bound) and np.all(worst_j <= j_bound)
    if relative > 1e-9:
        assert np.max(worst_h / h_bound) > 0.1 and np.max(worst_j / j_bound) > 0.1


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_rotated_inputs_allowance_covers_rounding_and_not_a_shift(dtype):
    """RoPE at positions 0..7 and, composed, at + 1000: the oracles on the cast inputs differ by less than the two
    allowances; the seed's placement (RoPE before W_Q, W_K) exceeds them."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 1, 8, 8)) for _ in range(3))
    positions = np.arange(8)

    def oracle(q_, k_):
        cast = tuple(x.astype(dtype).astype(np.float64) for x in (q_, k_, v))
        return attention(*cast).out

    def bound(q_, k_):
        return rotated_inputs_allowance(q_, k_, v, dtype=dtype, max_position=1008).bound

    first = (rotary_embedding(q, positions), rotary_embedding(k, positions))
    shifted = tuple(rotary_embedding(x, np.full(8, 1000)) for x in first)
    gap = np.abs(oracle(*first) - oracle(*shifted))
    allowed = bound(*first) + bound(*shifted)
    assert np.all(gap <= allowed)
    # not vacuous: linear in the cast's u and the rotations' 1008 u64, with a constant of the order of |q| |k|
    assert np.max(allowed) < 400 * (unit_roundoff(dtype) + 1008 * unit_roundoff("float64"))
    w = rng.standard_normal((2, 8, 8)) / np.sqrt(8)
    seed_first = tuple(rotary_embedding(q, p_) @ w[i] for i, p_ in enumerate((positions, positions)))
    seed_shifted = tuple(rotary_embedding(q, positions + 1000) @ w[i] for i in range(2))
    assert np.any(np.abs(oracle(*seed_first) - oracle(*seed_shifted)) > bound(*seed_first) + bound(*seed_shifted))
