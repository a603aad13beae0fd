"""Where real kernels switch code paths: long sequences, wide heads, many heads, strided inputs, repeated
calls, an implementation's own block sizes (docs/design.md § Numerical judgement; seed 000 § Flash Attention).

Each case is a fixed problem (specs.regimes), compared with the oracle under the same tolerance model as the
Hypothesis draws. Regimes marked long (n >= 1025 or d = 256) run with `--impl` and in `tox -e long`.
"""

from __future__ import annotations

import pytest

from harness.api.markers import checks
from harness.api.regime_cases import cases, skip_unless_fits
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, check_against_oracle
from properties.block_sizes import default_block_sizes
from properties.call_checks import check_calls_on_a_b_a
from specs import regimes
from specs.layouts import LAYOUTS
from specs.problems import build


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
    check_strided_inputs_give_the_same_attention(variant, layout)


@reproducible
def check_strided_inputs_give_the_same_attention(variant, layout) -> None:
    """The check of test_strided_inputs_give_the_same_attention."""
    for problem in (build(batch=2, heads=4, heads_kv=2 if variant.capabilities.gqa else 4,
                          n_q=33, n_k=33, d=24, d_v=24, seed=11),
                    build(batch=2, heads=2, heads_kv=2, n_q=129, n_k=129, d=64, d_v=64, seed=12)):
        trial = Trial(variant, problem, layout=layout)
        contiguous, allowance = trial.own_output()
        trial.expect_close(trial.call(), contiguous, allowance, what=f"out on {layout} inputs",
                           versus="its output on contiguous inputs")


@checks("calls-are-independent")
@pytest.mark.parametrize("regime", cases(regimes.SEQUENCE_LENGTHS[:1] + regimes.HEAD_DIMS[1:2]))
def test_repeated_calls_follow_new_values_and_leave_inputs_alone(variant, regime):
    """Three calls with one shape: values A, then B, then A again. No call writes to its inputs; B's output
    is not A's (where the oracle says they differ beyond both allowances: a cache keyed by shape returns it);
    where one call is within its oracle's allowance, every call is within its own (a cache that keeps part of
    A, say its transformed K, gives neither A's output nor B's); the second call on A gives what the first gave."""
    a = skip_unless_fits(variant, regime)
    check_calls_on_a_b_a(variant, a, regime.problem(seed=regime.recipe["seed"] + 1))
