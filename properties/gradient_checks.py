"""Gradients against the float64 oracle's backward: the comparison every gradient property makes (the dense, the
modification and the sharded faces' alike), within specs.tolerance.gradient_allowance.

Seed 002 § 3.1.1 (可微性: 保持端到端的梯度传播)."""

from __future__ import annotations

import numpy as np

from harness.api.reproducible import reproducible
from harness.api.trial import Trial
from specs.dropout_mask import keep_mask
from specs.problems import Problem
from specs.tolerance import ToleranceUndefined, gradient_allowance

GRADIENT_DROPOUT_P = 0.2
GRADIENT_SIZES = dict(max_n=48, max_d=32)


MOD_GRADIENT_NAMES = {"bias": "dBias", "sinks": "dSinks"}  # what a failure calls the modification arrays' gradients


def gradient_dropout(seed: int) -> dict:
    """The implementation's dropout keywords at GRADIENT_DROPOUT_P under `seed`."""
    return dict(dropout_p=GRADIENT_DROPOUT_P, dropout_seed=seed)


def _oracle_dropout(problem: Problem, extra: dict) -> dict:
    """The oracle's keywords for the dropout in `extra` (the mask the seed and the position decide; none: {})."""
    if "dropout_seed" not in extra:
        return {}
    seed, p = extra["dropout_seed"], extra["dropout_p"]
    return dict(keep=keep_mask(seed, p, problem.q.shape[:3] + (problem.n_k,)), dropout_p=p)


@reproducible
def check_gradients(trial: Trial, problem: Problem, *, seed: int, extra: dict, wrt: tuple[str, ...] = ()) -> tuple:
    """dQ, dK, dV of the implementation (called with `extra`: block sizes, dropout) on the d_out drawn from `seed`,
    and the gradients of the modification arrays named in `wrt`, against the oracle's; returns the implementation's
    dQ, dK, dV (float64). A failure's repro calls this check again."""
    d_out = trial.cotangent(problem, seed)
    oracle_extra = _oracle_dropout(problem, extra)
    grads = trial.gradients(problem, d_out, wrt=wrt, **extra)
    exact = trial.exact_inputs(problem)
    try:
        oracle = gradient_allowance(*exact, d_out.astype(np.float64), dtype=trial.dtype,
                                    **trial.oracle_kwargs(problem), **oracle_extra)
    except ToleranceUndefined:
        if trial.in_hypothesis:
            from hypothesis import reject

            reject()
        raise
    got = tuple(g.astype(np.float64) for g in grads)
    expected = list(zip(oracle.grads, oracle.allowances, strict=True)) + [oracle.mod_grads[name] for name in wrt]
    names = ("dQ", "dK", "dV", *(MOD_GRADIENT_NAMES[name] for name in wrt))
    for name, g, (exact_grad, allowance) in zip(names, got, expected, strict=True):
        if not np.all(np.isfinite(g)):
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(g))[0])
            trial.fail(f"{name} is {g[bad]} at {list(bad)} where the oracle's backward gives {exact_grad[bad]:.6g} "
                       f"({int((~np.isfinite(g)).sum())} non-finite elements)", problem)
        trial.expect_close(g, exact_grad, allowance, what=name, versus="the float64 oracle's backward",
                           problem=problem)
    return got[:3]
