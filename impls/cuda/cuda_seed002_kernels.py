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
from typing import NamedTuple

import numpy as np

from impls.cuda.cuda_records import cuda_records
from impls.cuda.geometry import TileGeometry
from impls.cuda.runtime.execute import execute
from impls.cuda.runtime.launch import KERNEL_DIR, KernelSource, Launch

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


class Expectation(NamedTuple):
    """One declared way a kernel fails one claim, as plain data: `known_defects` is built from these rows
    (protocol/known_defects.py's scoped form), and an expectations table can take them over as they are."""

    claim: str
    dtypes: tuple[str, ...]
    symptom: str  # regex searched in the failure message (the harness's wording, measured on the CPU record)
    why: str
    properties: tuple[str, ...] = ()  # the claim's properties that show it; () = any of them


def known_defects(rows: tuple[Expectation, ...]) -> dict[str, list[dict]]:
    """The rows as scoped declarations, {claim: [declaration, ...]} (several rows may name one claim)."""
    declared: dict[str, list[dict]] = {}
    for row in rows:
        entry = {"why": row.why, "dtypes": row.dtypes, "match": row.symptom}
        declared.setdefault(row.claim, []).append(entry | ({"properties": row.properties} if row.properties else {}))
    return declared


F32 = ("float32",)
WRONG_SHARED_READS = ("keys are read from s_mem[k_idx * blockDim.x * d_model + d]: past the 2 * blockDim.x * d_model "
                      "floats of the launch for k_idx > 1 (garbage, or NaN where no thread wrote) and never the "
                      "keys themselves, and thread t's k row overwrites thread t+1's q row: the output is not "
                      "attention")
