"""Problem.derive runs the step it records, so a repro snippet rebuilds exactly what a property used.

Every `.derive(` in the suite is reached here by running its property in-process, and each derived
problem's code (origin, then steps) is replayed against it bit for bit; a failing metamorphic property's
snippet, run, calls the implementation on the very arrays the property did; and a problem whose code and
arrays disagree is refused before it can print a misleading snippet. The properties run under the
active Hypothesis profile, as they do in the suite.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from harness.api.repro import repro_snippet
from harness.api.trial import Trial
from harness.engine.declarations import RUNNING, RunningCheck
from interpretations import test_bayesian as bayesian
from interpretations import test_differential as differential
from interpretations import test_geometric as geometric
from interpretations import test_probabilistic as probabilistic
from properties import test_dropout as dropout
from properties import test_formula as formula
from properties import test_gradient_poisoning as gradient_poisoning
from properties import test_gradients as gradients
from properties import test_heads as heads
from properties import test_keyword_domain as keyword_domain
from properties import test_masking as masking
from properties import test_poisoning as poisoning
from properties import test_probability as probability
from properties import test_scaling as scaling
from properties import test_score_mods as score_mods
from properties import test_sharded as sharded
from properties import test_stability as stability
from properties import test_symmetry as symmetry
from properties import test_tiling as tiling
from protocol.expectation_rows import Expectation
from protocol.registry import Variant, load_impl
from specs.deviations import deviation_from_fields
from specs.problems import CodeMismatch, Problem, build
from specs.reference import attention
from tests.fixtures.runs import ROOT
from zoo.declared import positional_bias

TILED = "impls.numpy.numpy_tiled:tiled_attention"  # every keyword the properties need, lse included
SPLIT_KV = "impls.numpy.numpy_split_kv:split_kv_attention"  # float16: scores leave exp's range, so q gets scaled
SQUARE = "tests.unit.test_derivations:square_values_attention"
FLASH = "impls.torch.torch_flash_records:flash_tiled"  # takes dropout_p
RECORDED = "tests.unit.test_derivations:recorded_positional_bias"
NO_SCALE = "tests.fixtures.outside_impls:plain_qkv_only"  # without a scale keyword: properties fold the scale into q
ULYSSES = "impls.distributed.distributed_records:ulysses"  # splits the heads: W = 4 copies them where 4 do not divide
ZIGZAG = "impls.distributed.distributed_records:ring_zigzag"  # 2W = 4 equal chunks: keys cut to a multiple of 4
# (property, implementation, dtype): between them they reach every `.derive(` call site
PROPERTIES = [
    (masking.test_changing_future_tokens_leaves_past_outputs, TILED, "float64"),
    (masking.test_fully_masked_row_gives_zero_output, TILED, "float64"),
    (heads.test_changing_one_head_changes_no_other, TILED, "float64"),
    (heads.test_each_kv_head_is_read_by_exactly_its_group, TILED, "float64"),
    (heads.test_grouped_kv_heads_equal_repeated_kv_heads, TILED, "float64"),
    (heads.test_each_head_weights_by_its_own_queries_and_keys, TILED, "float64"),
    (heads.test_projection_pipeline_with_implementation_as_core, TILED, "float64"),
    (symmetry.test_permuting_queries_permutes_outputs, TILED, "float64"),
    (symmetry.test_permuting_keys_with_values_changes_nothing, TILED, "float64"),
    (symmetry.test_shuffling_the_sequence_leaves_output_unchanged, TILED, "float64"),
    (symmetry.test_any_subset_of_queries_gives_the_same_rows, TILED, "float64"),
    (formula.test_self_attention_on_one_sequence, TILED, "float64"),
    (formula.test_seed000_worked_example, SQUARE, "float64"),
    (formula.test_values_of_another_length_are_rejected, TILED, "float64"),
    (probability.test_values_all_ones_give_outputs_all_ones, TILED, "float64"),
    (probability.test_every_key_gets_positive_weight, TILED, "float64"),
    (probability.test_query_pointing_at_key_weights_it_most, TILED, "float64"),
    (scaling.test_explicit_scale_replaces_default, TILED, "float64"),
    (scaling.test_unscaled_softmax_saturates_as_dk_grows, TILED, "float64"),
    (symmetry.test_rope_attention_depends_on_relative_positions_only, TILED, "float64"),
    (symmetry.test_rope_on_embeddings_before_projections_depends_on_absolute_positions, TILED, "float64"),
    (symmetry.test_rope_makes_token_order_visible, TILED, "float64"),
    (symmetry.test_sinusoidal_encoding_makes_token_order_visible, TILED, "float64"),
    (symmetry.test_causal_mask_makes_token_order_visible, TILED, "float64"),
    (stability.test_ratio_of_exponential_sums_inside_exp_range, SPLIT_KV, "float16"),
    (tiling.test_partial_results_merge_through_lse, TILED, "float64"),
    (poisoning.test_non_finite_causal_future_never_reaches_past_rows, TILED, "float64"),
    (poisoning.test_visible_nan_reaches_exactly_the_rows_that_see_it, TILED, "float64"),
    (geometric.test_unit_tokens_are_scored_by_cosine, TILED, "float64"),
    (geometric.test_self_attention_scores_are_symmetric, TILED, "float64"),
    (geometric.test_unit_vectors_weighted_by_nearness, TILED, "float64"),
    (geometric.test_dot_product_ranks_like_distance, TILED, "float64"),
    (gradients.test_fully_masked_rows_have_zero_gradients, TILED, "float64"),
    (dropout.test_dropout_output_is_unbiased, FLASH, "float64"),
    (probabilistic.test_large_scale_gives_argmax_with_ties_split, TILED, "float64"),
    (probabilistic.test_small_scale_gives_mean_of_visible_values, TILED, "float64"),
    (probabilistic.test_entropy_falls_as_scale_grows, SQUARE, "float64"),
    (probabilistic.test_exact_zero_only_where_the_dtype_underflows, TILED, "float64"),
    (geometric.test_cosine_attention_is_the_implementation_on_unit_vectors, TILED, "float64"),
    (geometric.test_cosine_attention_is_the_implementation_on_unit_vectors, NO_SCALE, "float64"),
    (geometric.test_translating_every_key_changes_nothing, TILED, "float64"),
    (geometric.test_affine_map_of_values_maps_outputs, TILED, "float64"),
    (differential.test_rotating_queries_and_keys_together_changes_nothing, TILED, "float64"),
    (differential.test_dual_change_of_basis_changes_nothing, TILED, "float64"),
    (bayesian.test_log_prior_bias_gives_the_posterior_mean, TILED, "float64"),
    (keyword_domain.test_scale_edges_match_the_oracle, TILED, "float64"),
    (keyword_domain.test_mask_edges_match_the_oracle, TILED, "float64"),
    (keyword_domain.test_lse_of_every_row, TILED, "float64"),
    (gradient_poisoning.test_non_finite_keys_no_row_sees_never_reach_gradients, TILED, "float64"),
    (gradient_poisoning.test_non_finite_keys_past_every_causal_horizon_never_reach_gradients, TILED, "float64"),
    (lambda variant: sharded.test_sharded_output_and_lse_equal_the_global_ones(variant=variant, world=4), ULYSSES,
     "float64"),
    (lambda variant: sharded.test_a_ring_merges_the_same_blocks_alike_in_any_order(variant=variant, world=2), ZIGZAG,
     "float64"),
    # a NaN softcap among the bad values: its step must rebuild it (NaN is identical to NaN there)
    (functools.partial(score_mods.test_bad_modifications_are_rejected_by_name, keyword="softcap"), TILED, "float64"),
    (lambda variant: _explained(poisoning.test_non_finite_masked_keys_never_reach_rows_that_cannot_see_them, variant),
     f"{ROOT}/tests/fixtures/deviation_impls.py:additive_mask", "float64"),
]
CALLS: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # inputs of recorded_positional_bias, in call order


def square_values_attention(q, k, v):
    """The oracle, declaring d_v = d: properties read its row sums through values all ones."""
    return attention(q, k, v).out


square_values_attention.attention_capabilities = {"value_dim": False}


def recorded_positional_bias(q, k, v, *, scale=None):
    """zoo.declared.positional_bias (keys are not exchangeable), keeping what each call received."""
    CALLS.append((q.copy(), k.copy(), v.copy()))
    return positional_bias(q, k, v, scale=scale)


def _explained(prop, variant: Variant) -> None:
    """`prop` run on `variant` declaring that its hidden poison reaches rows, as the plugin runs it: a failing example
    runs again under the deviation, which makes the same call with finite garbage in the poison's place."""
    deviation = deviation_from_fields("hidden-nonfinite-reaches-rows", {"through": ["keys", "values"]}, "test")
    rows = (Expectation(variant.impl.name, "hidden-non-finite-never-reaches-output", "test", ("float64",), deviation),)
    variant = Variant(dataclasses.replace(variant.impl, expectations=rows), variant.dtype)
    token = RUNNING.set(RunningCheck(prop.__name__, ("hidden-non-finite-never-reaches-output",), variant))
    try:
        prop(variant=variant)
    finally:
        RUNNING.reset(token)


