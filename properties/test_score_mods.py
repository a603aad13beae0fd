"""Beyond the seeds: the score modifications kernels ship (specs/score_mods.py), each against the float64 oracle.

FlashAttention's window_size, softcap and alibi_slopes (flash_attn_func), SDPA's float attn_mask (an additive
bias) and gpt-oss's attention sinks, in the protocol's order and alignment (docs/checking-your-implementation.md,
"Score modifications beyond the seeds"). Each property draws the modification where it moves the weights
(specs.strategies.with_score_mod) on top of an ordinary problem of the record, causal and masked where it takes
them, and holds the output to the tolerance model of the oracle.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.assertions import names
from harness.api.markers import checks
from harness.api.regime_cases import cases, skip_unless_fits
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, check_against_oracle, check_out_and_lse_against_oracle, problems_for
from properties.block_sizes import default_block_sizes
from properties.gradient_checks import check_gradients
from protocol.registry import SCORE_MODS, Variant
from specs import regimes
from specs.derivations import with_bad_score_mod
from specs.keyword_edges import BAD_SCORE_MODS
from specs.problems import Problem, build
from specs.strategies import with_score_mod

SMALL = dict(max_n=40)  # windows, caps and biases act per score: tile-sized lengths add nothing but time
# A cap is drawn relative to the largest |scaled score| and evaluating it costs a few u of the cap
# (specs.tolerance.model): with the large, huge and mixed styles' scores of 1e3 to 1e7 that is a score error of
# order 1 in float32 and beyond, where no first-order tolerance holds, and a tiny style's cap is subnormal. The
# cap is checked where it moves ordinary scores.
CAPPED_STYLES = ("normal", "integers", "spiky")


def modified_problem(variant: Variant, keyword: str, data: st.DataObject) -> Problem:
    """A problem of the record with `keyword` drawn on top, causal or masked where the record takes them, and each
    other modification the record takes drawn or not (the order they compose in): a cap only where it is the
    property's own keyword, as its styles are CAPPED_STYLES."""
    caps = variant.capabilities
    causal = caps.causal and data.draw(st.booleans(), label="causal")
    masked = caps.mask and not causal and data.draw(st.booleans(), label="masked")
    styles = {"score_styles": CAPPED_STYLES} if keyword == "softcap" else {}
    base = problems_for(variant, causal=causal, masked=masked, **SMALL, **styles)
    companions = tuple(mod for mod in SCORE_MODS if mod not in (keyword, "softcap") and getattr(caps, mod))
    return data.draw(with_score_mod(base, keyword, companions), label="problem")


def check_modified(variant: Variant, problem: Problem, **extra) -> None:
    """The output against the oracle's, and the log-sum-exp with it (one return_lse=True call) where the record
    returns one: the LSE is where a sink counts even when the output is right; `extra`: keywords the call adds
    (block sizes)."""
    __tracebackhide__ = True
    if variant.capabilities.lse:
        check_out_and_lse_against_oracle(variant, problem, **extra)
    else:
        check_against_oracle(variant, problem, **extra)


@checks("sliding-window-attends-its-band")
@pytest.mark.requires("window_size")
@given(data=st.data())
def test_sliding_window_matches_the_oracle(variant, data):
    check_modified(variant, modified_problem(variant, "window_size", data))


@checks("softcap-caps-scaled-scores")
@pytest.mark.requires("softcap")
@given(data=st.data())
def test_softcap_matches_the_oracle(variant, data):
    check_modified(variant, modified_problem(variant, "softcap", data))


@checks("alibi-is-a-distance-bias")
@pytest.mark.requires("alibi_slopes")
@given(data=st.data())
def test_alibi_matches_the_oracle(variant, data):
    check_modified(variant, modified_problem(variant, "alibi_slopes", data))


@checks("additive-bias-joins-the-scores")
@pytest.mark.requires("bias")
@given(data=st.data())
def test_additive_bias_matches_the_oracle(variant, data):
    check_modified(variant, modified_problem(variant, "bias", data))


