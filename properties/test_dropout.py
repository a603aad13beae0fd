"""Dropout on the weights (seed 000 § Fused Attention: Softmax -> Dropout -> MatMul; § Flash Attention:
flash_attention(q, k, v, dropout_p=0.1, ...)), on every implementation that takes dropout_p.

The mask is read off the implementation itself: called with one-hot values its output is its weight matrix,
dropped weights are exactly 0 (the problems keep every weight far above underflow). An implementation with the
protocol's `dropout_seed` keyword gets the seed; one without has the global generators (NumPy's, torch's,
CuPy's) seeded just before each call, where the call runs (its worker too: harness.call_state). Statistical
checks use exact binomial tests or Hoeffding's bound at ALPHA per test (specs.statistics: the run's false-
alarm rate stays below 1e-6); each states its power on the wrong hypothesis, and
tests/test_flash_family_catches.py shows wrong implementations failing them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.markers import checks
from harness.observe import observe_weights
from harness.repro import call_line_for
from harness.trial import Trial
from specs.dropout_mask import keep_mask
from specs.problems import Problem, build
from specs.statistics import ALPHA, binomial_pvalue
from specs.tolerance import Allowance, dropout_survivor_allowance, forward_allowance

DROPOUT_P = 0.1  # the seed's dropout_p
SEED = 40_000
REPEATS = 1000  # calls of the per-position and unbiasedness tests


def dropout_call(variant, seed: int, p: float = DROPOUT_P) -> dict:
    """Trial.call's keywords that ask for dropout at rate p with this seed: `dropout_seed`, or the global
    generators seeded where the call runs when the implementation has no such keyword."""
    if variant.capabilities.dropout_seed:
        return {"dropout_p": p, "dropout_seed": seed}
    return {"dropout_p": p, "global_seed": seed}


def observed_keep(trial: Trial, problem: Problem, seed: int, **extra) -> tuple[np.ndarray, object]:
    """The implementation's keep mask for this seed (True = kept), and its observed weights."""
    observed = observe_weights(trial, problem, **dropout_call(trial.variant, seed), **extra)
    if not np.all(observed.oracle.weights > 1e-6):
        raise AssertionError("the dropout problems must keep every weight far from 0, or a dropped weight "
                             "could not be told from an underflowed one")
    return observed.weights != 0, observed


def _binomial_failure(count: int, trials: int, p: float, what: str) -> str | None:
    p_value = binomial_pvalue(count, trials, p)
    if p_value >= ALPHA:
        return None
    return f"{what}: {count} of {trials}, expected {p * trials:.1f} (binomial p-value {p_value:.3g} < {ALPHA:g})"


@checks("dropout-on-weights")
@pytest.mark.requires("dropout")
def test_dropout_output_equals_the_oracle_under_the_recovered_mask(variant):
    """Survivors are p_ij / (1 - p), the drop rate is p, and the output on ordinary values is the oracle's
    (P * keep / (1 - p)) V for the mask the implementation used."""
    problem = build(batch=4, heads=2, heads_kv=2, n_q=48, n_k=48, d=8, d_v=8, seed=SEED)
    trial = Trial(variant, problem)
    keep, observed = observed_keep(trial, problem, SEED)
    exact = observed.oracle.weights
    keywords = dropout_call(variant, SEED)
    seed = keywords.pop("global_seed", None)
    call_line = call_line_for(keywords, global_seed=seed)
    trial.expect_close(np.where(keep, observed.weights, 0.0), np.where(keep, exact / (1 - DROPOUT_P), 0.0),
                       dropout_survivor_allowance(observed.allowance, exact, DROPOUT_P, variant.dtype),
                       what="surviving weights", versus="p_ij / (1 - p)", problem=observed.problem,
                       call_line=call_line)
    failure = _binomial_failure(int((~keep).sum()), keep.size, DROPOUT_P, f"dropout zeroed weights at p = {DROPOUT_P}")
    if failure:
        trial.fail(failure, observed.problem)
    for wrong in (DROPOUT_P / 2, 1.5 * DROPOUT_P, 1 - DROPOUT_P):
        assert binomial_pvalue(int((~keep).sum()), keep.size, wrong) < ALPHA, f"no power against rate {wrong}"
    out = trial.call(problem, **dropout_call(variant, SEED))
    oracle, allowance = forward_allowance(*trial.exact_inputs(problem), dtype=variant.dtype,
                                          **trial.oracle_kwargs(problem), keep=keep, dropout_p=DROPOUT_P)
    trial.expect_close(out, oracle.out, allowance, versus="the oracle's (P * keep / (1 - p)) V under the mask "
                       "recovered from the one-hot call", call_line=call_line)


@checks("dropout-on-weights")
@pytest.mark.requires("dropout")
def test_dropout_rate_is_p_at_every_position(variant):
    """Over REPEATS seeds each (batch, head, row, column) is dropped Binomial(REPEATS, p) times: the smallest
    two-sided p-value of the 128 positions, times 128 (Bonferroni), must reach ALPHA. Power: a position
    dropped at 2p (200 of 1000 against 100) has p-value below 1e-20."""
    problem = build(batch=1, heads=2, heads_kv=2, n_q=8, n_k=8, d=8, d_v=8, seed=SEED + 1)
    trial = Trial(variant, problem)
    dropped = sum((~observed_keep(trial, problem, seed)[0]).astype(np.int64) for seed in range(REPEATS))
    p_values = np.array([binomial_pvalue(int(c), REPEATS, DROPOUT_P) for c in dropped.ravel()])
    worst = int(np.argmin(p_values))
    if p_values[worst] * p_values.size < ALPHA:
        where = [int(i) for i in np.unravel_index(worst, dropped.shape)]
        trial.fail(f"position {where} was dropped {int(dropped.ravel()[worst])} times in {REPEATS} seeds, "
                   f"expected {DROPOUT_P * REPEATS:.0f} (binomial p-value {p_values[worst]:.3g}, times "
                   f"{p_values.size} positions < {ALPHA:g})", problem)
    assert binomial_pvalue(2 * int(DROPOUT_P * REPEATS), REPEATS, DROPOUT_P) * p_values.size < ALPHA


