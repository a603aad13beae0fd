"""Seeing an implementation's attention weights through its output.

CONTRACT 1 implementations return only the output. Called with one-hot values
(V = I, specs.problems.one_hot_values) their output *is* the weight matrix, so
every implementation exposes its weights the same way, torch or CUDA alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.api.trial import Trial
from specs.derivations import one_hot_valued
from specs.problems import Problem
from specs.reference import AttentionResult
from specs.tolerance import Allowance


@dataclass(frozen=True)
class ObservedWeights:
    weights: np.ndarray  # (batch, heads, n_q, n_k) as the implementation computed them
    allowance: Allowance  # allowed |weights - oracle weights|
    oracle: AttentionResult
    problem: Problem  # the problem with one-hot values


def one_hot_problem(trial: Trial, problem: Problem) -> Problem:
    d_v = problem.n_k if trial.variant.capabilities.value_dim else problem.q.shape[-1]
    return problem.derive(one_hot_valued, d_v)


def observe_weights(trial: Trial, problem: Problem | None = None, **extra) -> ObservedWeights:
    """Call the implementation with one-hot values and read its weights off the output."""
    __tracebackhide__ = True
    observed = one_hot_problem(trial, problem or trial.problem)
    out = trial.call(observed, **extra)
    oracle, allowance = trial.oracle(observed)
    keys = (..., slice(0, observed.n_k))
    return ObservedWeights(out[keys], allowance.take(keys), oracle, observed)