@checks("sinks-join-the-denominator")
@pytest.mark.requires("sinks")
@given(data=st.data())
def test_sinks_match_the_oracle(variant, data):
    check_modified(variant, modified_problem(variant, "sinks", data))


@checks("score-mods-reject-bad-values")
@pytest.mark.parametrize("keyword", [pytest.param(mod, marks=pytest.mark.requires(mod)) for mod in SCORE_MODS])
@given(data=st.data())
def test_bad_modifications_are_rejected_by_name(variant, keyword, data):
    """Each bad value of specs.keyword_edges.BAD_SCORE_MODS on an ordinary problem: the call raises, and the
    error names the keyword (a bare broadcasting error deep inside the arithmetic does not say what was wrong)."""
    base = data.draw(problems_for(variant, **SMALL), label="problem")
    check_bad_modification_rejected(variant, base, keyword, data.draw(st.sampled_from(BAD_SCORE_MODS[keyword]),
                                                                      label="bad value"))


@reproducible
def check_bad_modification_rejected(variant, base: Problem, keyword: str, label: str) -> None:
    """The bad value `label` of `keyword` on `base`: the call raises, and its error names the keyword."""
    problem = base.derive(with_bad_score_mod, keyword, label)
    trial = Trial(variant, problem)
    raised = trial.expect_raised(problem, label)
    if not names(raised, keyword):
        trial.fail(f"rejected {label} without naming {keyword}", problem, details=(raised,))


@checks("score-mods-differentiable")
@pytest.mark.parametrize("keyword", [pytest.param(mod, marks=pytest.mark.requires("gradients", mod))
                                     for mod in SCORE_MODS])
@given(data=st.data())
def test_gradients_under_each_modification_match_the_oracle(variant, keyword, data):
    """dQ, dK, dV with the modification drawn, at drawn block sizes (softcap's derivative 1 - tanh^2: a backward
    that skips it fails), and dBias and dSinks where autograd reaches them (Capabilities.differentiable_mods)."""
    problem = modified_problem(variant, keyword, data)
    caps = variant.capabilities
    blocks = {name: data.draw(st.integers(caps.min_block_size, 70), label=name) for name in caps.tile_keywords}
    wrt = tuple(name for name in variant.capabilities.differentiable_mods if getattr(problem, name) is not None)
    check_gradients(Trial(variant, problem), problem, seed=problem.recipe.seed, extra=blocks, wrt=wrt)


@checks("score-mods-hold-at-length")
@pytest.mark.parametrize("regime", cases(regimes.SCORE_MODS_AT_LENGTH))
def test_modifications_at_length_match_the_oracle(variant, regime):
    """specs.regimes.SCORE_MODS_AT_LENGTH: each modification at n = 257 to 2049 and with n_q != n_k both ways, in
    the record's alignment (a regime asking for a keyword it does not take is skipped with the reason)."""
    check_modified(variant, skip_unless_fits(variant, regime))


@checks("score-mods-hold-at-length")
@pytest.mark.requires("window_size", "tile_keywords")
def test_windows_one_key_either_side_of_the_block_sizes(variant):
    """Block sizes B of 16, 24, ... (one per tile keyword, the default where smaller) passed to the call, and
    windows reaching B - 1, B and B + 1 keys to the left or to the right of the diagonal, so the band's edge falls
    before, on and after a tile's edge, at n = 2 max B + 1, in float. The default block sizes meet the window at
    length in test_modifications_at_length_match_the_oracle."""
    defaults = default_block_sizes(variant)
    if not defaults:
        pytest.skip("the block-size keywords have no integer defaults")
    blocks = {keyword: min(default, 16 + 8 * i) for i, (keyword, default) in enumerate(sorted(defaults.items()))}
    n = 2 * max(blocks.values()) + 1
    for reach in sorted({b + delta for b in blocks.values() for delta in (-1, 0, 1)}):
        for window in ((reach, 0), (0, reach)):
            check_modified(variant, build(heads=2, heads_kv=2, n_q=n, n_k=n, d=16, d_v=16, seed=reach,
                                          window=window), **blocks)
