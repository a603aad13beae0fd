"""The defect zoo: deliberately wrong implementations, each with the mistake it models, where people met
it, and the claims it must break. `tox -e zoo` (python -m zoo.run) runs each against the properties of
those claims under the `ci` profile and prints what the suite caught; tests/suite_run/test_zoo.py requires all.

The functions live in zoo/wrong.py (one mistake each on a correct formula) and zoo/declared.py (the six
wrong implementations of the trustworthy-verdicts issue, which also declare their defects).
Sources name the public thread where the bug class was reported.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Defect:
    target: str  # --impl target
    mistake: str
    source: str
    breaks: tuple[str, ...]  # claims whose properties must fail

    @property
    def name(self) -> str:
        return self.target.rpartition(":")[2]


def _wrong(name: str, mistake: str, source: str, *breaks: str) -> Defect:
    return Defect(f"zoo/wrong.py:{name}", mistake, source, breaks)


def _declared(name: str, mistake: str, source: str, *breaks: str) -> Defect:
    return Defect(f"zoo/declared.py:{name}", mistake, source, breaks)


FORMULA = "sdpa-formula"
DEFECTS = (
    # the issue on trustworthy verdicts
    _declared("missing_scale", "softmax(Q K^T) V: the 1/sqrt(d_k) forgotten", "seed 000 § 具体过程", FORMULA,
              "sqrt-dk-variance"),
    _declared("softmax_over_queries", "softmax over the query axis: columns, not rows, sum to 1",
              "a common transcription error (dim=-2)", "rows-sum-to-one"),
    _declared("causal_off_by_one", "causal mask j <= i + 1: each query sees one future key",
              "off-by-one triangles (torch.triu diagonal=0 vs 1)", "causal-mask-zeroes-future"),
    _declared("per_block_softmax", "tiles each normalised on their own, never rescaled",
              "seed 002's blockwise classes", "tiled-equals-global"),
    _declared("positional_bias", "a score bias 0.5 (j - i) that depends on where a key sits",
              "relative-position bias applied where none is declared", "permutation-equivariance"),
    _declared("softmax_in_float32", "float64 in and out, float32 softmax inside",
              "jax.nn.dot_product_attention under float64 (the regimes issue)", FORMULA),
    # scale
    _wrong("scale_by_value_dim", "scale 1/sqrt(d_v) where d_v != d_k", "scale taken from the wrong tensor",
           FORMULA),
    _wrong("scale_one_over_d", "scale 1/d instead of 1/sqrt(d)", "scale applied twice", FORMULA),
    _wrong("explicit_scale_ignored", "the scale keyword is ignored (always 1/sqrt(d))",
           "flashinfer-ai/flashinfer#4014 (a cache key without the softmax scale)", "explicit-softmax-scale"),
    _wrong("decode_path_unscaled", "a fast path for n_q = 1 (decoding) forgets the scale",
           "paths taken only for some shapes", FORMULA),
    _wrong("wide_head_path_wrong_scale", "head dims >= 128 take a kernel with d = 64's scale",
           "Dao-AILab/flash-attention#498 (wrong results at head dim 160/192)", FORMULA),
    # softmax and precision
    _wrong("no_max_subtraction", "exp(S) without subtracting the row maximum: overflow above ~709",
           "pytorch/pytorch#119131 (fp16 overflow in the math backend)", "online-softmax-avoids-overflow"),
    _wrong("float32_softmax", "float64 interface, float32 computation", "pytorch/pytorch PR #128922", FORMULA),
    _wrong("long_keys_split_averaged", "past 512 keys two halves are averaged instead of merged by their lse",
           "pytorch/pytorch#162588 (wrong results past a sequence length)", FORMULA),
    _wrong("float16_serial_accumulation", "float16 accumulator updated one key at a time, no float32 inside",
           "pytorch/pytorch#119131, huggingface/transformers#11076", FORMULA),
    _wrong("softmax_over_query_axis", "softmax along the query axis", "dim=-2 for dim=-1", "rows-sum-to-one"),
    # masks
    _wrong("causal_declared_bottom_right", "declares bottom-right causal alignment, masks top-left",
           "Dao-AILab/flash-attention#517 (alignment changed in 2.1)", "causal-alignment"),
    _wrong("causal_excludes_diagonal", "causal mask j < i: a query cannot see itself",
           "torch.triu diagonal off by one", "causal-alignment"),
    _wrong("mask_inverted", "True read as 'may NOT attend' (nn.MultiheadAttention's convention)",
           "pytorch/pytorch#41508 (mask conventions)", "boolean-mask-hides-keys"),
    _wrong("mask_minus_ten_thousand", "hidden scores get -10000 added instead of being removed",
           "huggingface/transformers PR #17306 (-1e4 as attention mask)", "boolean-mask-hides-keys"),
    _wrong("mask_keys_reversed", "padding read from the wrong end of the key axis",
           "left vs right padding", "boolean-mask-hides-keys"),
    _wrong("fully_masked_rows_nan", "a row with no visible key gives 0/0 = NaN",
           "pytorch/pytorch#103963", "fully-masked-rows-zero"),
    _wrong("fully_masked_rows_mean", "hidden scores set to finfo.min: a fully masked row averages all values",
           "pytorch/pytorch#109517, huggingface/transformers PR #18185", "fully-masked-rows-zero"),
    _wrong("mask_added_as_minus_inf", "mask added as -inf: a NaN hidden key gives NaN + -inf = NaN",
           "pytorch/pytorch#101967 (NaN in a masked position reaches the output)",
           "hidden-non-finite-never-reaches-output"),
    _wrong("hidden_values_multiplied", "padded values multiplied by zero weights: 0 * NaN = NaN",
           "pytorch/pytorch#101967", "hidden-non-finite-never-reaches-output"),
    _wrong("nan_scores_zeroed", "np.nan_to_num on the inputs: a NaN the query sees disappears",
           "NaN silently dropped", "visible-nan-propagates"),
    # heads and batches
    _wrong("gqa_heads_interleaved", "query head h reads kv head h % heads_kv (tile, not repeat_interleave)",
           "onnx/onnx PR #7274, huggingface/transformers PR #26490", "gqa-shares-kv-heads"),
    _wrong("gqa_first_kv_head_only", "every query head reads kv head 0", "MQA code used for GQA",
           "gqa-shares-kv-heads"),
    _wrong("first_batch_keys_for_all", "batch 0's keys and values used for every batch",
           "a batch stride of 0", FORMULA),
    _wrong("int16_head_offset", "kv head offsets computed in a narrow integer wrap past 32767 elements",
           "Dao-AILab/flash-attention PR #1500, PR #2260 (int32 offset overflow)", FORMULA),
    # calls and memory
    _wrong("stale_cache_by_shape", "results cached by shape: new values get the old result",
           "flashinfer-ai/flashinfer PR #4014", "calls-are-independent"),
    _wrong("scales_q_in_place", "q *= scale on the caller's array", "Dao-AILab/flash-attention#638",
           "calls-are-independent"),
    _wrong("assumes_contiguous", "memory read in storage order whatever the strides",
           "pytorch/pytorch#112577 (non-contiguous K/V)", "layout-independent"),
    # tiles, splits, pages, lse, dropout
    _wrong("tiled_acc_not_rescaled", "online softmax rescales the running sum but not the running output",
           "seed 000 § Flash Attention (the correction step)", "tiled-equals-global"),
    _wrong("tiled_drops_last_partial_block", "the key loop stops before a last partial block",
           "range(0, n - n % B, B)", "tiled-equals-global"),
    _wrong("tiled_normalises_each_block", "each key block softmaxed alone and summed",
           "seed 002 § 分块 (the chapter's blockwise classes)", "tiled-equals-global"),
    _wrong("lse_in_base_two", "log-sum-exp returned in base 2", "pytorch/pytorch#181645", "online-softmax-merge"),
    _wrong("lse_of_unscaled_scores", "log-sum-exp of the unscaled scores", "pytorch/pytorch#181645",
           "online-softmax-merge"),
    _wrong("split_merge_without_max", "split-KV merge weighted by exp(lse) without the max shift",
           "flash-decoding's combine step", "online-softmax-avoids-overflow"),
    _wrong("paged_pages_read_in_pool_order", "pages read in pool order, ignoring the block table",
           "seed 001 § 2.4 (paged attention)", "paged-equals-contiguous"),
    _wrong("dropout_survivors_not_rescaled", "dropout without the 1/(1 - p) rescaling of survivors",
           "Dao-AILab/flash-attention#2088 (dropout RNG)", "dropout-on-weights"),
)
