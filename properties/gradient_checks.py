"""Gradients against the float64 oracle's backward: the comparison every gradient property makes (the dense, the
modification and the sharded faces' alike), within specs.tolerance.gradient_allowance.

Seed 002 § 3.1.1 (可微性: 保持端到端的梯度传播)."""

from __future__ import annotations

import numpy as np

from harness.api.trial import Trial
from specs.dropout_mask import keep_mask
from specs.problems import Problem
from specs.tolerance import ToleranceUndefined, gradient_allowance

GRADIENT_DROPOUT_P = 0.2
GRADIENT_SIZES = dict(max_n=48, max_d=32)


MOD_GRADIENT_NAMES = {"bias": "dBias", "sinks": "dSinks"}  # what a failure calls the modification arrays' gradients


def _d_out(problem: Problem, seed: int, dtype) -> np.ndarray:
    shape = problem.q.shape[:3] + (problem.v.shape[-1],)
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def gradient_dropout(seed: int) -> dict:
    """The implementation's dropout keywords at GRADIENT_DROPOUT_P under `seed`."""
    return dict(dropout_p=GRADIENT_DROPOUT_P, dropout_seed=seed)


def _oracle_dropout(problem: Problem, extra: dict) -> tuple[dict, str]:
    """The oracle's keywords for the dropout in `extra` (the mask the seed and the position decide), and the same as
    source for the repro (no dropout: nothing)."""
    if "dropout_seed" not in extra:
        return {}, ""
    seed, p = extra["dropout_seed"], extra["dropout_p"]
    keep = keep_mask(seed, p, problem.q.shape[:3] + (problem.n_k,))
    code = f", keep=keep_mask({seed}, {p!r}, q.shape[:3] + (k.shape[2],)), dropout_p={p!r}"
    return dict(keep=keep, dropout_p=p), code


def _gradient_repro(trial: Trial, seed: int, extra: dict, oracle_code: str, wrt: tuple[str, ...] = ()) -> str:
    """The repro's lines after the input is rebuilt: the backward on the same d_out, then the oracle's backward and
    the verdict of each gradient within specs.tolerance.gradient_allowance, as the property compares them."""
    keywords = "".join(f", {key}={value!r}" for key, value in extra.items())
    names = ("dQ", "dK", "dV", *(MOD_GRADIENT_NAMES[name] for name in wrt))
    lines = [
        "from harness.api import backward_of",
        "from specs.dropout_mask import keep_mask",
        "from specs.tolerance import gradient_allowance",
        f"d_out = np.random.default_rng({seed}).standard_normal(q.shape[:3] + (v.shape[-1],))"
        f".astype({str(trial.dtype)!r})",
        f"p = p.handed({trial.variant.dtype!r})",
        f"grads = backward_of(load_impl({trial.variant.impl.target!r}), q, k, v, d_out, **p.kwargs(){keywords}"
        f"{f', wrt={wrt!r}' if wrt else ''})",
        "oracle = gradient_allowance(*(x.astype(float) for x in (q, k, v)), d_out.astype(float), "
        f"dtype={trial.variant.dtype!r}, **p.kwargs(), "
        f"causal_alignment={trial.variant.capabilities.causal_alignment!r}{oracle_code})",
        f"expected = list(zip(oracle.grads, oracle.allowances)) + [oracle.mod_grads[name] for name in {wrt!r}]",
        f"for name, g, (exact, allowed) in zip({names!r}, grads, expected):",
        "    print(verdict(as_float64(g), exact, allowed, what=name, versus=\"the float64 oracle's backward\"))",
    ]
    return "\n".join(lines)


def check_gradients(trial: Trial, problem: Problem, *, seed: int, extra: dict, wrt: tuple[str, ...] = ()) -> tuple:
    """dQ, dK, dV of the implementation (called with `extra`: block sizes, dropout), and the gradients of the
    modification arrays named in `wrt`, against the oracle's; returns the implementation's dQ, dK, dV (float64)."""
    d_out = _d_out(problem, seed, trial.dtype)
    oracle_extra, oracle_code = _oracle_dropout(problem, extra)
    call_line = _gradient_repro(trial, seed, extra, oracle_code, wrt)
    grads = trial.gradients(problem, d_out, wrt=wrt, call_line=call_line, **extra)
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
                       f"({int((~np.isfinite(g)).sum())} non-finite elements)", problem, call_line=call_line)
        trial.expect_close(g, exact_grad, allowance, what=name, versus="the float64 oracle's backward",
                           problem=problem, call_line=call_line)
    return got[:3]
