"""Every keyword over its whole domain (docs/design.md, CONTRACT 1): the edges of specs.keyword_edges against the
float64 oracle through the tolerance model, one property per keyword family.

A declared keyword is a promise over its whole domain: `scale` at 0, negative, subnormal, huge and as an int,
a NumPy scalar or a 0-d array; masks hiding everything, nothing or one key, stored at every rank that
broadcasts; `dropout_p` at 0 (bit for bit the call without dropout) and close to 1 (survivors rescaled by
1/(1 - p)); the LSE of every row, -inf for a row that sees no key, and rows whose scores are all huge or all
tiny. Where the naive formula of a lower precision overflows (a huge scale in float16) the tolerance model
has nothing to scale and the input is rejected (specs.tolerance.ToleranceUndefined). Failure messages name
the keyword and its value (Edge.describe); tests/suite_run/test_expectations_caught.py shows wrong ones failing.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

from harness.api import as_numpy
from harness.api.markers import checks
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, problems_for
from properties.dropout_checks import check_dropout_edges
from specs.derivations import with_mask_entries
from specs.keyword_edges import (
    LSE_SCORE_EDGES,
    SCALE_TYPES,
    mask_edges,
    scale_edges,
    with_mask,
    with_scale,
)
from specs.problems import build
from specs.tolerance import ToleranceUndefined, lse_allowance

SHAPES = dict(max_n=40, max_d=32)  # the edges are in the keywords, not the sizes: keep the draws cheap
SEED = 41_000
EMPTY_FIRST_ROW = (None, None, 0)  # the mask entries hidden: every batch and head's first row


@reproducible
def _expect_oracle(variant, problem, what: str) -> None:
    """The output on `problem` (an edge derived into it) within the tolerance model of the oracle, the failure
    naming the keyword and the value in `what`."""
    trial = Trial(variant, problem)
    oracle, allowance = trial.oracle()
    trial.expect_close(trial.call(), oracle.out, allowance, what=what)


@checks("scale-keyword-domain")
@pytest.mark.requires("scale")
@given(data=st.data())
def test_scale_edges_match_the_oracle(variant, data):
    edge = data.draw(scale_edges(), label="scale edge")
    masked = variant.capabilities.mask and data.draw(st.booleans(), label="masked")
    base = data.draw(problems_for(variant, scale=False, masked=masked, **SHAPES), label="problem")
    _expect_oracle(variant, with_scale(base, edge), f"out at {edge.describe()}")


@checks("scale-keyword-domain")
@pytest.mark.requires("scale")
def test_scale_types_match_the_oracle(variant):
    """Every type a scale may come as (SCALE_TYPES), on one fixed problem with GQA and n_q != n_k (where the
    implementation takes them)."""
    check_scale_types_match_the_oracle(variant)


@reproducible
def check_scale_types_match_the_oracle(variant) -> None:
    """The check of test_scale_types_match_the_oracle."""
    caps = variant.capabilities
    base = build(batch=2, heads=2, heads_kv=1 if caps.gqa else 2, n_q=5, n_k=7 if caps.cross else 5, d=4, d_v=4,
                 seed=SEED + 1)
    for edge in SCALE_TYPES:
        _expect_oracle(variant, with_scale(base, edge), f"out at {edge.describe()}")


@checks("mask-keyword-domain")
@pytest.mark.requires("mask")
@given(data=st.data())
def test_mask_edges_match_the_oracle(variant, data):
    """One mask pattern per example, stored at every rank."""
    base = data.draw(problems_for(variant, **SHAPES), label="problem")
    for edge in data.draw(mask_edges(base), label="mask edges"):
        _expect_oracle(variant, with_mask(base, edge), f"out with {edge.describe()}")


@checks("dropout-keyword-domain")
@pytest.mark.requires("dropout")
def test_dropout_edges(variant):
    check_dropout_edges(variant, SEED)


@checks("lse-keyword-domain")
@pytest.mark.requires("lse", "mask")
@given(data=st.data())
def test_lse_of_every_row(variant, data):
    """Each query head's first row sees no key (lse exactly -inf); the other rows' scores are ordinary, all
    huge, all hugely negative or all tiny (specs.keyword_edges.LSE_SCORE_EDGES)."""
    base = data.draw(problems_for(variant, masked=True, empty_rows=True, score_styles=("normal", "integers"),
                                  **SHAPES), label="problem")
    label = data.draw(st.sampled_from([label for label, _, _ in LSE_SCORE_EDGES]), label="scores")
    check_lse_of_every_row(variant, base, label)


@reproducible
def check_lse_of_every_row(variant, base, label: str) -> None:
    """Each query head's first row of `base` emptied, the scores made as LSE_SCORE_EDGES' `label` says: the output
    and the log-sum-exp within the tolerance model, the empty rows' log-sum-exp exactly -inf."""
    _, step, arguments = next(edge for edge in LSE_SCORE_EDGES if edge[0] == label)
    problem = (base if step is None else base.derive(step, *arguments)).derive(with_mask_entries, EMPTY_FIRST_ROW,
                                                                               False)
    trial = Trial(variant, problem)
    raw = trial.call_raw(problem, return_lse=True)
    if not isinstance(raw, tuple) or len(raw) != 2:
        trial.fail("declared lse=True but return_lse=True did not return (out, lse)")
    oracle, allowance = trial.oracle()
    trial.expect_close(trial.check_output(raw[0], problem), oracle.out, allowance,
                       what=f"out ({label}, first rows empty)")
    lse = as_numpy(raw[1])
    if lse is None or lse.shape != oracle.lse.shape:
        trial.fail(f"return_lse=True returned lse of shape {getattr(raw[1], 'shape', None)}, expected "
                   f"(batch, heads, n_q) = {oracle.lse.shape}")
    lse = lse.astype(np.float64)
    empty = oracle.lse == -np.inf
    wrong = empty & (lse != -np.inf)
    if wrong.any():
        where = tuple(int(i) for i in np.argwhere(wrong)[0])
        trial.fail(f"lse of a row that sees no key is not -inf ({label})",
                   details=(f"lse{list(where)} = {lse[where]!r}, expected -inf; {int(wrong.sum())} of "
                            f"{int(empty.sum())} empty rows",))
    try:
        bound = lse_allowance(*trial.exact_inputs(), dtype=variant.dtype, oracle=oracle, **trial.oracle_kwargs())
    except ToleranceUndefined:
        reject()  # the naive log-sum-exp overflows in this dtype: the rule has nothing to scale
    trial.expect_close(np.where(empty, 0.0, lse), np.where(empty, 0.0, oracle.lse), bound,
                       what=f"lse ({label})")
