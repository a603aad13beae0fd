"""Dropout's checks (seed 000 § Fused Attention: Softmax -> Dropout -> MatMul): the keywords that ask an
implementation for dropout, head sizes that read weights back through one-hot values, the keep mask read off the
implementation, the survivors and the output under it (at the seed's rate and at the rates close to 1), and the
disjoint position pairs whose keeps must agree as independent coins do."""

from __future__ import annotations

import functools

import numpy as np

from harness.api import Trial, observe_weights
from harness.api.reproducible import reproducible
from protocol.registry import Variant
from specs.dropout_mask import keep_mask
from specs.keyword_edges import DROPOUT_EDGES
from specs.problems import Problem, build
from specs.statistics import ALPHA, binomial_pvalue
from specs.tolerance import dropout_survivor_allowance, forward_allowance

DROPOUT_P = 0.1  # the seed's dropout_p
SEED = 40_000  # the fixed draws of the per-position test and of the random pairs


def dropout_call(variant, seed: int, p: float = DROPOUT_P) -> dict:
    """Trial.call's keywords that ask for dropout at rate p with this seed: `dropout_seed`, or the global
    generators seeded where the call runs when the implementation has no such keyword."""
    if variant.capabilities.dropout_seed:
        return {"dropout_p": p, "dropout_seed": seed}
    return {"dropout_p": p, "global_seed": seed}


def one_hot_head_dims(variant, n_k: int) -> dict:
    """d and d_v: 8, or n_k for an implementation that takes d_v = d only (value_dim False; flash-attn's), whose
    one-hot values need d_v >= n_k."""
    size = 8 if variant.capabilities.value_dim else n_k
    return {"d": size, "d_v": size}


