"""Gradients of every implementation that gives them (Capabilities.gradients: torch autograd or a declared
backward) against the float64 oracle's backward (specs.gradients), within specs.tolerance.gradient_allowance.

Seed 002 § 3.1.1 (可微性: 保持端到端的梯度传播); seed 000 § Flash Attention (the backward recomputes the
weights block by block: for any block sizes it must equal the global gradients).

Hypothesis draws stay small (n <= 48, d <= 32); the fixed gradient regimes (specs.regimes) reach where backward
kernels switch paths: a second key block (n = 513, 1025), d = 64 and 128, GQA groups of 4 and 8, causal with
n_q != n_k in the declared alignment, an explicit scale, dropout, the implementation's own block sizes. The
long ones (n >= 1025) run with --impl and in `tox -e long`.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.regime_cases import LONG_MARKER, cases, skip_unless_fits
from harness.api.trial import Trial, problems_for
from properties.block_sizes import default_block_sizes
from properties.gradient_checks import GRADIENT_SIZES, check_gradients, gradient_dropout
from specs import regimes
from specs.derivations import with_mask_entries
from specs.problems import Problem, build

LONGEST_BLOCK_CASE = 4097  # lengths around default block sizes past this are skipped, with the reason


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients")
@given(data=st.data())
def test_gradients_match_the_oracle_backward(variant, data):
    """dQ, dK, dV for drawn shapes, scales, masks or causal, block sizes (the tiled backward must equal the
    global gradients for any blocks) and, where the implementation takes dropout_seed, dropout."""
    caps = variant.capabilities
    blocks = {keyword: data.draw(st.integers(caps.min_block_size, 70), label=keyword) for keyword in caps.tile_keywords}
    causal = caps.causal and data.draw(st.booleans(), label="causal")
    masked = caps.mask and not causal and data.draw(st.booleans(), label="masked")
    problem = data.draw(problems_for(variant, causal=causal, masked=masked, **GRADIENT_SIZES), label="problem")
    extra = dict(blocks)
    if caps.dropout_seed and data.draw(st.booleans(), label="dropout"):
        extra.update(gradient_dropout(data.draw(st.integers(0, 2**32 - 1), label="dropout_seed")))
    check_gradients(Trial(variant, problem), problem, seed=problem.recipe.seed, extra=extra)


@checks("fully-masked-rows-zero-gradients")
@pytest.mark.requires("gradients", "mask")
@given(data=st.data())
def test_fully_masked_rows_have_zero_gradients(variant, data):
    """A query row that sees no key has output 0 whatever q is: its dQ row is exactly 0 (never NaN), and no
    other gradient turns NaN."""
    problem = data.draw(problems_for(variant, masked=True, min_n=2, **GRADIENT_SIZES), label="problem")
    row = data.draw(st.integers(0, problem.n_q - 1), label="fully masked row")
    check_fully_masked_rows(variant, problem, [row])


def check_fully_masked_rows(variant, problem: Problem, rows: list[int]) -> None:
    """Hide every key from `rows` (the row after each keeps key 0) and check the gradients, then that the dQ
    rows of those rows are exactly 0."""
    keep = sorted({(row + 1) % problem.n_q for row in rows} - set(rows))
    problem = problem.derive(with_mask_entries, (None, None, rows), False).derive(
        with_mask_entries, (None, None, keep, 0), True)
    trial = Trial(variant, problem)
    d_q, _, _ = check_gradients(trial, problem, seed=problem.recipe.seed, extra={})
    for row in rows:
        if np.any(d_q[:, :, row] != 0):
            trial.fail(f"dQ of the fully masked row {row} is not exactly 0: largest |dQ| "
                       f"{float(np.abs(d_q[:, :, row]).max()):.3g}", problem)


def _check_regime(variant, regime: regimes.Regime, *, dropout: bool = False) -> None:
    problem = skip_unless_fits(variant, regime)
    extra = gradient_dropout(regime.recipe["seed"]) if dropout else {}
    check_gradients(Trial(variant, problem), problem, seed=problem.recipe.seed, extra=extra)


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients")
@pytest.mark.parametrize("regime", cases(r for r in regimes.GRADIENTS if not r.long))
def test_gradients_at_length_match_the_oracle_backward(variant, regime):
    """A second key block (n = 513), d = 128, dK and dV summed over GQA groups of 4 and 8, an explicit scale
    (a regime the implementation cannot take is skipped with the reason)."""
    _check_regime(variant, regime)


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients")
@pytest.mark.parametrize("regime", cases(r for r in regimes.GRADIENTS if r.long))
def test_long_gradients_match_the_oracle_backward(variant, regime):
    """The same at n = 1025 (long regimes: `tox -e long`, and under --impl), so that a finding only there is
    declared on this property alone."""
    _check_regime(variant, regime)


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients", "causal")
@pytest.mark.parametrize("regime", cases(regimes.GRADIENT_CAUSAL))
def test_causal_gradients_at_length_in_the_declared_alignment(variant, regime):
    """n_q != n_k, so that the alignment matters: top-left hides the keys past n_q from every row, bottom-right
    leaves the first n_q - n_k rows without a key (their dQ is 0)."""
    _check_regime(variant, regime)


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients", "dropout_seed")
@pytest.mark.parametrize("regime", cases(regimes.GRADIENT_DROPOUT))
def test_gradients_with_dropout_at_length(variant, regime):
    """Dropout at p = GRADIENT_DROPOUT_P under the regime's seed, the oracle under the same mask."""
    _check_regime(variant, regime, dropout=True)


@checks("fully-masked-rows-zero-gradients")
@pytest.mark.requires("gradients", "mask")
@pytest.mark.parametrize("regime", cases(regimes.GRADIENT_MASKED))
def test_fully_masked_rows_at_length_have_zero_gradients(variant, regime):
    """The first and last rows and rows 255 and 256 (either side of a 256-row block) see no key."""
    problem = skip_unless_fits(variant, regime)
    check_fully_masked_rows(variant, problem, sorted({0, 255, 256, problem.n_q - 1} & set(range(problem.n_q))))


@checks("differentiable-end-to-end")
@pytest.mark.requires("gradients", "tile_keywords")
@pytest.mark.parametrize("multiple", [pytest.param(1, id="one block +- 1"),
                                      pytest.param(2, id="two blocks +- 1", marks=getattr(pytest.mark, LONG_MARKER))])
def test_gradients_at_default_block_sizes(variant, multiple):
    """The implementation's own block sizes (its keywords' defaults, the path a caller who passes none takes):
    n one past `multiple` times the largest, and causal one short of it."""
    blocks = default_block_sizes(variant)
    if not blocks:
        pytest.skip("the block-size keywords have no integer defaults")
    n = multiple * max(blocks.values())
    if n + 1 > LONGEST_BLOCK_CASE:
        pytest.skip(f"{multiple} x the default block {max(blocks.values())} + 1 is past {LONGEST_BLOCK_CASE}")
    for length, causal in ((n + 1, False), (n - 1, variant.capabilities.causal)):
        if length >= 1:
            problem = build(n_q=length, n_k=length, d=64, d_v=64, seed=length, causal=causal)
            check_gradients(Trial(variant, problem), problem, seed=length, extra={})
