"""NaN and Inf in the inputs (docs/design.md, CONTRACT 1: NaN where the reference is finite is a failure).

A key a query may not see (causal future, masked, padding; beyond the seeds, outside a window or under a -inf
bias) must not reach its output even when it holds
NaN or Inf: FlashAttention's tests poison padding with NaN for exactly this reason (a mask applied by adding
-inf to a NaN score, or a hidden value multiplied by a zero weight, leaks it). Conversely a NaN a query does
see must reach it: an implementation that drops NaN hides bugs upstream.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, problems_for
from properties.poisons import POISONS, check_visible_nan
from specs.derivations import entries_set, with_random_key_padding
from specs.problems import Problem
from specs.strategies import with_score_mod


def _per_kv_head(seen: np.ndarray, heads_kv: int) -> np.ndarray:
    """(batch, heads, n_k) 'some row of this query head sees key j' -> the same per kv head."""
    b, h, n_k = seen.shape
    return seen.reshape(b, heads_kv, h // heads_kv, n_k).any(axis=2)


def _poison(problem: Problem, allowed: np.ndarray, keys: list[int], poison: float) -> Problem:
    """`poison` in k at `keys` (every batch and kv head), and in v where no query of the kv head sees the key."""
    heads_kv = problem.k.shape[1]
    unseen = ~_per_kv_head(allowed.any(axis=-2), heads_kv)
    chosen = np.zeros(problem.n_k, dtype=bool)
    chosen[keys] = True
    b, g, j = np.nonzero(unseen & chosen)
    return problem.derive(entries_set, "k", (None, None, keys), poison).derive(
        entries_set, "v", (b.tolist(), g.tolist(), j.tolist()), poison)


def _expect_rows_untouched(trial: Trial, poisoned: Problem, rows: np.ndarray, *, what: str) -> None:
    """Rows (batch, heads, n_q) that see no poisoned key are what the implementation gives without the
    poison (its own output: a wrong formula is another claim's failure, not this one's)."""
    assume(rows.any())
    clean, allowance = trial.own_output()
    out = trial.check_output(trial.call_raw(poisoned), poisoned, finite=False)
    got = np.where(rows[..., None], out, clean)
    trial.expect_close(got, clean, allowance, what=what, versus="its output without the poison", problem=poisoned)


@reproducible
def _check_hidden_poison(variant, problem: Problem, keys: list[int], poison: float) -> None:
    trial = Trial(variant, problem)
    allowed = np.broadcast_to(trial.oracle()[0].allowed, problem.q.shape[:3] + (problem.n_k,))
    poisoned = _poison(problem, allowed, keys, poison)
    rows = ~allowed[..., keys].any(axis=-1)
    _expect_rows_untouched(trial, poisoned, rows,
                           what=f"out rows that see none of the keys {keys} holding {poison}")


@checks("hidden-non-finite-never-reaches-output")
@pytest.mark.requires("causal")
@given(data=st.data())
def test_non_finite_causal_future_never_reaches_past_rows(variant, data):
    problem = data.draw(problems_for(variant, causal=True, min_n=2), label="problem")
    cut = data.draw(st.integers(1, problem.n_k - 1), label="first poisoned key")
    poison = data.draw(st.sampled_from(POISONS), label="poison")
    _check_hidden_poison(variant, problem, list(range(cut, problem.n_k)), poison)


@checks("hidden-non-finite-never-reaches-output")
@pytest.mark.requires("mask")
@given(data=st.data())
def test_non_finite_masked_keys_never_reach_rows_that_cannot_see_them(variant, data):
    """Keys hidden by a boolean mask (any layout: a full mask, a query x key mask, key padding) hold NaN/Inf."""
    problem = data.draw(problems_for(variant, masked=True, min_n=2), label="problem")
    allowed = np.broadcast_to(problem.mask, problem.q.shape[:3] + (problem.n_k,))
    hidden_somewhere = np.flatnonzero(~allowed.all(axis=(0, 1, 2)))
    assume(hidden_somewhere.size)
    keys = sorted(set(data.draw(st.lists(st.sampled_from(hidden_somewhere.tolist()), min_size=1, max_size=4),
                                label="poisoned keys")))
    _check_hidden_poison(variant, problem, keys, data.draw(st.sampled_from(POISONS), label="poison"))


@checks("hidden-non-finite-never-reaches-output")
@pytest.mark.parametrize("keyword", [pytest.param(mod, marks=pytest.mark.requires(mod))
                                     for mod in ("window_size", "bias")])
@given(data=st.data())
def test_non_finite_keys_outside_the_window_or_under_a_hidden_bias_never_reach_rows(variant, keyword, data):
    """Beyond the seeds: keys a sliding window or a -inf bias entry hides hold NaN/Inf (a -inf bias added to a
    NaN score is NaN; a weight of 0 times a NaN value is NaN)."""
    base = problems_for(variant, min_n=2, max_n=40)
    problem = data.draw(with_score_mod(base, keyword), label="problem")
    allowed = Trial(variant, problem).oracle()[0].allowed
    assume(allowed is not None)  # a window wider than the sequence, a bias without -inf: nothing is hidden
    hidden_somewhere = np.flatnonzero(~np.broadcast_to(allowed, problem.q.shape[:3] + (problem.n_k,))
                                      .all(axis=(0, 1, 2)))
    assume(hidden_somewhere.size)
    keys = sorted(set(data.draw(st.lists(st.sampled_from(hidden_somewhere.tolist()), min_size=1, max_size=4),
                                label="poisoned keys")))
    _check_hidden_poison(variant, problem, keys, data.draw(st.sampled_from(POISONS), label="poison"))


@checks("visible-nan-propagates", "hidden-non-finite-never-reaches-output")
@given(data=st.data())
def test_visible_nan_reaches_exactly_the_rows_that_see_it(variant, data):
    """NaN in one key (all of its rows' elements turn NaN) or in one value element v_jc (column c of its
    rows turns NaN); every other element is the implementation's own output on the clean problem. With key
    padding (when the implementation takes a mask), rows of a sequence that pads key j see no NaN at all."""
    caps = variant.capabilities
    padded = caps.mask and data.draw(st.booleans(), label="key padding")
    problem = data.draw(problems_for(variant), label="problem")
    if padded:
        problem = problem.derive(with_random_key_padding, problem.recipe.seed, 0.3)  # every row keeps a key
    j = data.draw(st.integers(0, problem.n_k - 1), label="poisoned key")
    in_key = data.draw(st.booleans(), label="NaN in the key (else in one value element)")
    column = None if in_key else data.draw(st.integers(0, problem.v.shape[-1] - 1), label="poisoned value column")
    check_visible_nan(variant, problem, j, column)
