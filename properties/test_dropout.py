"""Dropout on the weights (seed 000 § Fused Attention: Softmax -> Dropout -> MatMul; § Flash Attention:
flash_attention(q, k, v, dropout_p=0.1, ...)), on every implementation that takes dropout_p.

The mask is read off the implementation itself: called with one-hot values its output is its weight matrix,
dropped weights are exactly 0 (the problems keep every weight far above underflow). An implementation with the
protocol's `dropout_seed` keyword gets the seed; one without has the global generators (NumPy's, torch's,
CuPy's) seeded just before each call, where the call runs (its worker too: harness.engine.call_state). Statistical
checks use exact binomial tests or Hoeffding's bound at ALPHA per test (specs.statistics: the run's false-
alarm rate stays below 1e-6); each states its power on the wrong hypothesis, and
tests/suite_run/test_expectations_caught.py shows wrong implementations failing them.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from harness.api.markers import checks
from harness.api.observe import one_hot_problem
from harness.api.reproducible import reproducible
from harness.api.trial import Trial
from properties.dropout_checks import (
    DROPOUT_P,
    SEED,
    check_dropout_on_weights,
    dropout_call,
    observed_keep,
    one_hot_head_dims,
    pair_families,
)
from specs.derivations import values_of
from specs.dropout_mask import keep_mask
from specs.problems import Problem, build
from specs.statistics import ALPHA, binomial_power, binomial_pvalue
from specs.tolerance import Allowance

REPEATS = 1000  # calls of the per-position and unbiasedness tests


@checks("dropout-on-weights")
@pytest.mark.requires("dropout")
def test_dropout_output_equals_the_oracle_under_the_recovered_mask(variant):
    check_dropout_on_weights(variant)


POSITION_REPEATS = 3600  # seeds of the per-position test: the fewest hundreds with power 0.99 against 1.5p
POSITION_POWER = 0.99


def _position_keeps(trial: Trial, problem: Problem, seeds: range) -> np.ndarray:
    """How often each position was kept over these seeds: one one-hot call per seed, the oracle read once."""
    observed_keep(trial, problem, seeds[0])  # checks that no weight of this problem underflows
    one_hot = one_hot_problem(trial, problem)
    kept = np.zeros(problem.q.shape[:-1] + (problem.n_k,), dtype=np.int64)
    for seed in seeds:
        kept += trial.call(one_hot, **dropout_call(trial.variant, seed))[..., :problem.n_k] != 0
    return kept


@checks("dropout-on-weights")
@pytest.mark.requires("dropout")
def test_dropout_rate_is_p_at_every_position(variant):
    """Over the seeds 0 .. POSITION_REPEATS - 1 each of the 128 (batch, head, row, column) positions is dropped
    Binomial(POSITION_REPEATS, p) times: the smallest two-sided p-value times 128 (Bonferroni) must reach
    ALPHA, so the property is one test at ALPHA in the run's union bound (specs.statistics).

    Power, asserted: 0.992 against a single position dropped at 1.5p (3600 seeds is the fewest hundreds
    reaching 0.99; the former 1000 had 0.04, and passed 1.7p), 1 - 3e-6 against one dropped at 0.5p. Raising
    the level would buy little: the critical count grows like sqrt(log(1 / level)), and even the whole run's
    1e-6 spent here would save only 600 calls, at the price of the union bound.

    The seeds are fixed, so a verdict is reproducible: the masks an implementation draws on these seeds are
    one sample, drawn once, and a correct implementation whose generator is independent of them fails with
    probability at most ALPHA, once and for all, never a run in many. Observed on these seeds, the Bonferroni
    p-value is 1 for specs.dropout_mask (the mask of every dropout_seed record), 0.41 for torch's global
    generator through torch.nn.functional.dropout and 0.039 for NumPy's legacy one: far from ALPHA."""
    check_dropout_rate_is_p_at_every_position(variant)


@reproducible
def check_dropout_rate_is_p_at_every_position(variant) -> None:
    """The check of test_dropout_rate_is_p_at_every_position."""
    problem = build(batch=1, heads=2, heads_kv=2, n_q=8, n_k=8, d=8, d_v=8, seed=SEED + 1)
    trial = Trial(variant, problem)
    dropped = POSITION_REPEATS - _position_keeps(trial, problem, range(POSITION_REPEATS))
    p_values = np.array([binomial_pvalue(int(c), POSITION_REPEATS, DROPOUT_P) for c in dropped.ravel()])
    worst = int(np.argmin(p_values))
    if p_values[worst] * p_values.size < ALPHA:
        where = [int(i) for i in np.unravel_index(worst, dropped.shape)]
        trial.fail(f"position {where} was dropped {int(dropped.ravel()[worst])} times in {POSITION_REPEATS} "
                   f"seeds, expected {DROPOUT_P * POSITION_REPEATS:.0f} (binomial p-value {p_values[worst]:.3g}, "
                   f"times {p_values.size} positions < {ALPHA:g})", problem)
    for wrong in (1.5 * DROPOUT_P, 0.5 * DROPOUT_P):
        power = binomial_power(POSITION_REPEATS, DROPOUT_P, wrong, ALPHA / p_values.size)
        assert power >= POSITION_POWER, f"power {power:.3g} < {POSITION_POWER} against one position at {wrong}"


AGREE = DROPOUT_P**2 + (1 - DROPOUT_P) ** 2  # two independent keeps agree with this probability
RHO = 0.3  # the correlation between the two keeps of a pair that every agreement test detects
AGREE_POWER = 0.99


