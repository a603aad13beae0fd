"""Deliberately wrong implementations, written as an outside user would write one (CONTRACT 1:
plain functions with `attention_capabilities` and `known_defects` attributes, no import of the suite).

Each declares, as data, the claims its bug breaks and the properties that see it (a scoped declaration,
protocol/known_defects.py); tests/suite_run/test_defects_caught.py runs the properties against all of them and requires
every declared claim to fail, only in the declared properties, and every other claim to hold.
zoo/defects.py lists them with the rest of the defect zoo.
"""

import math

import numpy as np


def _scoped(why, failing, **other_whys):
    """{claim: (properties that fail)} -> scoped declarations, all in float64; `other_whys` maps a
    claim (underscores for dashes) to its own reason."""
    whys = {claim.replace("_", "-"): reason for claim, reason in other_whys.items()}
    return {claim: {"why": whys.get(claim, why), "dtypes": ("float64",), "properties": properties}
            for claim, properties in failing.items()}


def _softmax(scores, axis=-1):
    shifted = scores - np.max(scores, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def _expand(k, v, heads):
    group = heads // k.shape[1]
    return np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)


def _masked(scores, causal, mask, shift=0):
    n_q, n_k = scores.shape[-2:]
    if causal:
        scores = np.where(np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + shift, scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return scores


NAN_REPAIR = ("fully masked rows are repaired by turning NaN weights into 0, which also turns a NaN the row "
              "sees into 0; and hidden values are still multiplied by their zero weights (0 * NaN = NaN)")


def _weights_to_out(weights, v):
    weights = np.where(np.isnan(weights), 0.0, weights)  # fully masked rows give zeros, per the convention
    return weights @ v


def missing_scale(q, k, v, *, causal=False, mask=None):
    """softmax(Q K^T) V: the 1/sqrt(d_k) is forgotten."""
    k, v = _expand(k, v, q.shape[1])
    return _weights_to_out(_softmax(_masked(q @ k.swapaxes(-1, -2), causal, mask)), v)


SCALE_DEPENDENT = "scores are sqrt(d) times too large, so every value-level comparison with the oracle fails"
missing_scale.known_defects = _scoped(SCALE_DEPENDENT, {
    "mask-keyword-domain": ('test_mask_edges_match_the_oracle',),
    "scale-to-zero-is-mean": ('test_small_scale_gives_mean_of_visible_values',),
    "siwuxiang-zero-needs-mask-or-underflow": ('test_exact_zero_only_where_the_dtype_underflows',),
    "softmax-maximises-entropy-regularised-score": ('test_rows_attain_the_maximum_of_entropy_regularised_score',),
    "unit-dot-product-is-cosine": ('test_unit_tokens_are_scored_by_cosine',),
    "self-attention-scores-symmetric": ('test_self_attention_scores_are_symmetric',),
    "sdpa-formula": (
        'test_causal_attention_with_different_lengths_matches_oracle',
        'test_long_causal_matches_oracle_in_declared_alignment',
        'test_long_masked_matches_oracle',
        'test_long_sequences_and_wide_heads_match_oracle',
        'test_masked_attention_matches_oracle',
        'test_output_matches_oracle',
        'test_square_causal_attention_matches_oracle',
    ),
    "hidden-non-finite-never-reaches-output": ('test_non_finite_causal_future_never_reaches_past_rows',
                                               'test_non_finite_masked_keys_never_reach_rows_that_cannot_see_them'),
    "visible-nan-propagates": ('test_visible_nan_reaches_exactly_the_rows_that_see_it',),
    "worked-example-shapes": ('test_seed000_worked_example',),
    "scale-keeps-softmax-flat": ('test_softmax_jacobian_does_not_vanish_as_d_grows',),
    "ratio-of-exp-sums": ('test_ratio_of_exponential_sums_inside_exp_range',),
    "online-softmax-avoids-overflow": ('test_large_scores_give_finite_correct_outputs',),
    "siwuxiang-query-result": ('test_siwuxiang_query_result',),
    "worked-example-cross-shapes": ('test_seed001_three_queries_four_keys',),
    "cross-and-self-same-computation": ('test_cross_attention_matches_oracle', 'test_self_attention_on_one_sequence'),
    "self-attention-four-steps": ('test_projection_pipeline_with_implementation_as_core',),
    "woaini-self-attention-matrix": ('test_seed003_woaini_three_by_three',),
    "sqrt-dk-variance": ('test_scaled_scores_have_unit_variance',),
    "concat-then-output-projection": ('test_projection_pipeline_with_implementation_as_core',),
    "geometric-cosine-every-implementation": ('test_cosine_attention_is_the_implementation_on_unit_vectors',),
    "bayesian-uniform-prior-posterior-mean": ('test_output_is_the_posterior_mean_under_a_uniform_prior',),
    "bayesian-prior-as-log-bias": ('test_log_prior_bias_gives_the_posterior_mean',),
}, sqrt_dk_variance="the log-weight gaps have variance 2 d, not 2",
   scale_keeps_softmax_flat="without the scale the softmax saturates as d grows",
   hidden_non_finite_never_reaches_output=NAN_REPAIR, visible_nan_propagates=NAN_REPAIR)


def softmax_over_queries(q, k, v, *, scale=None):
    """Normalises each column (over queries) instead of each row."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _softmax(q @ k.swapaxes(-1, -2) * s, axis=-2) @ v


WRONG_AXIS = "columns, not rows, sum to 1"
softmax_over_queries.known_defects = _scoped(WRONG_AXIS, {
    "scale-keyword-domain": ('test_scale_edges_match_the_oracle', 'test_scale_types_match_the_oracle'),
    "unscaled-softmax-saturates": ('test_unscaled_softmax_saturates_as_dk_grows',),
    "scale-to-infinity-is-argmax": ('test_large_scale_gives_argmax_with_ties_split',),
    "scale-to-zero-is-mean": ('test_small_scale_gives_mean_of_visible_values',),
    "entropy-falls-with-scale": ('test_entropy_falls_as_scale_grows',),
    "siwuxiang-zero-needs-mask-or-underflow": ('test_exact_zero_only_where_the_dtype_underflows',),
    "softmax-maximises-entropy-regularised-score": ('test_rows_attain_the_maximum_of_entropy_regularised_score',),
    "complete-graph-positive-weights": ('test_every_key_gets_positive_weight',),
    "unit-dot-product-is-cosine": ('test_unit_tokens_are_scored_by_cosine',),
    "self-attention-scores-symmetric": ('test_self_attention_scores_are_symmetric',),
    "sdpa-formula": ('test_long_sequences_and_wide_heads_match_oracle', 'test_output_matches_oracle'),
    "weights-measure-relevance": ('test_weights_are_monotone_in_scores',),
    "worked-example-shapes": ('test_seed000_worked_example',),
    "score-large-when-query-seeks-key": ('test_query_pointing_at_key_weights_it_most',),
    "output-in-convex-hull": ('test_output_lies_in_convex_hull_of_values',),
    "ratio-of-exp-sums": ('test_ratio_of_exponential_sums_inside_exp_range',),
    "online-softmax-avoids-overflow": ('test_large_scores_give_finite_correct_outputs',),
    "explicit-softmax-scale": ('test_explicit_scale_replaces_default',),
    "rows-sum-to-one": ('test_observed_weights_are_distributions', 'test_values_all_ones_give_outputs_all_ones'),
    "siwuxiang-query-result": ('test_siwuxiang_query_result',),
    "worked-example-cross-shapes": ('test_seed001_three_queries_four_keys',),
    "attention-is-expectation": ('test_output_is_expectation_of_values_under_weights',),
    "cross-and-self-same-computation": ('test_cross_attention_matches_oracle', 'test_self_attention_on_one_sequence'),
    "self-attention-four-steps": ('test_projection_pipeline_with_implementation_as_core',),
    "parallel-over-positions": ('test_any_subset_of_queries_gives_the_same_rows',),
    "attention-optimal-linear-approximation": ('test_output_minimises_weighted_squared_distance',),
    "dot-product-as-distance": ('test_unit_vectors_weighted_by_nearness',),
    "woaini-self-attention-matrix": ('test_seed003_woaini_three_by_three',),
    "sqrt-dk-variance": ('test_scaled_scores_have_unit_variance',),
    "concat-then-output-projection": ('test_projection_pipeline_with_implementation_as_core',),
    "geometric-cosine-every-implementation": ('test_cosine_attention_is_the_implementation_on_unit_vectors',),
    "key-translation-invariance": ('test_translating_every_key_changes_nothing',),
    "value-affine-equivariance": ('test_affine_map_of_values_maps_outputs',),
    "bayesian-uniform-prior-posterior-mean": ('test_output_is_the_posterior_mean_under_a_uniform_prior',),
    "bayesian-prior-as-log-bias": ('test_log_prior_bias_gives_the_posterior_mean',),
}, complete_graph_positive_weights="each column is normalised over the queries: where a key's scores spread "
                                   "over the queries beyond the exponent range, its small weights underflow to 0")


def causal_off_by_one(q, k, v, *, scale=None, causal=False):
    """The causal mask lets each query see one future token (j <= i + 1)."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _weights_to_out(_softmax(_masked(q @ k.swapaxes(-1, -2) * s, causal, None, shift=1)), v)


causal_off_by_one.known_defects = _scoped("query i sees key i + 1", {
    "sdpa-formula": ('test_causal_attention_with_different_lengths_matches_oracle',
                     'test_long_causal_matches_oracle_in_declared_alignment',
                     'test_square_causal_attention_matches_oracle'),
    "hidden-non-finite-never-reaches-output": ('test_non_finite_causal_future_never_reaches_past_rows',),
    "visible-nan-propagates": ('test_visible_nan_reaches_exactly_the_rows_that_see_it',),
    "causal-mask-zeroes-future": (
        'test_causal_weights_on_future_keys_are_zero',
        'test_changing_future_tokens_leaves_past_outputs',
    ),
    "causal-alignment": ('test_zero_weights_follow_the_declared_alignment',),
}, hidden_non_finite_never_reaches_output="query i sees key i + 1, so a NaN in key i + 1 reaches row i",
   visible_nan_propagates=NAN_REPAIR)


def per_block_softmax(q, k, v, *, scale=None, block_cols=16):
    """Tiled over keys, but each key block is normalised on its own and the blocks are summed."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for start in range(0, k.shape[2], block_cols):
        block = slice(start, start + block_cols)
        out += _softmax(q @ k[:, :, block].swapaxes(-1, -2) * s) @ v[:, :, block]
    return out


per_block_softmax.attention_capabilities = {"tile_keywords": ("block_cols",)}
BLOCKS = "each key block is normalised separately: a row's weights sum to the number of key blocks"
REORDERED = "which keys share a block depends on their order"
per_block_softmax.known_defects = _scoped(BLOCKS, {
    "scale-keyword-domain": ('test_scale_edges_match_the_oracle', 'test_scale_types_match_the_oracle'),
    "one-key-per-value": ('test_values_of_another_length_are_rejected',),
    "unit-dot-product-is-cosine": ('test_unit_tokens_are_scored_by_cosine',),
    "self-attention-scores-symmetric": ('test_self_attention_scores_are_symmetric',),
    "sdpa-formula": ('test_long_sequences_and_wide_heads_match_oracle', 'test_output_matches_oracle'),
    "weights-measure-relevance": ('test_weights_are_monotone_in_scores',),
    "score-large-when-query-seeks-key": ('test_query_pointing_at_key_weights_it_most',),
    "output-in-convex-hull": ('test_output_lies_in_convex_hull_of_values',),
    "permutation-equivariance": ('test_permuting_keys_with_values_changes_nothing',),
    "ratio-of-exp-sums": ('test_ratio_of_exponential_sums_inside_exp_range',),
    "online-softmax-avoids-overflow": ('test_large_scores_give_finite_correct_outputs',),
    "tiled-equals-global": ('test_any_tiling_equals_global_attention',
                            'test_default_block_sizes_at_their_multiples_match_oracle'),
    "explicit-softmax-scale": ('test_explicit_scale_replaces_default',),
    "rows-sum-to-one": ('test_observed_weights_are_distributions', 'test_values_all_ones_give_outputs_all_ones'),
    "cross-and-self-same-computation": ('test_cross_attention_matches_oracle', 'test_self_attention_on_one_sequence'),
    "self-attention-four-steps": ('test_projection_pipeline_with_implementation_as_core',),
    "long-range-in-one-step": ('test_permuting_keys_with_values_changes_nothing',),
    "attention-optimal-linear-approximation": ('test_output_minimises_weighted_squared_distance',),
    "dot-product-as-distance": ('test_unit_vectors_weighted_by_nearness',),
    "concat-then-output-projection": ('test_projection_pipeline_with_implementation_as_core',),
}, permutation_equivariance=REORDERED, long_range_in_one_step=REORDERED,
   one_key_per_value="v is read in the key blocks: with 64 keys a 65th value is never read, and no length is compared")


def positional_bias(q, k, v, *, scale=None):
    """Adds a linear position bias 0.5 (j - i) to the scores: keys are no longer exchangeable."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    n_q, n_k = q.shape[2], k.shape[2]
    bias = 0.5 * (np.arange(n_k)[None, :] - np.arange(n_q)[:, None])
    return _softmax(q @ k.swapaxes(-1, -2) * s + bias) @ v


POSITION = "the scores depend on where a key sits, not only on what it is"
positional_bias.known_defects = _scoped(POSITION, {
    "scale-keyword-domain": ('test_scale_edges_match_the_oracle', 'test_scale_types_match_the_oracle'),
    "rope-relative-in-attention": ('test_rope_attention_depends_on_relative_positions_only',),
    "scale-to-infinity-is-argmax": ('test_large_scale_gives_argmax_with_ties_split',),
    "scale-to-zero-is-mean": ('test_small_scale_gives_mean_of_visible_values',),
    "entropy-falls-with-scale": ('test_entropy_falls_as_scale_grows',),
    "siwuxiang-zero-needs-mask-or-underflow": ('test_exact_zero_only_where_the_dtype_underflows',),
    "softmax-maximises-entropy-regularised-score": ('test_rows_attain_the_maximum_of_entropy_regularised_score',),
    "unit-dot-product-is-cosine": ('test_unit_tokens_are_scored_by_cosine',),
    "self-attention-scores-symmetric": ('test_self_attention_scores_are_symmetric',),
    "sdpa-formula": ('test_long_sequences_and_wide_heads_match_oracle', 'test_output_matches_oracle'),
    "weights-measure-relevance": ('test_weights_are_monotone_in_scores',),
    "worked-example-shapes": ('test_seed000_worked_example',),
    "score-large-when-query-seeks-key": ('test_query_pointing_at_key_weights_it_most',),
    "permutation-equivariance": ('test_permuting_keys_with_values_changes_nothing',),
    "ratio-of-exp-sums": ('test_ratio_of_exponential_sums_inside_exp_range',),
    "online-softmax-avoids-overflow": ('test_large_scores_give_finite_correct_outputs',),
    "explicit-softmax-scale": ('test_explicit_scale_replaces_default',),
    "siwuxiang-query-result": ('test_siwuxiang_query_result',),
    "worked-example-cross-shapes": ('test_seed001_three_queries_four_keys',),
    "cross-and-self-same-computation": ('test_cross_attention_matches_oracle', 'test_self_attention_on_one_sequence'),
    "self-attention-four-steps": ('test_projection_pipeline_with_implementation_as_core',),
    "long-range-in-one-step": ('test_permuting_keys_with_values_changes_nothing',),
    "dot-product-as-distance": ('test_unit_vectors_weighted_by_nearness',),
    "woaini-self-attention-matrix": ('test_seed003_woaini_three_by_three',),
    "sqrt-dk-variance": ('test_scaled_scores_have_unit_variance',),
    "concat-then-output-projection": ('test_projection_pipeline_with_implementation_as_core',),
    "geometric-cosine-every-implementation": ('test_cosine_attention_is_the_implementation_on_unit_vectors',),
    "bayesian-uniform-prior-posterior-mean": ('test_output_is_the_posterior_mean_under_a_uniform_prior',),
    "bayesian-prior-as-log-bias": ('test_log_prior_bias_gives_the_posterior_mean',),
})


def softmax_in_float32(q, k, v, *, scale=None):
    """Declares float64 (the default) but rounds the softmax through float32."""
    k, v = _expand(k, v, q.shape[1])
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    weights = _softmax((q @ k.swapaxes(-1, -2) * s).astype(np.float32)).astype(np.float64)
    return weights @ v


HALF_PRECISION = "weights carry float32 rounding (~6e-8 relative), far above the float64 bound"
softmax_in_float32.known_defects = _scoped(HALF_PRECISION, {
    "scale-keyword-domain": ('test_scale_edges_match_the_oracle', 'test_scale_types_match_the_oracle'),
    "attention-is-expectation": ('test_output_is_expectation_of_values_under_weights',),
    "rope-relative-in-attention": ('test_rope_attention_depends_on_relative_positions_only',),
    "scale-to-infinity-is-argmax": ('test_large_scale_gives_argmax_with_ties_split',),
    "scale-to-zero-is-mean": ('test_small_scale_gives_mean_of_visible_values',),
    "siwuxiang-zero-needs-mask-or-underflow": ('test_exact_zero_only_where_the_dtype_underflows',),
    "self-attention-scores-symmetric": ('test_self_attention_scores_are_symmetric',),
    "unit-dot-product-is-cosine": ('test_unit_tokens_are_scored_by_cosine',),
    "sdpa-formula": ('test_long_sequences_and_wide_heads_match_oracle', 'test_output_matches_oracle'),
    "worked-example-shapes": ('test_seed000_worked_example',),
    "output-in-convex-hull": ('test_output_lies_in_convex_hull_of_values',),
    "permutation-equivariance": ('test_permuting_keys_with_values_changes_nothing',),
    "complete-graph-positive-weights": ('test_every_key_gets_positive_weight',),
    "ratio-of-exp-sums": ('test_ratio_of_exponential_sums_inside_exp_range',),
    "online-softmax-avoids-overflow": ('test_large_scores_give_finite_correct_outputs',),
    "explicit-softmax-scale": ('test_explicit_scale_replaces_default',),
    "rows-sum-to-one": ('test_observed_weights_are_distributions', 'test_values_all_ones_give_outputs_all_ones'),
    "siwuxiang-query-result": ('test_siwuxiang_query_result',),
    "worked-example-cross-shapes": ('test_seed001_three_queries_four_keys',),
    "cross-and-self-same-computation": ('test_cross_attention_matches_oracle', 'test_self_attention_on_one_sequence'),
    "self-attention-four-steps": ('test_projection_pipeline_with_implementation_as_core',),
    "long-range-in-one-step": ('test_permuting_keys_with_values_changes_nothing',),
    "attention-optimal-linear-approximation": ('test_output_minimises_weighted_squared_distance',),
    "woaini-self-attention-matrix": ('test_seed003_woaini_three_by_three',),
    "concat-then-output-projection": ('test_projection_pipeline_with_implementation_as_core',),
    "geometric-cosine-every-implementation": ('test_cosine_attention_is_the_implementation_on_unit_vectors',),
    "value-affine-equivariance": ('test_affine_map_of_values_maps_outputs',),
    "bayesian-uniform-prior-posterior-mean": ('test_output_is_the_posterior_mean_under_a_uniform_prior',),
    "bayesian-prior-as-log-bias": ('test_log_prior_bias_gives_the_posterior_mean',),
}, complete_graph_positive_weights="float32 exponentials underflow to 0 once a score is ~87 below the row's "
                                                 "maximum, where float64 keeps them positive down to ~-708",
   siwuxiang_zero_needs_mask_or_underflow="the first exact 0 comes at a score gap of ~87-104 (float32's "
                                          "underflow), not float64's 708-746")

DEFECTIVE = ("missing_scale", "softmax_over_queries", "causal_off_by_one", "per_block_softmax",
             "positional_bias", "softmax_in_float32")