# The symptoms, as the harness words them (harness.engine.guarded_call.non_finite_summary,
# harness.api.assertions.compare).
# With the default 128 threads and n <= 64, every row reads slot blockDim.x * d_model at k_idx = 1, which no thread
# writes: on the CPU (shared memory filled with 0xFF bytes before each block) sum_exp is NaN and so is every output.
NAN_OUT = r"^returned nan at out\[[\d, ]+\] where the oracle is finite"
# With fewer threads (the tile keyword block_threads) or n > 64, the reads land on other threads' q and k rows or
# past the buffer: where no NaN is met the output is finite and wrong (not in every element: integer scores can
# tie the wrong scores as they tie the right ones), so the oracle comparison fails.
NAN_OR_WRONG = NAN_OUT + r"|^out[^\n]* differs from the float64 oracle beyond the tolerance"
# claim -> how the wrong shared-memory reads show, measured on the CPU record (ci profile; calls-are-independent
# draws n = 257, past the CPU record's max_seq, and runs on the device record only)
SHARED_MEMORY_EXPECTATIONS: tuple[Expectation, ...] = (
    Expectation("attention-is-expectation", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_output_is_expectation_of_values_under_weights",)),
    Expectation("attention-optimal-linear-approximation", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_output_minimises_weighted_squared_distance",)),
    Expectation("bayesian-prior-as-log-bias", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_log_prior_bias_gives_the_posterior_mean",)),
    Expectation("bayesian-uniform-prior-posterior-mean", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_output_is_the_posterior_mean_under_a_uniform_prior",)),
    Expectation("calls-are-independent", F32, NAN_OR_WRONG, WRONG_SHARED_READS,
                ("test_repeated_calls_follow_new_values_and_leave_inputs_alone",)),
    Expectation("complete-graph-positive-weights", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_every_key_gets_positive_weight",)),
    Expectation("concat-then-output-projection", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_projection_pipeline_with_implementation_as_core",)),
    Expectation("cross-and-self-same-computation", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_self_attention_on_one_sequence",)),
    Expectation("dot-product-as-distance", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_unit_vectors_weighted_by_nearness",)),
    Expectation("dot-product-as-distance-literal", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_dot_product_ranks_like_distance",)),
    Expectation("dual-basis-change-invariance", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_dual_change_of_basis_changes_nothing",)),
    Expectation("geometric-cosine-every-implementation", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_cosine_attention_is_the_implementation_on_unit_vectors",)),
    Expectation("heads-weight-positions-differently", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_each_head_weights_by_its_own_queries_and_keys",)),
    Expectation("hidden-non-finite-never-reaches-output", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_visible_nan_reaches_exactly_the_rows_that_see_it",)),
    Expectation("key-translation-invariance", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_translating_every_key_changes_nothing",)),
    Expectation("layout-independent", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_strided_inputs_give_the_same_attention",)),
    Expectation("long-range-in-one-step", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_permuting_keys_with_values_changes_nothing",)),
    Expectation("multi-head-independent-subspaces", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_changing_one_head_changes_no_other",)),
    Expectation("online-softmax-avoids-overflow", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_large_scores_give_finite_correct_outputs",)),
    Expectation("orthogonal-basis-change-invariance", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_rotating_queries_and_keys_together_changes_nothing",)),
    Expectation("output-in-convex-hull", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_output_lies_in_convex_hull_of_values",)),
    Expectation("output-is-weighted-sum-of-values", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_output_equals_observed_weights_times_values",)),
    Expectation("output-shape-follows-query", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_output_has_one_row_per_query",)),
    Expectation("permutation-equivariance", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_permuting_keys_with_values_changes_nothing", "test_permuting_queries_permutes_outputs")),
    Expectation("permutation-invariance-literal", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_shuffling_the_sequence_leaves_output_unchanged",)),
    Expectation("positional-encoding-breaks-symmetry", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_rope_makes_token_order_visible", "test_sinusoidal_encoding_makes_token_order_visible")),
    Expectation("query-compared-only-with-other-tokens", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_first_token_is_compared_only_with_the_other_tokens",)),
    Expectation("ratio-of-exp-sums", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_ratio_of_exponential_sums_inside_exp_range",)),
    Expectation("rope-before-projections", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_rope_on_embeddings_before_projections_depends_on_absolute_positions",)),
    Expectation("rope-relative-in-attention", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_rope_attention_depends_on_relative_positions_only",)),
    Expectation("rows-sum-to-one", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_observed_weights_are_distributions", "test_values_all_ones_give_outputs_all_ones")),
    Expectation("scale-keeps-softmax-flat", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_softmax_jacobian_does_not_vanish_as_d_grows",)),
    Expectation("score-large-when-query-seeks-key", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_query_pointing_at_key_weights_it_most",)),
    Expectation("sdpa-formula", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_long_sequences_and_wide_heads_match_oracle", "test_output_matches_oracle")),
    Expectation("self-attention-four-steps", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_projection_pipeline_with_implementation_as_core",)),
    Expectation("self-attention-scores-symmetric", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_self_attention_scores_are_symmetric",)),
    Expectation("sqrt-dk-variance", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_scaled_scores_have_unit_variance",)),
    Expectation("tiled-equals-global", F32, NAN_OR_WRONG, WRONG_SHARED_READS),  # every tiling and tile edge
    Expectation("unit-dot-product-is-cosine", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_unit_tokens_are_scored_by_cosine",)),
    Expectation("unscaled-softmax-saturates", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_unscaled_softmax_saturates_as_dk_grows",)),
    Expectation("value-affine-equivariance", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_affine_map_of_values_maps_outputs",)),
    Expectation("visible-nan-propagates", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_visible_nan_reaches_exactly_the_rows_that_see_it",)),
    Expectation("weights-in-unit-interval", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_observed_weights_are_distributions",)),
    Expectation("weights-measure-relevance", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_weights_are_monotone_in_scores",)),
    Expectation("woaini-self-attention-matrix", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_seed003_woaini_three_by_three",)),
    Expectation("worked-example-shapes", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_seed000_worked_example",)),
    Expectation("entropy-falls-with-scale", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_entropy_falls_as_scale_grows",)),
    Expectation("scale-to-infinity-is-argmax", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_large_scale_gives_argmax_with_ties_split",)),
    Expectation("scale-to-zero-is-mean", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_small_scale_gives_mean_of_visible_values",)),
    Expectation("siwuxiang-zero-needs-mask-or-underflow", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_exact_zero_only_where_the_dtype_underflows",)),
    Expectation("softmax-maximises-entropy-regularised-score", F32, NAN_OUT, WRONG_SHARED_READS,
                ("test_rows_attain_the_maximum_of_entropy_regularised_score",)),
)
# what the CPU checkers report (kernel-* claims run only on the CPU record): the checker, the kernel, the finding
_IN_KERNEL = (r" reports a defect in seed002_optimized_attention_kernel_repaired\.cu \(optimized_attention_kernel\)"
              r"(?: at the tile edge case .*?)?: ")
SHARED_MEMORY_CHECKED_EXPECTATIONS: tuple[Expectation, ...] = (
    Expectation("kernel-memory-safe", F32,
                r"^memcheck" + _IN_KERNEL + r"==\d+==ERROR: AddressSanitizer: heap-buffer-overflow"
                r"|^racecheck" + _IN_KERNEL + r"WARNING: ThreadSanitizer: heap-use-after-free",
                "s_mem[k_idx * blockDim.x * d_model + d] reads past the dynamic shared buffer for every k_idx > 1 "
                "(ThreadSanitizer sees the same read land in a freed block)"),
    Expectation("kernel-race-free", F32, r"^racecheck" + _IN_KERNEL + r"WARNING: ThreadSanitizer: data race",
                "thread t writes its k row to s_mem[t * d_model + d_model + d], the slots where thread t+1 writes "
                "its q row, with no barrier between"),
    Expectation("kernel-barrier-uniform", F32,
                r"^synccheck" + _IN_KERNEL + r"barrier divergence: a thread of block \(\d+,\d+,\d+\) returned "
                r"while \d+ threads waited at __syncthreads\(\)"
                r"|^synccheck" + _IN_KERNEL + r"the driver exited with status -11\b",
                "threads past seq_len return before the __syncthreads() the others wait at; where the reads at "
                "k_idx * blockDim.x * d_model leave the mapped memory (large n, d and block_threads: seen under the "
                "dev profile) the driver dies of SIGSEGV before its barrier accounting reports"),
)

# one query row per thread, DEFAULT_THREADS rows a block, every key read in one pass (no key tiles)
_SEED_CAPABILITIES = dict(dtypes=("float32",), gqa=False, cross=False, value_dim=False,
                          tile_keywords=("block_threads",), geometry=TileGeometry({64: None}, DEFAULT_THREADS))
naive_kernel_on_device, naive_kernel_on_cpu = cuda_records("seed002-naive-kernel", _naive, **_SEED_CAPABILITIES)
shared_memory_kernel_on_device, shared_memory_kernel_on_cpu = cuda_records(
    "seed002-shared-memory-kernel", _shared_memory, **_SEED_CAPABILITIES,
    known_defects=known_defects(SHARED_MEMORY_EXPECTATIONS),
    checked_defects=known_defects(SHARED_MEMORY_CHECKED_EXPECTATIONS))
SEED_RUNS = {"naive": partial(run_seed_kernel, NAIVE), "shared-memory": partial(run_seed_kernel, SHARED_MEMORY)}
