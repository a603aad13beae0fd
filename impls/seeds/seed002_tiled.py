"""Seed 002 § 3.2.3 and § 3.2.5: the two blockwise attentions (impls/seeds/seed_code/seed002_blockwise.py) as records.

Both normalise each (query block, key block) tile with its own softmax and add
the tiles' outputs, without the online-softmax rescaling of seed 000. Once the
keys span more than one block, a row's effective weights sum to the number of
key blocks, not to 1, and the output is no longer softmax attention. Both read
the key length from q (`batch_size, seq_len, d_model = q.shape`), so they are
self-attention only, and `torch.zeros_like(q)` makes d_v equal d. The adapter
flattens (batch, heads) into the seed's batch axis.
"""

from __future__ import annotations

import numpy as np

from impls.seeds.seed_code.seed002_blockwise import HardwareAwareAttention, MemoryOptimizedAttention
from protocol.registry import attention_impl
from protocol.torch_convert import as_tensor

PER_BLOCK_SOFTMAX = ("each key block gets its own softmax and the blocks' outputs are summed "
                     "without online-softmax rescaling, so once n_k exceeds the block size the "
                     "weights of a row sum to the number of key blocks")


def _flatten_heads(q, k, v):
    return [x.reshape(-1, *x.shape[2:]) for x in map(as_tensor, (q, k, v))]


REORDERED = "which keys share a block, and so a softmax, depends on their order"
# claim -> the properties that see the per-block softmax (measured on both records, ci profile)
FAILING_PROPERTIES = {
    "unit-dot-product-is-cosine": ('test_unit_tokens_are_scored_by_cosine',),
    "self-attention-scores-symmetric": ('test_self_attention_scores_are_symmetric',),
    "sdpa-formula": ('test_output_matches_oracle', 'test_long_sequences_and_wide_heads_match_oracle'),
    "weights-measure-relevance": ('test_weights_are_monotone_in_scores',),
    "score-large-when-query-seeks-key": ('test_query_pointing_at_key_weights_it_most',),
    "output-in-convex-hull": ('test_output_lies_in_convex_hull_of_values',),
    "permutation-equivariance": ('test_permuting_keys_with_values_changes_nothing',),
    "ratio-of-exp-sums": ('test_ratio_of_exponential_sums_inside_exp_range',),
    "online-softmax-avoids-overflow": ('test_large_scores_give_finite_correct_outputs',),
    "tiled-equals-global": ('test_any_tiling_equals_global_attention',
                            'test_default_block_sizes_at_their_multiples_match_oracle'),
    "rows-sum-to-one": ('test_observed_weights_are_distributions', 'test_values_all_ones_give_outputs_all_ones'),
    "cross-and-self-same-computation": ('test_self_attention_on_one_sequence',),
    "self-attention-four-steps": ('test_projection_pipeline_with_implementation_as_core',),
    "long-range-in-one-step": ('test_permuting_keys_with_values_changes_nothing',),
    "attention-optimal-linear-approximation": ('test_output_minimises_weighted_squared_distance',),
    "dot-product-as-distance": ('test_unit_vectors_weighted_by_nearness',),
    "concat-then-output-projection": ('test_projection_pipeline_with_implementation_as_core',),
}
IGNORED_VALUE = {
    "why": "v is read in the same blocks as k and the lengths are never compared: with n_k a multiple of the "
           "block size, a value past the last key is silently ignored",
    "dtypes": ("float64",),
    "properties": ("test_values_of_another_length_are_rejected",),
    "match": r"accepted k with n_k=\d+ keys and v with \d+ values",
}
SEED_BLOCKWISE_DEFECTS = {
    **{claim: {"why": REORDERED if claim in ("permutation-equivariance", "long-range-in-one-step")
               else PER_BLOCK_SOFTMAX, "dtypes": ("float64",), "properties": properties}
       for claim, properties in FAILING_PROPERTIES.items()},
    "one-key-per-value": IGNORED_VALUE,
}


SCORE_MATRIX_HELD = {
    "why": "tiled_attention fills the whole seq x seq attention_matrix block by block and returns it with the "
           "output (seed 002 § 3.2.3): the scores are kept, not used once",
    "dtypes": ("float64",),
    "properties": ("test_tiled_forward_memory_grows_linearly",),
    "match": r"peak resident memory grows like the n_q x n_k score matrix",
}


@attention_impl(name="seed002-memory-optimized-tiled", backend="torch", dtypes=("float64",),
                gqa=False, cross=False, value_dim=False, tile_keywords=("block_size",),
                known_defects={**SEED_BLOCKWISE_DEFECTS, "scores-used-once": SCORE_MATRIX_HELD})
def memory_optimized_tiled_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *,
                                     block_size: int = 32) -> np.ndarray:
    output, _ = MemoryOptimizedAttention(block_size).tiled_attention(*_flatten_heads(q, k, v))
    return output.reshape(q.shape[:2] + tuple(output.shape[1:])).numpy()


@attention_impl(name="seed002-hardware-aware", backend="torch", dtypes=("float64",),
                gqa=False, cross=False, value_dim=False, known_defects=SEED_BLOCKWISE_DEFECTS)
def hardware_aware_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    module = HardwareAwareAttention(d_model=q.shape[-1], seq_len=q.shape[2], device="cpu")
    output, _ = module.hardware_optimized_attention(*_flatten_heads(q, k, v))
    return output.reshape(q.shape[:2] + tuple(output.shape[1:])).numpy()
