"""Where real kernels switch code paths: long sequences, wide heads, many heads, strided inputs, repeated
calls, an implementation's own block sizes (docs/design.md § Numerical judgement; seed 000 § Flash Attention).

Each case is a fixed problem (specs.regimes), compared with the oracle under the same tolerance model as the
Hypothesis draws. Regimes marked long (n >= 1025 or d = 256) run with `--impl` and in `tox -e long`.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.assertions import compare
from harness.api.markers import checks
from harness.api.regime_cases import cases, skip_unless_fits
from harness.api.repro import cast_line
from harness.api.trial import Trial, check_against_oracle
from properties.block_sizes import default_block_sizes
from specs import regimes
from specs.layouts import LAYOUTS
from specs.problems import Problem, build
from specs.tolerance import difference_allowance


@checks("sdpa-formula")
@pytest.mark.parametrize("regime", cases(regimes.SIZES + regimes.LARGE_SCORES_AT_LENGTH))
def test_long_sequences_and_wide_heads_match_oracle(variant, regime):
    """Lengths past 256 to 2049 and a 4097-key decode, head dims 96 to 256, batch and heads together with
    GQA groups of 8 and MQA (a regime the implementation cannot take is skipped with the reason)."""
    check_against_oracle(variant, skip_unless_fits(variant, regime))


@checks("sdpa-formula")
@pytest.mark.requires("causal")
@pytest.mark.parametrize("regime", cases(regimes.CAUSAL))
def test_long_causal_matches_oracle_in_declared_alignment(variant, regime):
    check_against_oracle(variant, skip_unless_fits(variant, regime))


@checks("sdpa-formula")
@pytest.mark.requires("mask")
@pytest.mark.parametrize("regime", cases(regimes.MASKED))
def test_long_masked_matches_oracle(variant, regime):
    check_against_oracle(variant, skip_unless_fits(variant, regime))


def _lengths_around_blocks(blocks: dict[str, int]) -> list[int]:
    """n at one block, one block +- 1, and multiples of the largest default block plus one."""
    largest = max(blocks.values())
    lengths = {largest - 1, largest, largest + 1, 2 * largest, 2 * largest + 1, 8 * largest + 1}
    return sorted(n for n in lengths if 1 <= n <= regimes.LONG_N)


@checks("tiled-equals-global")
@pytest.mark.requires("tile_keywords")
def test_default_block_sizes_at_their_multiples_match_oracle(variant):
    """The implementation's own block sizes (its keywords' defaults), at lengths one below, at and one above
    multiples of them: the path a caller who passes no block size takes."""
    blocks = default_block_sizes(variant)
    if not blocks:
        pytest.skip("the block-size keywords have no integer defaults")
    causal = variant.capabilities.causal
    for n in _lengths_around_blocks(blocks):
        for causal_case in {False, causal}:
            check_against_oracle(variant, build(n_q=n, n_k=n, d=64, d_v=64, seed=n, causal=causal_case))


@checks("layout-independent")
@pytest.mark.parametrize("layout", sorted(set(LAYOUTS) - {"contiguous"}))
def test_strided_inputs_give_the_same_attention(variant, layout):
    """The same values passed as strided views (BSHD storage, a sliced or stepped head dim, Fortran order,
    negative strides) give what the implementation gives on contiguous arrays, within the rounding two
    correct computations of one problem may differ by."""
    for problem in (build(batch=2, heads=4, heads_kv=2 if variant.capabilities.gqa else 4,
                          n_q=33, n_k=33, d=24, d_v=24, seed=11),
                    build(batch=2, heads=2, heads_kv=2, n_q=129, n_k=129, d=64, d_v=64, seed=12)):
        trial = Trial(variant, problem, layout=layout)
        contiguous, allowance = trial.own_output()
        trial.expect_close(trial.call(), contiguous, allowance, what=f"out on {layout} inputs",
                           versus="its output on contiguous inputs")


def _changed_inputs(trial: Trial, before: list[np.ndarray], after: tuple[np.ndarray, ...]) -> None:
    for name, kept, x in zip("qkv", before, after, strict=True):
        if not np.array_equal(x, kept, equal_nan=True):
            trial.fail(f"the call wrote to its input {name}",
                       details=(f"{int(np.sum(x != kept))} of {x.size} elements of {name} changed",))


def _sequence_script(a: Problem, b: Problem, position: int, dtype: str, causal_alignment: str) -> str:
    """The repro of the calls on A, B, A: the three calls in order, then the verdict of call `position` against its
    oracle (a stale state shows only after the calls before it)."""
    cast = cast_line(dtype).replace("\n", "\n    ")
    return "\n".join([
        a.code(), "a = p", b.code(), "b = p", "outs = []",
        "for p in (a, b, a):", f"    {cast}", "    outs.append(as_float64(fn(q, k, v, **p.kwargs())))",
        f"p = {'aba'[position]}", cast_line(dtype),
        f"oracle, allowance = forward_allowance(*(x.astype(float) for x in (q, k, v)), dtype={dtype!r}, "
        f"**p.kwargs(), causal_alignment={causal_alignment!r})",
        f"print(verdict(outs[{position}], oracle.out, allowance, "
        f"what='out of call {position + 1} on {'ABA'[position]}'))",
    ])


@checks("calls-are-independent")
@pytest.mark.parametrize("regime", cases(regimes.SEQUENCE_LENGTHS[:1] + regimes.HEAD_DIMS[1:2]))
def test_repeated_calls_follow_new_values_and_leave_inputs_alone(variant, regime):
    """Three calls with one shape: values A, then B, then A again. No call writes to its inputs; B's output
    is not A's (where the oracle says they differ beyond both allowances: a cache keyed by shape returns it);
    where one call is within its oracle's allowance, every call is within its own (a cache that keeps part of
    A, say its transformed K, gives neither A's output nor B's); the second call on A gives what the first gave."""
    a = skip_unless_fits(variant, regime)
    b = regime.problem(seed=regime.recipe["seed"] + 1)
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
                              "says they differ",),
                     script=_sequence_script(a, b, 1, variant.dtype, variant.capabilities.causal_alignment))
    calls = [(trial_a, out, oracle_a, allowance_a) if values == "A" else (trial_b, out, oracle_b, allowance_b)
             for values, out in zip("ABA", outs, strict=True)]
    # an implementation off its oracle on every call computes another formula (other claims' failure); one
    # within it on some call computes attention, and then every call must be within its own
    if any(compare(out, oracle.out, allowance).within for _, out, oracle, allowance in calls):
        for position, (trial, out, oracle, allowance) in enumerate(calls):
            trial.expect_close(out, oracle.out, allowance, what=f"out of call {position + 1} on {'ABA'[position]}",
                               versus="its float64 oracle (calls on A, B, A; another was within its own)",
                               script=_sequence_script(a, b, position, variant.dtype,
                                                       variant.capabilities.causal_alignment))
    _, allowance = trial_a.own_output()
    trial_a.expect_close(outs[2], outs[0], allowance, what="out of the second call on the same values",
                         versus="the first call's out")
