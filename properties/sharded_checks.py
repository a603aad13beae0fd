"""What the sharded properties share beyond the dense ones: the merge-order comparison of a ring (claim
ring-merge-order-free), one function that the property and its reproduction snippet both call."""

from __future__ import annotations

import numpy as np

from harness.api.trial import Trial
from protocol.registry import Variant
from specs.derivations import positions_taken, spans_taken
from specs.problems import Problem
from specs.sharding import chunks, shards_exchanged
from specs.tolerance import Allowance, merge_order_allowance


def cut_to_equal_shards(problem: Problem, world: int, layout: str, *, queries: bool) -> Problem:
    """`problem` with its keys (and, with `queries`, its queries) cut to the longest length the layout splits into
    equal shards on `world` ranks (at least one chunk each: the problem must be that long)."""
    pieces = chunks(0, world, layout)
    n_q = problem.n_q - problem.n_q % pieces if queries else problem.n_q
    n_k = problem.n_k - problem.n_k % pieces
    if (n_q, n_k) == (problem.n_q, problem.n_k):
        return problem
    return problem.derive(spans_taken, queries=(0, n_q), keys=(0, n_k))


def exchanged_keys(problem: Problem, world: int, layout: str, shift: int) -> Problem:
    """`problem` with its keys and values laid so that rank r of `world` holds what rank r + shift held."""
    order = shards_exchanged(problem.n_k, world, layout, shift).tolist()
    return problem.derive(positions_taken, keys=order)


def merge_order_comparison(variant: Variant, problem: Problem, *, world: int,
                           shift: int) -> tuple[np.ndarray, np.ndarray, Allowance]:
    """The output on `problem` with the key shards exchanged by `shift`, the output on `problem` (both on `world`
    ranks), and the allowed difference: the merge term of `world` merges in either order
    (specs.tolerance.merge_order_allowance)."""
    __tracebackhide__ = True
    trial = Trial(variant, problem)
    moved = exchanged_keys(problem, world, variant.capabilities.sharding, shift)
    got, expected = (trial.call(p, world_size=world) for p in (moved, problem))
    oracle, _ = trial.oracle(problem)
    _, _, v = trial.exact_inputs(problem)
    return got, expected, merge_order_allowance(oracle, v, variant.dtype, merges=world)
