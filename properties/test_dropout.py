"""Dropout on the weights (seed 000 § Fused Attention: Softmax -> Dropout -> MatMul;
§ Flash Attention: flash_attention(q, k, v, dropout_p=0.1, ...))."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from harness.markers import checks
from harness.observe import observe_weights
from harness.trial import Trial
from specs.problems import build
from specs.statistics import ALPHA, binomial_pvalue
from specs.tolerance import dropout_survivor_allowance

DROPOUT_P = 0.1  # the seed's dropout_p
SEED = 40_000


def _seed_generators(seed: int) -> None:
    """Fix every random generator an implementation may draw its dropout mask from."""
    np.random.seed(seed)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


@checks("dropout-on-weights")
@pytest.mark.requires("dropout")
def test_dropout_zeroes_weights_at_rate_p_and_rescales_survivors(variant):
    problem = build(batch=4, heads=2, heads_kv=2, n_q=48, n_k=48, d=8, d_v=8, seed=SEED)
    trial = Trial(variant, problem)
    _seed_generators(SEED)
    observed = observe_weights(trial, dropout_p=DROPOUT_P)
    exact = observed.oracle.weights
    kept = observed.weights != 0
    trial.expect_close(np.where(kept, observed.weights, 0.0), np.where(kept, exact / (1 - DROPOUT_P), 0.0),
                       dropout_survivor_allowance(observed.allowance, exact, DROPOUT_P, variant.dtype),
                       what="surviving weights", versus="p_ij / (1 - p)", problem=observed.problem,
                       call_line=f"out = fn(q, k, v, **p.kwargs(), dropout_p={DROPOUT_P})")
    dropped, total = int((~kept).sum()), kept.size
    p_value = binomial_pvalue(dropped, total, DROPOUT_P)
    if not p_value >= ALPHA:
        trial.fail(f"dropout zeroed {dropped} of {total} weights; p = {DROPOUT_P} expects "
                   f"{DROPOUT_P * total:.0f} (binomial p-value {p_value:.3g} < {ALPHA:g})", observed.problem)
    for wrong in (DROPOUT_P / 2, 2 * DROPOUT_P, 1 - DROPOUT_P):
        assert binomial_pvalue(dropped, total, wrong) < ALPHA, f"no power: the test accepts a rate of {wrong}"
