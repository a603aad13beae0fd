"""Masks: the causal mask of seed 003 § 第二个概念 掩码, its alignment, boolean masks, empty rows.

上矩阵无限小，所以就代表我永远也不会选择它: hidden keys get weight exactly 0 and
cannot influence the output. The protocol's conventions (boolean mask, True =
may attend; fully masked rows give 0) are checked here too.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.observe import observe_weights
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, check_against_oracle, problems_for
from properties.masking_checks import check_empty_rows_zero
from specs.derivations import affinely_changed, with_mask_entries
from specs.problems import build
from specs.reference import attention
from specs.tolerance import exponent_range


def _fail_on_hidden_weight(trial, observed) -> None:
    hidden = ~observed.oracle.allowed
    leaked = hidden & (observed.weights != 0)
    if leaked.any():
        where = tuple(int(i) for i in np.argwhere(leaked)[0])
        trial.fail("a hidden key has a non-zero weight", observed.problem,
                   details=(f"weights{where} = {observed.weights[where]!r}; it should be exactly 0",))


@checks("causal-mask-zeroes-future")
@pytest.mark.requires("causal")
@given(data=st.data())
def test_causal_weights_on_future_keys_are_zero(variant, data):
    problem = data.draw(problems_for(variant, causal=True, weights_visible=True), label="problem")
    check_causal_weights_on_future_keys_are_zero(variant, problem)


@reproducible
def check_causal_weights_on_future_keys_are_zero(variant, problem) -> None:
    """The check of test_causal_weights_on_future_keys_are_zero on one problem."""
    trial = Trial(variant, problem)
    _fail_on_hidden_weight(trial, observe_weights(trial))


@checks("causal-mask-zeroes-future")
@pytest.mark.requires("causal")
@given(data=st.data())
def test_changing_future_tokens_leaves_past_outputs(variant, data):
    problem = data.draw(problems_for(variant, causal=True, min_n=2), label="problem")
    caps = variant.capabilities
    offset = 0 if caps.causal_alignment == "top_left" else problem.n_k - problem.n_q
    assume(offset + 1 <= problem.n_k - 1)
    cut = data.draw(st.integers(offset + 1, problem.n_k - 1), label="first changed key")
    rows = np.arange(problem.n_q)[np.arange(problem.n_q) + offset < cut]
    changed = problem.derive(affinely_changed, "kv", 2, cut, None, -3.0, 1.0)
    index = (slice(None), slice(None), rows)
    Trial(variant, problem).expect_unchanged(changed, got_index=index, expected_index=index,
                                          what=f"out rows {rows.tolist()} after changing keys >= {cut}",
                                          versus="the same rows before")


@checks("sdpa-formula")
@pytest.mark.requires("causal", "cross")
@given(data=st.data())
def test_causal_attention_with_different_lengths_matches_oracle(variant, data):
    problem = data.draw(problems_for(variant, causal=True, different_lengths=True), label="problem")
    check_against_oracle(variant, problem)


@checks("sdpa-formula")
@pytest.mark.requires("causal")
@given(data=st.data())
def test_square_causal_attention_matches_oracle(variant, data):
    """n_q == n_k, where both alignments agree: the causal output itself, on every implementation."""
    problem = data.draw(problems_for(variant, causal=True, same_lengths=True), label="problem")
    check_against_oracle(variant, problem)


@checks("causal-alignment")
@pytest.mark.requires("causal")
@given(data=st.data())
def test_zero_weights_follow_the_declared_alignment(variant, data):
    """Exactly the keys the declared alignment hides get weight 0: scores are kept inside the dtype's
    exponent range, so a visible key cannot underflow to 0."""
    problem = data.draw(problems_for(variant, causal=True, weights_visible=True, score_styles=("normal", "integers")),
                        label="problem")
    check_zero_weights_follow_the_declared_alignment(variant, problem)


@reproducible
def check_zero_weights_follow_the_declared_alignment(variant, problem) -> None:
    """The check of test_zero_weights_follow_the_declared_alignment on one problem."""
    trial = Trial(variant, problem)
    scores = trial.oracle()[0].scores
    visible = np.isfinite(scores)
    spread = float(np.max(np.where(visible, scores, -np.inf), axis=-1).max()
                   - np.min(np.where(visible, scores, np.inf), axis=-1).min())
    limit = exponent_range(variant.dtype, problem.n_k)
    if spread > limit:
        problem = problem.scale_queries(limit / (2 * spread))
    observed = observe_weights(trial, problem)
    wrong = (observed.weights == 0) != ~observed.oracle.allowed
    if wrong.any():
        where = tuple(int(i) for i in np.argwhere(wrong)[0])
        expected = "hidden" if not observed.oracle.allowed[where] else "visible"
        trial.fail(f"the zero pattern of the weights is not the {variant.capabilities.causal_alignment} "
                   "causal mask", observed.problem,
                   details=(f"weights{where} = {observed.weights[where]!r}, but key {where[3]} is {expected} "
                            f"to query {where[2]} (n_q={problem.n_q}, n_k={problem.n_k})",))


@checks("causal-alignment")
@given(n_q=st.integers(1, 40), n_k=st.integers(1, 40))
def test_alignments_agree_exactly_when_lengths_match(n_q, n_k):
    """Oracle: top-left and bottom-right causal masks coincide iff n_q == n_k."""
    p = build(n_q=n_q, n_k=n_k)
    top_left = attention(p.q, p.k, p.v, causal=True, causal_alignment="top_left").allowed
    bottom_right = attention(p.q, p.k, p.v, causal=True, causal_alignment="bottom_right").allowed
    assert np.array_equal(top_left, bottom_right) == (n_q == n_k)
    assert np.all(np.tril(np.ones((n_q, n_k), dtype=bool)) == top_left[0, 0])
    assert np.all(np.tril(np.ones((n_q, n_k), dtype=bool), k=n_k - n_q) == bottom_right[0, 0])


@checks("sdpa-formula")
@pytest.mark.requires("mask")
@given(data=st.data())
def test_masked_attention_matches_oracle(variant, data):
    problem = data.draw(problems_for(variant, masked=True), label="problem")
    check_against_oracle(variant, problem)


@checks("boolean-mask-hides-keys")
@pytest.mark.requires("mask")
@given(data=st.data())
def test_boolean_mask_gives_hidden_keys_zero_weight(variant, data):
    problem = data.draw(problems_for(variant, masked=True, weights_visible=True), label="problem")
    check_boolean_mask_gives_hidden_keys_zero_weight(variant, problem)


@reproducible
def check_boolean_mask_gives_hidden_keys_zero_weight(variant, problem) -> None:
    """The check of test_boolean_mask_gives_hidden_keys_zero_weight on one problem."""
    trial = Trial(variant, problem)
    _fail_on_hidden_weight(trial, observe_weights(trial))


@checks("fully-masked-rows-zero")
@pytest.mark.requires("mask")
@given(data=st.data())
def test_fully_masked_row_gives_zero_output(variant, data):
    """Rows the mask hides entirely: the drawn mask's own (empty_rows keeps them) and a drawn set of rows,
    emptied in every batch and head or in one of them."""
    problem = data.draw(problems_for(variant, masked=True, empty_rows=True), label="problem")
    b, h, n_q, _ = problem.q.shape
    rows = sorted(data.draw(st.sets(st.integers(0, n_q - 1), min_size=1), label="emptied rows"))
    where = data.draw(st.none() | st.tuples(st.integers(0, b - 1), st.integers(0, h - 1)),
                      label="emptied in batch, head (None: all)")
    emptied = problem.derive(with_mask_entries, (*(where or (None, None)), rows), False)
    scope = "every batch and head" if where is None else f"batch {where[0]}, head {where[1]}"
    check_empty_rows_zero(Trial(variant, emptied), f"the drawn mask's, and rows {rows} emptied in {scope}")


@checks("fully-masked-rows-zero")
@pytest.mark.requires("causal", "cross")
@given(data=st.data())
def test_rows_before_the_first_key_give_zero_output(variant, data):
    """Bottom-right causal alignment with n_q > n_k: query i sees keys j <= i - (n_q - n_k), so the top
    n_q - n_k rows see none."""
    if variant.capabilities.causal_alignment != "bottom_right":
        pytest.skip("top-left causal alignment lets every query row see key 0: no row is empty")
    problem = data.draw(problems_for(variant, causal=True, empty_rows=True, queries_outnumber_keys=True),
                        label="problem")
    check_empty_rows_zero(Trial(variant, problem),
                            f"bottom-right causal, the top n_q - n_k = {problem.n_q - problem.n_k}")


@checks("mask-is-additive-not-multiplicative")
@given(n=st.integers(2, 40), d=st.integers(1, 16), seed=st.integers(0, 2**32 - 1))
def test_multiplying_scores_by_triangle_hides_future(n, d, seed):
    """The literal reading (乘了一个上矩阵): scores * tril(1) then softmax. Future weights must be 0."""
    p = build(n_q=n, n_k=n, d=d, seed=seed)
    scores = attention(p.q, p.k, p.v).scores[0, 0] * np.tril(np.ones((n, n)))
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    future = np.triu(np.ones((n, n), dtype=bool), k=1)
    assert np.all(weights[future] == 0), (
        f"multiplicative mask leaves weight {weights[future].max():.3g} on a future token "
        f"(query 0's weights {np.round(weights[0], 4).tolist()})")