def _variant(target: str, dtype: str = "float64") -> Variant:
    return Variant(load_impl(target), dtype)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@dataclass(frozen=True)
class Derivation:
    site: str  # file:line of the `.derive(` call
    derived: Problem


@pytest.fixture(scope="module")
def derivations() -> list[Derivation]:
    """Every derive call the listed properties make (some fail, as their seed sentence is false: a property
    violation is no concern here)."""
    seen: list[Derivation] = []
    derive = Problem.derive

    def recording(problem: Problem, step: str) -> Problem:
        derived = derive(problem, step)
        caller = sys._getframe(1)
        seen.append(Derivation(f"{Path(caller.f_code.co_filename).relative_to(ROOT)}:{caller.f_lineno}", derived))
        return derived

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Problem, "derive", recording)
        for prop, target, dtype in PROPERTIES:
            with contextlib.suppress(PropertyViolation):
                prop(variant=_variant(target, dtype))
    return seen


def _call_sites() -> set[str]:
    sites = set()
    for folder in ("harness", "specs", "properties", "interpretations"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if re.search(r"\.derive\(", line):
                    sites.add(f"{path.relative_to(ROOT)}:{number}")
    return sites


def test_every_derive_call_site_is_exercised(derivations):
    missing = _call_sites() - {d.site for d in derivations}
    assert not missing, f"add a property reaching {sorted(missing)} to PROPERTIES"


def test_every_derived_problem_is_rebuilt_bit_for_bit_by_its_code(derivations):
    """Its code (the origin, then the steps) run as the repro snippet runs it gives the same recipe,
    arrays (NaNs and signed zeros included), mask and keywords as the problem the property used."""
    failures = []
    for derivation in derivations:
        try:
            derivation.derived.check_code()
        except CodeMismatch as exc:
            failures.append(f"{derivation.site}: {exc}")
    assert not failures, "\n".join(failures[:5])


def test_repro_of_a_failing_metamorphic_property_feeds_the_implementation_the_same_arrays(capsys):
    """The snippet of a failing expect_unchanged, run, replays the property's comparison: it calls the
    implementation with the exact q, k, v the property's last (smallest) example passed it, in the same order, and
    prints the verdict."""
    with pytest.raises(PropertyViolation) as failure:
        symmetry.test_permuting_keys_with_values_changes_nothing(variant=_variant(RECORDED))
    # the last example's calls: derived problem, its |v|, the trial's problem, its |v| (harness.api.trial)
    used = CALLS[-4:]
    CALLS.clear()
    exec(failure.value.repro, {})
    assert len(CALLS) == 4, "the snippet calls the implementation as the property did"
    for replayed, original in zip(CALLS, used, strict=True):
        assert all(_same_bits(a, b) for a, b in zip(replayed, original, strict=True))
    assert capsys.readouterr().out.startswith(f"FAIL: {failure.value.summary}"), "the snippet shows the verdict"


def test_a_step_runs_on_the_problem_as_the_snippet_would():
    """Only `p` and the snippet's imports are in scope, and the problem derived from must stay as it was."""
    problem = build(n_q=3, n_k=4, d=2, d_v=2, seed=1)
    v = np.abs(problem.v)  # noqa: F841 (defined here, and still not in the step's scope)
    with pytest.raises(NameError, match="'v' is not defined"):
        problem.derive("p = p.replace(v=v)")
    with pytest.raises(ValueError, match="changes the v of the problem it derives from"):
        problem.derive("p.v[0] = 0.0")
    assert problem.derive("p = p.replace(v=one_hot_values(p.k.shape, 4))").code().endswith(
        "p = p.replace(v=one_hot_values(p.k.shape, 4))")


@pytest.mark.parametrize("wrong", [
    # arrays computed apart from the step that claims to make them (what derive(step, **changes) allowed)
    lambda p: dataclasses.replace(p, v=-np.abs(p.v), steps=p.steps + ("p = p.replace(v=np.abs(p.v))",)),
    # a step whose replay draws other numbers
    lambda p: p.derive("p = p.replace(v=np.random.default_rng().standard_normal(p.v.shape))"),
    # a step that breaks a later one when all run in one snippet: it rebinds a name the next step reads
    lambda p: p.derive("np = None; p = p.replace(v=p.v + 1)").derive("p = p.replace(v=np.abs(p.v))"),
], ids=["arrays-apart-from-step", "unseeded-step", "step-rebinds-an-import"])
def test_code_that_does_not_rebuild_the_problem_is_refused(wrong):
    """check_code catches it; the harness calls it before printing a snippet and on every metamorphic pair."""
    problem = build(n_q=3, n_k=4, d=2, d_v=2, seed=1)
    bad = wrong(problem)
    with pytest.raises(CodeMismatch):
        bad.check_code()
    trial = Trial(_variant(TILED), problem)
    with pytest.raises(CodeMismatch):
        repro_snippet(bad, target=TILED, dtype="float64", layout="contiguous", causal_alignment="top_left")
    with pytest.raises(CodeMismatch):
        trial.expect_unchanged(bad, what="out", versus="out")
