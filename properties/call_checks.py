"""Calls are independent (CONTRACT 1: a call is a function of its inputs): calls on A, B and A again, of one shape,
neither write to their inputs nor carry a state from one call to the next."""

from __future__ import annotations

import numpy as np

from harness.api.assertions import compare
from harness.api.reproducible import reproducible
from harness.api.trial import Trial
from specs.problems import Problem
from specs.tolerance import difference_allowance


def _changed_inputs(trial: Trial, before: list[np.ndarray], after: tuple[np.ndarray, ...]) -> None:
    for name, kept, x in zip("qkv", before, after, strict=True):
        if not np.array_equal(x, kept, equal_nan=True):
            trial.fail(f"the call wrote to its input {name}",
                       details=(f"{int(np.sum(x != kept))} of {x.size} elements of {name} changed",))


@reproducible
def check_calls_on_a_b_a(variant, a: Problem, b: Problem) -> None:
    """Three calls with one shape: values A, then B, then A again. No call writes to its inputs; B's output is not A's
    (where the oracle says they differ beyond both allowances: a cache keyed by shape returns it); where one call is
    within its oracle's allowance, every call is within its own; the second call on A gives what the first gave."""
    outs = []
    for problem in (a, b, a):
        trial = Trial(variant, problem)
        arrays = trial.inputs()
        before = [x.copy() for x in arrays]
        outs.append(trial.check_output(trial.call_on(arrays, problem), problem))
        _changed_inputs(trial, before, arrays)
    trial_a, trial_b = Trial(variant, a), Trial(variant, b)
    (oracle_a, allowance_a), (oracle_b, allowance_b) = trial_a.oracle(), trial_b.oracle()
    distinct = np.abs(oracle_b.out - oracle_a.out) > difference_allowance(allowance_a, allowance_b).bound
    stale = distinct & (outs[1] == outs[0])
    if distinct.any() and stale.sum() == distinct.sum():
        trial_b.fail("the call on new values returned the previous call's output",
                     details=(f"{int(stale.sum())} elements equal the output on {a!r} exactly, where the oracle "
                              "says they differ",))
    calls = [(trial_a, out, oracle_a, allowance_a) if values == "A" else (trial_b, out, oracle_b, allowance_b)
             for values, out in zip("ABA", outs, strict=True)]
    # an implementation off its oracle on every call computes another formula (other claims' failure); one
    # within it on some call computes attention, and then every call must be within its own
    if any(compare(out, oracle.out, allowance).within for _, out, oracle, allowance in calls):
        for position, (trial, out, oracle, allowance) in enumerate(calls):
            trial.expect_close(out, oracle.out, allowance, what=f"out of call {position + 1} on {'ABA'[position]}",
                               versus="its float64 oracle (calls on A, B, A; another was within its own)")
    _, allowance = trial_a.own_output()
    trial_a.expect_close(outs[2], outs[0], allowance, what="out of the second call on the same values",
                         versus="the first call's out")
