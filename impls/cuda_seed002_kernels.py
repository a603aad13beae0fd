"""Seed 002 § 3.2.2 and § 3.2.4: the two CUDA kernels, repaired only so that NVRTC compiles them
(impls/cuda/kernels/seed002_*_repaired.cu), as records on a CUDA device and on the CPU.

The seed gives no launch code. Both kernels index q, k, v as (batch, seq_len, d_model) and take one query row
per thread, `seq_idx = blockIdx.y * blockDim.x + threadIdx.x`, so the launch the kernels imply is a grid of
(batch, ceil(seq_len / threads)) blocks of `block_threads` threads. The shared-memory kernel stores, for each
thread, its q row and (one row further) its k row: 2 * block_threads * d_model floats of dynamic shared memory.
Self-attention with one head only: (batch, heads) is flattened into the seed's batch axis, n_q = n_k, d_v = d.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from impls.cuda.launch import KERNEL_DIR, KernelSource, Launch, execute
from impls.cuda.records import cuda_records

NAIVE = KernelSource(KERNEL_DIR / "seed002_attention_kernel_repaired.cu", ("attention_kernel",))
SHARED_MEMORY = KernelSource(KERNEL_DIR / "seed002_optimized_attention_kernel_repaired.cu",
                             ("optimized_attention_kernel",))
DEFAULT_THREADS = 128


def seed_launch(kernel: KernelSource, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                block_threads: int = DEFAULT_THREADS) -> Launch:
    """The launch the seed's indexing implies, over (batch * heads) flattened sequences."""
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"the seed 002 kernels take q, k, v of one shape (self-attention, one head per batch "
                         f"row, d_v = d): got {q.shape}, {k.shape}, {v.shape}")
    if not 1 <= block_threads <= 1024:
        raise ValueError(f"block_threads must be 1..1024 (threads of a CUDA block), got {block_threads}")
    batch, heads, n, d = q.shape
    flat = [np.ascontiguousarray(x, dtype=np.float32).reshape(batch * heads, n, d) for x in (q, k, v)]
    output = np.zeros_like(flat[0])
    scratch = np.zeros(batch * heads * n * n, np.float32) if kernel is NAIVE else np.zeros(1, np.float32)
    shared = 2 * block_threads * d * 4 if kernel is SHARED_MEMORY else 0
    sizes = (np.int32(batch * heads), np.int32(n), np.int32(d))
    return Launch(kernel.entries[0], (batch * heads, -(-n // block_threads), 1), (block_threads, 1, 1), shared,
                  (*flat, output, *sizes, scratch))


def run_seed_kernel(kernel: KernelSource, q: np.ndarray, k: np.ndarray, v: np.ndarray, *,
                    block_threads: int = DEFAULT_THREADS, executor: str) -> np.ndarray:
    """The kernel's output for q, k, v (batch, heads, n, d)."""
    launch = seed_launch(kernel, q, k, v, block_threads)
    return execute(kernel, launch, executor)[3].reshape(v.shape)


def _naive(q, k, v, *, block_threads: int = DEFAULT_THREADS, executor: str):
    return run_seed_kernel(NAIVE, q, k, v, block_threads=block_threads, executor=executor)


def _shared_memory(q, k, v, *, block_threads: int = DEFAULT_THREADS, executor: str):
    return run_seed_kernel(SHARED_MEMORY, q, k, v, block_threads=block_threads, executor=executor)


WRONG_SHARED_READS = ("keys are read from s_mem[k_idx * blockDim.x * d_model + d]: past the 2 * blockDim.x * d_model "
                      "floats of the launch for k_idx > 1 (garbage, or NaN where no thread wrote) and never the "
                      "keys themselves, and thread t's k row overwrites thread t+1's q row: the output is not "
                      "attention")
# claim -> the properties that see the wrong shared-memory reads (measured on the CPU record, ci profile)
FAILING_PROPERTIES = {
    "attention-is-expectation": ('test_output_is_expectation_of_values_under_weights',),
    "attention-optimal-linear-approximation": ('test_output_minimises_weighted_squared_distance',),
    "bayesian-prior-as-log-bias": ('test_log_prior_bias_gives_the_posterior_mean',),
    "bayesian-uniform-prior-posterior-mean": ('test_output_is_the_posterior_mean_under_a_uniform_prior',),
    "calls-are-independent": ('test_repeated_calls_follow_new_values_and_leave_inputs_alone',),
    "complete-graph-positive-weights": ('test_every_key_gets_positive_weight',),
    "concat-then-output-projection": ('test_projection_pipeline_with_implementation_as_core',),
    "cross-and-self-same-computation": ('test_self_attention_on_one_sequence',),
    "dot-product-as-distance": ('test_unit_vectors_weighted_by_nearness',),
    "dot-product-as-distance-literal": ('test_dot_product_ranks_like_distance',),
    "dual-basis-change-invariance": ('test_dual_change_of_basis_changes_nothing',),
    "geometric-cosine-every-implementation": ('test_cosine_attention_is_the_implementation_on_unit_vectors',),
    "heads-weight-positions-differently": ('test_each_head_weights_by_its_own_queries_and_keys',),
    "hidden-non-finite-never-reaches-output": ('test_visible_nan_reaches_exactly_the_rows_that_see_it',),
    "key-translation-invariance": ('test_translating_every_key_changes_nothing',),
    "layout-independent": ('test_strided_inputs_give_the_same_attention',),
    "long-range-in-one-step": ('test_permuting_keys_with_values_changes_nothing',),
    "multi-head-independent-subspaces": ('test_changing_one_head_changes_no_other',),
    "online-softmax-avoids-overflow": ('test_large_scores_give_finite_correct_outputs',),
    "orthogonal-basis-change-invariance": ('test_rotating_queries_and_keys_together_changes_nothing',),
    "output-in-convex-hull": ('test_output_lies_in_convex_hull_of_values',),
    "output-is-weighted-sum-of-values": ('test_output_equals_observed_weights_times_values',),
    "output-shape-follows-query": ('test_output_has_one_row_per_query',),
    "permutation-equivariance": ('test_permuting_keys_with_values_changes_nothing',
                                 'test_permuting_queries_permutes_outputs'),
    "permutation-invariance-literal": ('test_shuffling_the_sequence_leaves_output_unchanged',),
    "positional-encoding-breaks-symmetry": ('test_rope_makes_token_order_visible',
                                            'test_sinusoidal_encoding_makes_token_order_visible'),
    "query-compared-only-with-other-tokens": ('test_first_token_is_compared_only_with_the_other_tokens',),
    "ratio-of-exp-sums": ('test_ratio_of_exponential_sums_inside_exp_range',),
    "rope-before-projections": ('test_rope_on_embeddings_before_projections_depends_on_absolute_positions',),
    "rope-relative-in-attention": ('test_rope_attention_depends_on_relative_positions_only',),
    "rows-sum-to-one": ('test_observed_weights_are_distributions', 'test_values_all_ones_give_outputs_all_ones'),
    "scale-keeps-softmax-flat": ('test_softmax_jacobian_does_not_vanish_as_d_grows',),
    "score-large-when-query-seeks-key": ('test_query_pointing_at_key_weights_it_most',),
    "sdpa-formula": ('test_long_sequences_and_wide_heads_match_oracle', 'test_output_matches_oracle'),
    "self-attention-four-steps": ('test_projection_pipeline_with_implementation_as_core',),
    "self-attention-scores-symmetric": ('test_self_attention_scores_are_symmetric',),
    "sqrt-dk-variance": ('test_scaled_scores_have_unit_variance',),
    "tiled-equals-global": ('test_any_tiling_equals_global_attention',
                            'test_default_block_sizes_at_their_multiples_match_oracle'),
    "unit-dot-product-is-cosine": ('test_unit_tokens_are_scored_by_cosine',),
    "unscaled-softmax-saturates": ('test_unscaled_softmax_saturates_as_dk_grows',),
    "value-affine-equivariance": ('test_affine_map_of_values_maps_outputs',),
    "visible-nan-propagates": ('test_visible_nan_reaches_exactly_the_rows_that_see_it',),
    "weights-in-unit-interval": ('test_observed_weights_are_distributions',),
    "weights-measure-relevance": ('test_weights_are_monotone_in_scores',),
    "woaini-self-attention-matrix": ('test_seed003_woaini_three_by_three',),
    "worked-example-shapes": ('test_seed000_worked_example',),
    "entropy-falls-with-scale": ('test_entropy_falls_as_scale_grows',),
    "scale-to-infinity-is-argmax": ('test_large_scale_gives_argmax_with_ties_split',),
    "scale-to-zero-is-mean": ('test_small_scale_gives_mean_of_visible_values',),
    "siwuxiang-zero-needs-mask-or-underflow": ('test_exact_zero_only_where_the_dtype_underflows',),
    "softmax-maximises-entropy-regularised-score": ('test_rows_attain_the_maximum_of_entropy_regularised_score',),
}
SHARED_MEMORY_DEFECTS = {claim: {"why": WRONG_SHARED_READS, "dtypes": ("float32",), "properties": properties}
                         for claim, properties in FAILING_PROPERTIES.items()}
# what the CPU checkers report (kernel-* claims run only on the CPU record)
SHARED_MEMORY_CHECKED_DEFECTS = {
    "kernel-memory-safe": {"why": "s_mem[k_idx * blockDim.x * d_model + d] reads past the dynamic shared buffer "
                                  "for every k_idx > 1 (ThreadSanitizer sees the same read land in a freed block)",
                           "dtypes": ("float32",),
                           "match": "AddressSanitizer: heap-buffer-overflow|ThreadSanitizer: heap-use-after-free"},
    "kernel-race-free": {"why": "thread t writes its k row to s_mem[t * d_model + d_model + d], the slots where "
                                "thread t+1 writes its q row, with no barrier between", "dtypes": ("float32",),
                         "match": "ThreadSanitizer: data race"},
    "kernel-barrier-uniform": {"why": "threads past seq_len return before the __syncthreads() the others wait at",
                               "dtypes": ("float32",), "match": "barrier divergence: .* returned while"},
}

_SEED_CAPABILITIES = dict(dtypes=("float32",), gqa=False, cross=False, value_dim=False,
                          tile_keywords=("block_threads",))
naive_kernel_on_device, naive_kernel_on_cpu = cuda_records("seed002-naive-kernel", _naive, **_SEED_CAPABILITIES)
shared_memory_kernel_on_device, shared_memory_kernel_on_cpu = cuda_records(
    "seed002-shared-memory-kernel", _shared_memory, **_SEED_CAPABILITIES, known_defects=SHARED_MEMORY_DEFECTS,
    checked_defects=SHARED_MEMORY_CHECKED_DEFECTS)
SEED_RUNS = {"naive": partial(run_seed_kernel, NAIVE), "shared-memory": partial(run_seed_kernel, SHARED_MEMORY)}
