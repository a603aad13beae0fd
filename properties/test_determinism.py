"""A call is a function of its inputs (CONTRACT 1): repeated calls return bitwise equal outputs, without
dropout and, where the implementation takes dropout_seed, with the same seed; and so do repeated backward
calls, where the implementation has gradients (harness.engine.backward). Beside the small draws, one long case
(n >= 1025 keys, the implementation's default blocks: the length where kernels split the keys over blocks
or threads and a nondeterministic reduction order shows) runs with the long regimes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.regime_cases import cases, skip_unless_fits
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, problems_for
from specs import regimes
from specs.problems import Problem

SMALL = dict(max_n=40, max_d=32)
# the first long sequence regime: n = 1025 keys, one past a power of two, so the last block of any
# power-of-two block size holds one key
LONG = next(r for r in regimes.SEQUENCE_LENGTHS if r.long)


def _expect_bitwise(trial: Trial, problem: Problem, what: str, first: np.ndarray, second: np.ndarray, *,
                    extra: dict) -> None:
    """Fail naming the first element where two results of one call differ (NaN equals NaN)."""
    same = (first == second) | (np.isnan(first) & np.isnan(second))
    if not same.all():
        where = tuple(int(i) for i in np.argwhere(~same)[0])
        trial.fail(f"two calls on the same inputs{' and seed' if extra else ''} differ at {what}{list(where)}: "
                   f"{first[where]!r} then {second[where]!r} ({int((~same).sum())} elements differ)", problem)


@reproducible
def check_repeated_forward(trial: Trial, problem: Problem, extra: dict) -> None:
    """Two calls on the same inputs (and `extra`: a dropout seed) return bitwise equal outputs."""
    first, second = (trial.check_output(trial.call_raw(problem, **extra), problem, finite=False)
                     for _ in range(2))
    _expect_bitwise(trial, problem, "out", first, second, extra=extra)


@reproducible
def check_repeated_backward(trial: Trial, problem: Problem, extra: dict) -> None:
    """dQ, dK, dV of two backward calls with one d_out (seeded by the problem) are bitwise equal."""
    d_out = trial.cotangent(problem, problem.recipe.seed)
    first, second = (trial.gradients(problem, d_out, **extra) for _ in range(2))
    for name, a, b in zip(("dQ", "dK", "dV"), first, second, strict=True):
        _expect_bitwise(trial, problem, name, a.astype(np.float64), b.astype(np.float64), extra=extra)


def _dropout(variant, data) -> dict:
    if variant.capabilities.dropout_seed and data.draw(st.booleans(), label="dropout"):
        return dict(dropout_p=0.3, dropout_seed=data.draw(st.integers(0, 2**32 - 1), label="dropout_seed"))
    return {}


@checks("deterministic")
@given(data=st.data())
def test_repeated_calls_are_bitwise_equal(variant, data):
    problem = data.draw(problems_for(variant, **SMALL), label="problem")
    check_repeated_forward(Trial(variant, problem), problem, _dropout(variant, data))


@checks("deterministic")
@pytest.mark.requires("gradients")
@given(data=st.data())
def test_repeated_backward_calls_are_bitwise_equal(variant, data):
    """dQ, dK, dV of two backward calls on the same inputs, d_out (and seed) are bitwise equal: a backward
    that accumulates dK or dQ in an order that changes from call to call (atomics) fails."""
    problem = data.draw(problems_for(variant, **SMALL), label="problem")
    check_repeated_backward(Trial(variant, problem), problem, _dropout(variant, data))


@checks("deterministic")
@pytest.mark.parametrize("regime", cases([LONG]))
def test_repeated_calls_at_length_are_bitwise_equal(variant, regime):
    """At n = 1025 with no block keyword (the implementation's default blocks), two forward calls, and two
    backward calls where there are gradients, are bitwise equal."""
    problem = skip_unless_fits(variant, regime)
    trial = Trial(variant, problem)
    check_repeated_forward(trial, problem, {})
    if variant.capabilities.gradients:
        check_repeated_backward(trial, problem, {})
