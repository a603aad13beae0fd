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

from harness.api.markers import checks
from harness.api.trial import check_against_oracle, problems_for
from protocol.registry import Variant
from specs.problems import Problem
from specs.strategies import with_score_mod

SMALL = dict(max_n=40)  # windows, caps and biases act per score: tile-sized lengths add nothing but time
# A cap is drawn relative to the largest |scaled score| and evaluating it costs a few u of the cap
# (specs.tolerance.model): with the large, huge and mixed styles' scores of 1e3 to 1e7 that is a score error of
# order 1 in float32 and beyond, where no first-order tolerance holds, and a tiny style's cap is subnormal. The
# cap is checked where it moves ordinary scores.
CAPPED_STYLES = ("normal", "integers", "spiky")


def modified_problem(variant: Variant, keyword: str, data: st.DataObject) -> Problem:
    """A problem of the record with `keyword` drawn on top, causal or masked where the record takes them."""
    caps = variant.capabilities
    causal = caps.causal and data.draw(st.booleans(), label="causal")
    masked = caps.mask and not causal and data.draw(st.booleans(), label="masked")
    styles = {"score_styles": CAPPED_STYLES} if keyword == "softcap" else {}
    base = problems_for(variant, causal=causal, masked=masked, **SMALL, **styles)
    return data.draw(with_score_mod(base, keyword), label="problem")


@checks("sliding-window-attends-its-band")
@pytest.mark.requires("window_size")
@given(data=st.data())
def test_sliding_window_matches_the_oracle(variant, data):
    check_against_oracle(variant, modified_problem(variant, "window_size", data))


@checks("softcap-caps-scaled-scores")
@pytest.mark.requires("softcap")
@given(data=st.data())
def test_softcap_matches_the_oracle(variant, data):
    check_against_oracle(variant, modified_problem(variant, "softcap", data))


@checks("alibi-is-a-distance-bias")
@pytest.mark.requires("alibi_slopes")
@given(data=st.data())
def test_alibi_matches_the_oracle(variant, data):
    check_against_oracle(variant, modified_problem(variant, "alibi_slopes", data))


@checks("additive-bias-joins-the-scores")
@pytest.mark.requires("bias")
@given(data=st.data())
def test_additive_bias_matches_the_oracle(variant, data):
    check_against_oracle(variant, modified_problem(variant, "bias", data))


@checks("sinks-join-the-denominator")
@pytest.mark.requires("sinks")
@given(data=st.data())
def test_sinks_match_the_oracle(variant, data):
    check_against_oracle(variant, modified_problem(variant, "sinks", data))