def agreement_failures(keep: np.ndarray) -> list[str]:
    """Binomial tests of how often the two keeps of each family's pairs agree (AGREE under independence), at
    ALPHA / (number of families) each: Bonferroni, so the property stays one test at ALPHA. Worst first."""
    families = pair_families(keep.shape)
    level = ALPHA / len(families)
    flat = keep.ravel()
    failures = []
    for name, (first, second) in families.items():
        agree = int((flat[first] == flat[second]).sum())
        p_value = binomial_pvalue(agree, first.size, AGREE)
        if p_value < level:
            failures.append((p_value, f"the keeps at {name} agree in {agree} of {first.size} pairs, expected "
                             f"{AGREE * first.size:.0f} (binomial p-value {p_value:.3g} < {level:.3g})"))
    return [message for _, message in sorted(failures, key=lambda failure: failure[0])]


@functools.cache
def weakest_agreement_test(shape: tuple[int, int, int, int]) -> tuple[int, float]:
    """(pairs, power) of the family whose test has the least power against correlation RHO."""
    families = pair_families(shape)
    correlated = AGREE + 2 * DROPOUT_P * (1 - DROPOUT_P) * RHO
    return min(((size, binomial_power(size, AGREE, correlated, ALPHA / len(families)))
                for size in {first.size for first, _ in families.values()}), key=lambda test: test[1])


@checks("dropout-independent")
@pytest.mark.requires("dropout")
def test_dropout_masks_are_independent_across_batches_heads_rows_and_columns(variant):
    """Under independence the keeps of two positions agree with probability p^2 + (1 - p)^2. Each family of
    pair_families (about 100: lags, diagonals, anti-diagonals, random pairs) is a binomial test of that over
    disjoint pairs, at ALPHA / families (Bonferroni: the property is one test at ALPHA in the run's union bound,
    specs.statistics). Power, asserted for every family: 0.99 against a correlation of 0.3 between the paired
    keeps (0.997 over the fewest pairs, 4096), so a mask keyed on i + j, on i - j, or repeating over heads
    (correlation 1) fails. The pairs are disjoint, so each count is exactly binomial: the neighbouring pairs
    this replaces overlapped, and the variance of their counts was 1.7 times the binomial's for an iid mask,
    about 50 times for one keyed on i + j. On SEED the Bonferroni p-value is 1 for specs.dropout_mask and for
    torch's and NumPy's global generators."""
    check_dropout_masks_are_independent_across_batches_heads_rows_and_columns(variant)


@reproducible
def check_dropout_masks_are_independent_across_batches_heads_rows_and_columns(variant) -> None:
    """The check of test_dropout_masks_are_independent_across_batches_heads_rows_and_columns."""
    problem = build(batch=2, heads=4, heads_kv=4, n_q=48, n_k=48, **one_hot_head_dims(variant, 48),
                    seed=SEED + 2)
    trial = Trial(variant, problem)
    keep, observed = observed_keep(trial, problem, SEED)
    families = pair_families(keep.shape)
    failures = agreement_failures(keep)
    if failures:
        shown = "; ".join(failures[:3]) + (f"; and {len(failures) - 3} more" if len(failures) > 3 else "")
        trial.fail(f"{len(failures)} of {len(families)} pair families: {shown}", observed.problem)
    size, power = weakest_agreement_test(keep.shape)
    assert power >= AGREE_POWER, f"power {power:.3g} < {AGREE_POWER} over {size} pairs"


@checks("dropout-seeded")
@pytest.mark.requires("dropout_seed")
def test_the_seed_and_the_position_alone_decide_the_mask(variant):
    """The same seed reproduces the output bit for bit, another seed gives another mask, block sizes change
    nothing, and the mask is specs.dropout_mask's."""
    check_the_seed_and_the_position_alone_decide_the_mask(variant)


@reproducible
def check_the_seed_and_the_position_alone_decide_the_mask(variant) -> None:
    """The check of test_the_seed_and_the_position_alone_decide_the_mask."""
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
    for size in sorted({max(size, variant.capabilities.min_block_size) for size in (1, 7, 64)}) if tiles else ():
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
    """Values 1 + N(0, 1)/2 make the bias of a missing 1/(1 - p) (p |O| ~ 0.1) exceed twice the radius; d_v = d
    for an implementation without value_dim (flash-attn's)."""
    check_dropout_output_is_unbiased(variant)


@reproducible
def check_dropout_output_is_unbiased(variant) -> None:
    """The check of test_dropout_output_is_unbiased."""
    d_v = 4 if variant.capabilities.value_dim else 8
    base = build(batch=1, heads=2, heads_kv=2, n_q=16, n_k=16, d=8, d_v=d_v, seed=SEED + 4)
    problem = base.derive(values_of, "half_plus_one")
    trial = Trial(variant, problem)
    mean = sum(trial.call(problem, **dropout_call(variant, seed)) for seed in range(REPEATS)) / REPEATS
    oracle, allowance = trial.oracle(problem)
    radius = unbiased_radius(oracle.weights, trial.values_per_query_head(problem), REPEATS, mean.size)
    bound = allowance + Allowance(radius, f"Hoeffding radius at ALPHA={ALPHA:g} over {mean.size} elements")
    trial.expect_close(mean, oracle.out, bound, what=f"mean output over {REPEATS} seeds",
                       versus="the output without dropout")
    # power: without the 1/(1 - p) the mean tends to (1 - p) O, beyond the bound by more than the radius again
    # at some element (tests/suite_run/test_expectations_caught.py runs that implementation)
    assert np.any(DROPOUT_P * np.abs(oracle.out) > 2 * radius + allowance.bound), "no power against no rescale"
