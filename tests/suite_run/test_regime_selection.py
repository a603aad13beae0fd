"""Long regimes (n >= 1025, d = 256) are skipped with their reason in a run over every built-in and run by
default with --impl; layouts hold the same values in other strides."""

from __future__ import annotations

import numpy as np
import pytest

from specs import regimes
from specs.layouts import LAYOUTS, to_layout
from specs.validation import AttentionInputError
from tests.fixtures.runs import run_suite

LONG_CASE = ("properties/test_regimes.py::test_long_sequences_and_wide_heads_match_oracle"
             "[numpy-reference[float32]-n=2049]")


def test_long_regimes_skip_over_builtins_and_run_with_yes():
    skipped = run_suite(LONG_CASE, "--backend", "numpy", "-rs")
    assert skipped.returncode == 0 and "1 skipped" in skipped.output and "tox -e long" in skipped.output
    ran = run_suite(LONG_CASE, "--backend", "numpy", "--long-regimes", "yes")
    assert ran.returncode == 0 and "1 passed" in ran.output, ran.output[-2000:]


def test_long_regimes_run_by_default_with_impl():
    ran = run_suite(LONG_CASE, "--impl", "impls.numpy.numpy_reference:reference_attention")
    assert ran.returncode == 0 and "1 passed" in ran.output, ran.output[-2000:]


def test_long_means_thousands_of_keys_or_head_dim_256():
    long = {r.name for r in regimes.SIZES if r.long}
    assert {"n=1025", "n=2049", "decode 1x4097", "d=256"} <= long
    assert not {"n=257", "n=513", "d=128"} & long


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layouts_keep_the_values_and_change_the_strides(layout):
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 4))
    y = to_layout(x, layout)
    np.testing.assert_array_equal(y, x)
    assert layout == "contiguous" or y.strides != x.strides


def test_unknown_layout_is_named():
    with pytest.raises(AttentionInputError, match="unknown layout 'bhsd'"):
        to_layout(np.zeros((1, 1, 1, 1)), "bhsd")
