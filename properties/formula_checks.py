"""The formula's checks that tests reuse: seed 003 § 2- qk点乘's own key left out (q1 against x2, x3, x4 only),
seed 001's 四不像 similarities as a distribution, and values of another length refused (seed 001's multi-head
pseudo-code asserts k_len == v_len)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from harness.api.observe import ObservedWeights
from harness.api.trial import Trial
from specs.derivations import values_resized
from specs.problems import Problem


def expect_own_key_ignored(trial: Trial, observed: ObservedWeights) -> None:
    """Seed 003 literally: q1 is dotted with the keys of x2, x3, x4 only, so a token's own key gets weight 0."""
    own = np.diagonal(observed.weights, axis1=-2, axis2=-1)
    bound = np.diagonal(observed.allowance.bound, axis1=-2, axis2=-1)
    if np.any(own > bound):
        where = np.unravel_index(int(np.argmax(own - bound)), own.shape)
        i = where[-1]
        trial.fail(f"x{i + 1}'s own key gets weight {own[where]:.3g} (allowed 0 +- {bound[where]:.3g}): "
                   f"q{i + 1} is dotted with k{i + 1} too, not only with the other tokens' keys", observed.problem)


def expect_distribution(similarities: dict[str, Fraction]) -> None:
    """Seed 001's similarities (四不像 against each animal) are a probability distribution, exactly."""
    assert similarities, "the sentence states no similarities"
    negative = {animal: w for animal, w in similarities.items() if w < 0}
    assert not negative, f"negative similarities {negative} cannot be probabilities"
    total = sum(similarities.values())
    assert total == 1, f"the similarities {[str(w) for w in similarities.values()]} sum to {total}, not 1"


def mismatched_values(problem: Problem) -> list[Problem]:
    """The problem with one value more than there are keys and, when n_k > 1, one fewer."""
    more = problem.derive(values_resized, 1)
    fewer = problem.derive(values_resized, -1)
    return [more, fewer] if problem.n_k > 1 else [more]


def expect_rejected(trial: Trial, problem: Problem) -> None:
    """The implementation raises on `problem`, keys and values of different lengths."""
    trial.expect_raised(problem, f"k with n_k={problem.n_k} keys and v with {problem.v.shape[2]} values")