def offset_pairs(shape: tuple[int, ...], offset: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint pairs (x, x + offset) of flat positions: along the first axis the offset moves (by L > 0), x
    lies in an even block of L, so no position is in two pairs and, for iid keeps, the agreements are iid."""
    axis = next(a for a, step in enumerate(offset) if step)
    grids = np.indices(shape)
    inside = np.all([(g + step >= 0) & (g + step < n) for g, step, n in zip(grids, offset, shape, strict=True)],
                    axis=0)
    first = np.flatnonzero(inside & ((grids[axis] // offset[axis]) % 2 == 0))
    moved = [index + step for index, step in zip(np.unravel_index(first, shape), offset, strict=True)]
    return first, np.ravel_multi_index(moved, shape)


@functools.cache
def pair_families(shape: tuple[int, int, int, int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The pairs whose agreement is tested: neighbouring batches, heads at every lag, rows and columns at lags
    1 .. n / 2, diagonals (i + L, j + L) and anti-diagonals (i + L, j - L) at those lags, and a random matching
    of all positions (a fixed permutation, paired off)."""
    b, h, n_q, n_k = shape
    offsets = {"batch +1": (1, 0, 0, 0), **{f"head +{lag}": (0, lag, 0, 0) for lag in range(1, h)}}
    for lag in range(1, min(n_q, n_k) // 2 + 1):
        offsets.update({f"row +{lag}": (0, 0, lag, 0), f"column +{lag}": (0, 0, 0, lag),
                        f"diagonal (row +{lag}, column +{lag})": (0, 0, lag, lag),
                        f"anti-diagonal (row +{lag}, column -{lag})": (0, 0, lag, -lag)})
    families = {name: offset_pairs(shape, offset) for name, offset in offsets.items() if b > 1 or offset[0] == 0}
    order = np.random.default_rng(SEED).permutation(b * h * n_q * n_k)
    half = order.size // 2
    families["random pairs of positions"] = (order[:half], order[half:2 * half])
    return families


def observed_keep(trial: Trial, problem: Problem, seed: int, **extra) -> tuple[np.ndarray, object]:
    """The implementation's keep mask for this seed (True = kept), and its observed weights."""
    observed = observe_weights(trial, problem, **dropout_call(trial.variant, seed), **extra)
    if not np.all(observed.oracle.weights > 1e-6):
        raise AssertionError("the dropout problems must keep every weight far from 0, or a dropped weight "
                             "could not be told from an underflowed one")
    return observed.weights != 0, observed


def binomial_failure(count: int, trials: int, p: float, what: str) -> str | None:
    p_value = binomial_pvalue(count, trials, p)
    if p_value >= ALPHA:
        return None
    return f"{what}: {count} of {trials}, expected {p * trials:.1f} (binomial p-value {p_value:.3g} < {ALPHA:g})"


@reproducible
def check_dropout_on_weights(variant: Variant) -> None:
    """Survivors are p_ij / (1 - p), the drop rate is p, and the output on ordinary values is the oracle's
    (P * keep / (1 - p)) V for the mask the implementation used."""
    problem = build(batch=4, heads=2, heads_kv=2, n_q=48, n_k=48, **one_hot_head_dims(variant, 48), seed=SEED)
    trial = Trial(variant, problem)
    keep, observed = observed_keep(trial, problem, SEED)
    exact = observed.oracle.weights
    trial.expect_close(np.where(keep, observed.weights, 0.0), np.where(keep, exact / (1 - DROPOUT_P), 0.0),
                       dropout_survivor_allowance(observed.allowance, exact, DROPOUT_P, variant.dtype),
                       what="surviving weights", versus="p_ij / (1 - p)", problem=observed.problem)
    failure = binomial_failure(int((~keep).sum()), keep.size, DROPOUT_P, f"dropout zeroed weights at p = {DROPOUT_P}")
    if failure:
        trial.fail(failure, observed.problem)
    for wrong in (DROPOUT_P / 2, 1.5 * DROPOUT_P, 1 - DROPOUT_P):
        assert binomial_pvalue(int((~keep).sum()), keep.size, wrong) < ALPHA, f"no power against rate {wrong}"
    out = trial.call(problem, **dropout_call(variant, SEED))
    oracle, allowance = forward_allowance(*trial.exact_inputs(problem), dtype=variant.dtype,
                                          **trial.oracle_kwargs(problem), keep=keep, dropout_p=DROPOUT_P)
    trial.expect_close(out, oracle.out, allowance, versus="the oracle's (P * keep / (1 - p)) V under the mask "
                       "recovered from the one-hot call")


@reproducible
def check_dropout_edges(variant: Variant, seed: int) -> None:
    """dropout_p = 0 gives the output of the call without dropout bit for bit; at rates close to 1 the mask
    recovered from the one-hot call keeps survivors at p_ij / (1 - p), the output is the oracle's
    (P * keep / (1 - p)) V under it, and with dropout_seed the mask is specs.dropout_mask's."""
    problem = build(batch=4, heads=2, heads_kv=2, n_q=32, n_k=32, **one_hot_head_dims(variant, 32), seed=seed)
    trial = Trial(variant, problem)
    plain = trial.call(problem)
    zero = trial.call(problem, **dropout_call(variant, seed, 0.0))
    if not np.array_equal(zero, plain):
        where = tuple(int(i) for i in np.argwhere(zero != plain)[0])
        trial.fail("dropout_p=0.0 (the edge: no dropout) does not give the output of the call without dropout "
                   "bit for bit", details=(f"out{list(where)} = {zero[where]!r} with dropout_p=0.0, "
                                           f"{plain[where]!r} without; {int((zero != plain).sum())} elements "
                                           "differ",))
    for p in DROPOUT_EDGES[1:]:
        keywords = dropout_call(variant, seed, p)
        observed = observe_weights(trial, problem, **keywords)
        exact = observed.oracle.weights
        if not np.all(exact > 1e-6):
            raise AssertionError("the problem must keep every weight far from 0, or a dropped weight could not "
                                 "be told from an underflowed one")
        keep = observed.weights != 0
        if variant.capabilities.dropout_seed:
            expected = keep_mask(seed, p, keep.shape)
            if not np.array_equal(keep, expected):
                trial.fail(f"at dropout_p={p} the mask differs from specs.dropout_mask.keep_mask({seed}, {p}, ...) "
                           f"at {int((keep != expected).sum())} of {keep.size} positions", observed.problem)
        trial.expect_close(np.where(keep, observed.weights, 0.0), np.where(keep, exact / (1 - p), 0.0),
                           dropout_survivor_allowance(observed.allowance, exact, p, variant.dtype),
                           what=f"surviving weights at dropout_p={p}", versus="p_ij / (1 - p)",
                           problem=observed.problem)
        out = trial.call(problem, **dropout_call(variant, seed, p))
        oracle, allowance = forward_allowance(*trial.exact_inputs(problem), dtype=variant.dtype,
                                              **trial.oracle_kwargs(problem), keep=keep, dropout_p=p)
        trial.expect_close(out, oracle.out, allowance, what=f"out at dropout_p={p}",
                           versus="the oracle's (P * keep / (1 - p)) V under the recovered mask")