def _agreement_failures(keep: np.ndarray) -> list[str]:
    """Binomial tests of how often the masks of neighbouring batches, heads, rows and columns agree: under
    independence each pair agrees with probability p^2 + (1 - p)^2."""
    agree_p = DROPOUT_P**2 + (1 - DROPOUT_P) ** 2
    failures = []
    for axis, name in enumerate(("batches", "heads", "rows", "columns")):
        first = np.take(keep, np.arange(keep.shape[axis] - 1), axis=axis)
        second = np.take(keep, np.arange(1, keep.shape[axis]), axis=axis)
        failure = _binomial_failure(int((first == second).sum()), first.size, agree_p,
                                    f"the masks of neighbouring {name} agree")
        if failure:
            failures.append(failure)
    return failures


@checks("dropout-independent")
@pytest.mark.requires("dropout")
def test_dropout_masks_are_independent_across_batches_heads_rows_and_columns(variant):
    problem = build(batch=2, heads=4, heads_kv=4, n_q=48, n_k=48, d=8, d_v=8, seed=SEED + 2)
    trial = Trial(variant, problem)
    keep, observed = observed_keep(trial, problem, SEED)
    failures = _agreement_failures(keep)
    if failures:
        trial.fail("; ".join(failures), observed.problem)
    assert _agreement_failures(np.broadcast_to(keep[:, :1], keep.shape)), "no power: a mask shared by every head"


@checks("dropout-seeded")
@pytest.mark.requires("dropout_seed")
def test_the_seed_and_the_position_alone_decide_the_mask(variant):
    """The same seed reproduces the output bit for bit, another seed gives another mask, block sizes change
    nothing, and the mask is specs.dropout_mask's."""
    problem = build(batch=2, heads=2, heads_kv=1, n_q=33, n_k=40, d=8, d_v=8, seed=SEED + 3)
    trial = Trial(variant, problem)
    call = dropout_call(variant, SEED)
    first, again = trial.call_raw(problem, **call), trial.call_raw(problem, **call)
    first, again = (trial.check_output(x, problem) for x in (first, again))
    if not np.array_equal(first, again):
        trial.fail(f"two calls with dropout_seed={SEED} differ (largest difference "
                   f"{float(np.abs(first - again).max()):.3g})", problem)
    keep, observed = observed_keep(trial, problem, SEED)
    expected = keep_mask(SEED, DROPOUT_P, keep.shape)
    if not np.array_equal(keep, expected):
        trial.fail(f"the mask differs from specs.dropout_mask.keep_mask({SEED}, {DROPOUT_P}, ...) at "
                   f"{int((keep != expected).sum())} of {keep.size} positions", observed.problem)
    other, _ = observed_keep(trial, problem, SEED + 1)
    if np.array_equal(keep, other):
        trial.fail(f"dropout_seed={SEED} and {SEED + 1} give the same mask", observed.problem)
    tiles = variant.capabilities.tile_keywords
    for size in (1, 7, 64) if tiles else ():
        blocked, _ = observed_keep(trial, problem, SEED, **{keyword: size for keyword in tiles})
        if not np.array_equal(blocked, keep):
            trial.fail(f"with blocks of {size} the mask differs at {int((blocked != keep).sum())} positions",
                       observed.problem)


def unbiased_radius(weights: np.ndarray, v_all: np.ndarray, repeats: int, elements: int) -> np.ndarray:
    """Hoeffding: the mean over `repeats` seeds of out_ic = sum_j P_ij v_jc z_ij / (1 - p) is a sum of
    repeats * n_k independent terms, each in an interval of width |P_ij v_jc| / (repeats (1 - p)); it stays
    within t_ic of its expectation P V except with probability ALPHA / elements."""
    widths = (weights**2) @ (v_all**2) / (repeats * (1 - DROPOUT_P) ** 2)
    return np.sqrt(math.log(2 * elements / ALPHA) / 2 * widths)


@checks("dropout-unbiased")
@pytest.mark.requires("dropout")
def test_dropout_output_is_unbiased(variant):
    """Values 1 + N(0, 1)/2 make the bias of a missing 1/(1 - p) (p |O| ~ 0.1) exceed twice the radius."""
    base = build(batch=1, heads=2, heads_kv=2, n_q=16, n_k=16, d=8, d_v=4, seed=SEED + 4)
    problem = base.derive("p = p.replace(v=1 + p.v / 2)")
    trial = Trial(variant, problem)
    mean = sum(trial.call(problem, **dropout_call(variant, seed)) for seed in range(REPEATS)) / REPEATS
    oracle, allowance = trial.oracle(problem)
    radius = unbiased_radius(oracle.weights, trial.values_per_query_head(problem), REPEATS, mean.size)
    bound = allowance + Allowance(radius, f"Hoeffding radius at ALPHA={ALPHA:g} over {mean.size} elements")
    trial.expect_close(mean, oracle.out, bound, what=f"mean output over {REPEATS} seeds",
                       versus="the output without dropout")
    # power: without the 1/(1 - p) the mean tends to (1 - p) O, beyond the bound by more than the radius again
    # at some element (tests/test_flash_family_catches.py runs that implementation)
    assert np.any(DROPOUT_P * np.abs(oracle.out) > 2 * radius + allowance.bound), "no power against no rescale"
