"""NaN and Inf in keys and values no query may see, for the backward (properties/test_poisoning.py's rule).

A key that no query row of its head may see (padding, a column the mask hides from every row, a key past
every row's causal horizon) takes no part in the attention, so it takes no part in its gradients either:
holding NaN or Inf, it must leave every dQ, dK, dV as it is without the poison, and its own dK and dV are
exactly 0. A backward that multiplies it by a zero weight (0 * NaN in dS K for dQ, in P^T dO or dS^T Q for
dK and dV) instead of leaving it out leaks it, as the forward's P V does (docs/design.md, CONTRACT 1; FlashAttention
poisons padding with NaN in its tests for this reason).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, problems_for
from properties.gradient_checks import GRADIENT_SIZES
from properties.poisons import POISONS
from specs.derivations import entries_set, with_mask_entries
from specs.problems import Problem
from specs.tolerance import ToleranceUndefined, difference_allowance, gradient_allowance

CLAIM = "hidden-non-finite-never-reaches-gradients"


def _unseen_keys(trial: Trial, problem: Problem) -> np.ndarray:
    """(batch, heads_kv, n_k): no query row of any query head of the kv head may see the key."""
    allowed = np.broadcast_to(trial.oracle(problem)[0].allowed, problem.q.shape[:3] + (problem.n_k,))
    b, h, _, n_k = allowed.shape
    heads_kv = problem.k.shape[1]
    return ~allowed.any(axis=-2).reshape(b, heads_kv, h // heads_kv, n_k).any(axis=2)


def _gradients(trial: Trial, problem: Problem, d_out: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(g.astype(np.float64) for g in trial.gradients(problem, d_out))


@reproducible
def check_unseen_poison(variant, problem: Problem, poison: float) -> None:
    """`poison` in k and v at every key no query of its kv head sees: the gradients are the implementation's own
    gradients without it (within twice the gradient allowance: two results of one exact value), and the
    poisoned keys' dK and dV are exactly 0."""
    trial = Trial(variant, problem)
    unseen = _unseen_keys(trial, problem)
    assume(unseen.any())
    at = tuple(i.tolist() for i in np.nonzero(unseen))  # (batch, kv head, key) indices
    poisoned = problem.derive(entries_set, "kv", at, poison)
    seed = problem.recipe.seed
    d_out = trial.cotangent(problem, seed)
    try:
        oracle = gradient_allowance(*trial.exact_inputs(problem), d_out.astype(np.float64), dtype=trial.dtype,
                                    **trial.oracle_kwargs(problem))
    except ToleranceUndefined:
        assume(False)
    clean = _gradients(trial, problem, d_out)
    got = _gradients(trial, poisoned, d_out)
    where = f"{len(at[0])} (batch, kv head, key) positions that no query sees hold {poison}"
    for name, grad, own, allowance in zip(("dQ", "dK", "dV"), got, clean, oracle.allowances, strict=True):
        if not np.all(np.isfinite(grad)):
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(grad))[0])
            trial.fail(f"{name} holds {grad[bad]} at {list(bad)} where it is {own[bad]:.6g} without the poison "
                       f"({int((~np.isfinite(grad)).sum())} non-finite elements): {where}", poisoned)
        if name != "dQ":
            hidden = grad[at]  # (positions, dim)
            if np.any(hidden != 0):
                row = int(np.argwhere(hidden != 0)[0][0])
                trial.fail(f"{name} of the unseen key {at[2][row]} (batch {at[0][row]}, kv head {at[1][row]}) is "
                           f"not exactly 0: largest |{name}| {float(np.abs(hidden[row]).max()):.3g}; {where}",
                           poisoned)
        trial.expect_close(grad, own, difference_allowance(allowance, allowance), what=f"{name} where {where}",
                           versus="its gradients without the poison", problem=poisoned)


@checks(CLAIM)
@pytest.mark.requires("gradients", "mask")
@given(data=st.data())
def test_non_finite_keys_no_row_sees_never_reach_gradients(variant, data):
    """A mask in any layout, with 1 to 3 drawn keys hidden from every row (a column of padding)."""
    problem = data.draw(problems_for(variant, masked=True, min_n=2, **GRADIENT_SIZES), label="problem")
    keys = sorted(set(data.draw(st.lists(st.integers(0, problem.n_k - 1), min_size=1, max_size=3),
                                label="keys no row sees")))
    problem = problem.derive(with_mask_entries, (None, None, None, keys), False)
    check_unseen_poison(variant, problem, data.draw(st.sampled_from(POISONS), label="poison"))


@checks(CLAIM)
@pytest.mark.requires("gradients", "causal", "cross")
@given(data=st.data())
def test_non_finite_keys_past_every_causal_horizon_never_reach_gradients(variant, data):
    """Top-left causal with n_k > n_q: the keys past n_q - 1 are in every row's future."""
    if variant.capabilities.causal_alignment != "top_left":
        pytest.skip("bottom-right causal with n_q <= n_k hides no key from every row (the last row sees them all)")
    problem = data.draw(problems_for(variant, causal=True, min_n=2, different_lengths=True,
                                     keys_cover_queries=True, **GRADIENT_SIZES), label="problem")
    check_unseen_poison(variant, problem, data.draw(st.sampled_from(POISONS), label="poison"))
