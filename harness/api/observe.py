"""Seeing an implementation's attention weights through its output.

CONTRACT 1 implementations return only the output. Called with one-hot values
(V = I, specs.problems.one_hot_values) their output *is* the weight matrix, so
every implementation exposes its weights the same way, torch or CUDA alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.api.trial import Trial
from specs.problems import Problem
from specs.reference import AttentionResult
from specs.tolerance import Allowance
from specs.validation import AttentionInputError


@dataclass(frozen=True)
class ObservedWeights:
    weights: np.ndarray  # (batch, heads, n_q, n_k) as the implementation computed them
    allowance: Allowance  # allowed |weights - oracle weights|
    oracle: AttentionResult
    problem: Problem  # the problem with one-hot values


def one_hot_problem(trial: Trial, problem: Problem) -> Problem:
    """The problem with one-hot values. An implementation without value_dim takes d_v = d: where d < n_k, q and k
    get zero columns up to d = n_k (a zero column adds nothing to a score) and the scale its value at the original d
    (an implementation without the scale keyword cannot be asked this: the error says so)."""
    capabilities = trial.variant.capabilities
    d = problem.q.shape[-1]
    if capabilities.value_dim or d >= problem.n_k:
        d_v = problem.n_k if capabilities.value_dim else d
        return problem.derive(f"p = p.replace(v=one_hot_values(p.k.shape, {d_v}))")
    if not capabilities.scale and problem.scale is None:
        raise AttentionInputError(f"one-hot values need d_v >= n_k = {problem.n_k}, and d_v = d = {d} here (no "
                                  "value_dim); widening q and k keeps the scores only with a scale keyword")
    scale = d ** -0.5 if problem.scale is None else problem.scale
    widen = f"((0, 0),) * 3 + ((0, {problem.n_k - d}),)"
    return problem.derive(f"p = p.replace(q=np.pad(p.q, {widen}), k=np.pad(p.k, {widen}), scale={scale!r}, "
                          f"v=one_hot_values(p.k.shape[:3] + ({problem.n_k},), {problem.n_k}))")


def observe_weights(trial: Trial, problem: Problem | None = None, **extra) -> ObservedWeights:
    """Call the implementation with one-hot values and read its weights off the output."""
    __tracebackhide__ = True
    observed = one_hot_problem(trial, problem or trial.problem)
    out = trial.call(observed, **extra)
    oracle, allowance = trial.oracle(observed)
    keys = (..., slice(0, observed.n_k))
    return ObservedWeights(out[keys], allowance.take(keys), oracle, observed)
