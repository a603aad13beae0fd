"""Each documented deviation (specs.deviations) explains the implementation that shows its behaviour, element by
element, and refuses the same implementation with one more wrong element (tests/fixtures/deviation_impls.py).

A call is judged as in the second run of a failing example (harness.engine.explanation's deviation mode): the
elements the deviation explains must be what it predicts, every other element is the oracle's, and the property
then sees the oracle's values. Explained: the call returns the oracle within its allowance and the deviation fired.
Refused: one element moved off the prediction fails the call.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness.api import perturb
from harness.api.evidence import PropertyViolation
from harness.api.explain import judge_gradients
from harness.api.trial import Trial
from harness.engine.explanation import DeviationRun, ExplainedStop, deviation_mode
from protocol.expectation_rows import Expectation
from protocol.registry import Variant, load_impl
from specs.derivations import entries_set, with_arrays, with_keywords, with_mask_entries
from specs.deviations import CATALOGUE, Call, DeviationError, deviation_from_fields
from specs.gradients import attention_backward
from specs.problems import Problem, build, problem_step
from specs.reference import attention
from tests.fixtures.deviation_impls import LARGE_NEGATIVE
from tests.fixtures.runs import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "deviation_impls.py"


def _variant(name: str, dtype: str, perturb=None) -> Variant:
    impl = load_impl(f"{FIXTURES}:{name}")
    if perturb is not None:
        fn = impl.fn

        def perturbed(*args, **kwargs):
            result = fn(*args, **kwargs)
            return (perturb(result[0]), result[1]) if isinstance(result, tuple) else perturb(result)

        impl = dataclasses.replace(impl, fn=perturbed)
    return Variant(impl, dtype)


def _run(variant: Variant, *declared: dict) -> DeviationRun:
    """A run declaring each of `declared` (a row's fields) for the fixture's calls."""
    rows = []
    for fields in declared:
        fields = dict(fields)
        deviation = deviation_from_fields(fields.pop("deviation"), fields, "test")
        rows.append(Expectation(variant.impl.name, "sdpa-formula", "fixture", (variant.dtype,), deviation))
    return DeviationRun(tuple(rows))


def _shifted(index: tuple, by: float = 1.0):
    def perturb(out):
        out = np.array(out, dtype=out.dtype, copy=True)
        out[index] = out[index] + by
        return out
    return perturb


def _hiding(problem: Problem, rows: list[int], keys: list[int] | None = None) -> Problem:
    """The problem with a mask: `rows` see no key; the other rows see every key but `keys`."""
    return problem.derive(with_mask_entries, (None, None, None, keys or []), False).derive(
        with_mask_entries, (None, None, rows), False)


def _poisoned(problem: Problem, *, keys=(), values=()) -> Problem:
    for tensor, indices in (("k", keys), ("v", values)):
        for index in indices:
            problem = problem.derive(entries_set, tensor, index, float("nan"))
    return problem


@problem_step
def row_zero_sees_one_minus_inf_score(p: Problem) -> Problem:
    """Row 0 sees key 0 alone, whose score is -inf (q_0 > 0 against k_0 = (-inf, 0, ...)); the other rows see every
    key but key 0."""
    mask = np.zeros(p.q.shape[:3] + (p.n_k,), dtype=bool)
    mask[..., 1:, 1:] = True
    mask[..., 0, 0] = True
    q, k = p.q.copy(), p.k.copy()
    q[..., 0] = np.abs(q[..., 0]) + 0.5
    k[:, :, 0] = 0.0
    k[:, :, 0, 0] = -np.inf
    return p.replace(q=q, k=k, mask=mask)


@problem_step
def bias_hiding(p: Problem, index: tuple) -> Problem:
    """A bias of zeros (batch, heads, n_q, n_k) with -inf at `index` (ints, lists, None for a whole axis)."""
    bias = np.zeros(p.q.shape[:3] + (p.n_k,))
    bias[tuple(slice(None) if i is None else i for i in index)] = -np.inf
    return p.replace(bias=bias)


@problem_step
def values_lengthened(p: Problem, pieces: list) -> Problem:
    """Values longer than the keys: after them, for each (rows, a, b) of `pieces`, a v[:rows] + b."""
    return p.replace(v=np.concatenate([p.v, *(a * p.v[:, :, :rows] + b for rows, a, b in pieces)], axis=2))


IGNORED_WINDOW = {"deviation": "ignores-keyword", "keyword": "window_size"}
BASE = build(batch=2, heads=2, heads_kv=2, n_q=4, n_k=6, d=4, d_v=3, seed=5)
CASES = {
    # name: (fixture, deviation fields, problem, dtype, the call's keywords, an element the deviation does not explain)
    "keyless-row-mean added": ("keyless_row_mean_added", {"deviation": "keyless-row-mean"},
                               _hiding(BASE, [0], [2]), "float64", {}, (0, 0, 1, 0)),
    # row 0 sees key 0 alone, whose -inf scores it -inf: the oracle's row is 0, the eager mask's the mean of the rest
    "keyless-row-mean where every visible score is -inf": (
        "keyless_row_mean_added", {"deviation": "keyless-row-mean"},
        BASE.derive(row_zero_sees_one_minus_inf_score), "float64", {}, (0, 0, 1, 0)),
    "keyless-row-mean replaced": ("keyless_row_mean_replaced",
                                  {"deviation": "keyless-row-mean", "masked_scores": "replaced"},
                                  _hiding(BASE, [1]), "float64", {}, (1, 1, 2, 2)),
    # no mask: a -inf bias hides every key of row 0, which nothing replaces: NaN (not the mean)
    "keyless-row-mean replaced under a -inf bias": (
        "keyless_row_mean_replaced", {"deviation": "keyless-row-mean", "masked_scores": "replaced"},
        BASE.derive(bias_hiding, (None, None, 0)),
        "float64", {}, (0, 0, 1, 0)),
    # a poisoned call: row 0 sees no key and is the mean of the values, the rows that see key 5's NaN are NaN
    "keyless-row-mean replaced beside a poison": (
        "keyless_row_mean_replaced", {"deviation": "keyless-row-mean", "masked_scores": "replaced"},
        _poisoned(_hiding(BASE, [0]), keys=[(0, 1, 5)]), "float64", {}, (1, 0, 1, 0)),
    "keyless-row-nan": ("keyless_row_nan", {"deviation": "keyless-row-nan"}, _hiding(BASE, [0, 3]), "float64", {},
                        (0, 0, 1, 0)),
    "key-blocks-normalised-alone": ("key_blocks_alone", {"deviation": "key-blocks-normalised-alone", "block": 4,
                                                         "block_keyword": "block_cols"},
                                    build(n_q=3, n_k=10, d=4, seed=6), "float64", {"block_cols": 4}, None),
    "exp-without-max-shift": ("exp_ratio", {"deviation": "exp-without-max-shift"},
                              build(heads=2, n_q=4, n_k=5, d=8, seed=7, score_style="large"), "float64", {}, None),
    # a visible NaN in one value column: the overflowed row's other columns are the deviation's, that one the oracle's
    "exp-without-max-shift beside a NaN": ("exp_ratio", {"deviation": "exp-without-max-shift"},
                                           _poisoned(build(n_q=2, n_k=2, d=2, d_v=2, seed=5, score_style="large"),
                                                     values=[(0, 0, 0, 0)]), "float64", {}, None),
    "scores-overflow-dtype": ("scores_in_float16", {"deviation": "scores-overflow-dtype"},
                              build(heads=2, n_q=5, n_k=5, seed=0, score_style="huge"), "float16", {}, None),
    "hidden-nonfinite-reaches-rows": ("additive_mask", {"deviation": "hidden-nonfinite-reaches-rows",
                                                        "through": ["keys", "values"]},
                                      _poisoned(_hiding(BASE, [], [5]), keys=[(0, 1, 5)], values=[(1, 0, 5, 1)]),
                                      "float64", {}, None),
    # jax.nn's order: the mask selects, the bias is added; key 5 hidden by a -inf bias alone, NaN in batch 0
    "hidden-nonfinite-reaches-rows through bias": ("bias_added_mask_selected",
                                                   {"deviation": "hidden-nonfinite-reaches-rows", "through": ["bias"]},
                                                   _poisoned(BASE.derive(bias_hiding, (None, None, None, 5)),
                                                             keys=[(0, 1, 5)]), "float64", {}, (1, 0, 0, 0)),
    "infinite-sink-row-nan": ("sink_max_guarded", {"deviation": "infinite-sink-row-nan"},
                              BASE.derive(with_arrays, sinks=[float("inf"), 0.5]), "float64", {},
                              (0, 1, 0, 0)),
    "projections-spread-nonfinite": ("projections_spread", {"deviation": "projections-spread-nonfinite",
                                                            "then": ["values"]},
                                     _poisoned(_hiding(BASE, [], [4]), values=[(0, 1, 2, 0)]), "float64", {}, None),
    "nan-score-row-zero": ("nan_score_row_zero", {"deviation": "nan-score-row-zero"},
                           _poisoned(BASE, keys=[(1, 0, 3)]), "float64", {}, (0, 0, 2, 1)),
    # every row's window (1, 1) hides a key the implementation weighs all the same
    "ignores-keyword": ("window_ignored", IGNORED_WINDOW,
                        BASE.derive(with_keywords, window_size=(1, 1)), "float64", {}, None),
    # the window hides key 5 of every row, and batch 0's kv head 1 holds a NaN there: ignored, the NaN reaches
    "ignores-keyword beside a hidden NaN": ("window_ignored", IGNORED_WINDOW,
                                            _poisoned(BASE.derive(with_keywords, window_size=(1, 1)),
                                                      keys=[(0, 1, 5)]), "float64", {}, None),
    "float32-softmax": ("float32_softmax", {"deviation": "float32-softmax"}, BASE, "float64", {}, None),
    # the first block (keys 0, 1) holds values of 1e4 and a share of e^-12: merged first, its running output cancels
    # against the second block's, at 1e4's rounding (6e-4), far past float32's merge term
    "merge-rounds-at-partial-size": ("sigmoid_merge", {"deviation": "merge-rounds-at-partial-size", "merges": 2},
                                     build(n_q=2, n_k=4, d=2, d_v=2, seed=3).derive(
                                         entries_set, "k", (None, None, [0, 1]), 0.0).derive(
                                         entries_set, "k", (None, None, [2, 3]), 2.0).derive(
                                         entries_set, "v", (None, None, [0, 1]), 1e4).derive(
                                         entries_set, "q", (), 3.0).derive(with_keywords, scale=1.0),
                                     "float32", {}, None),
    "float32-result": ("float32_result", {"deviation": "float32-result"}, BASE, "float64", {}, None),
    # 6 keys in tiles of 4: two padding keys whose -inf x 0 is NaN in every row; below 0, -inf x scale = +inf is the
    # row's maximum and inf - inf NaN
    "padded-keys-nan-at-nonpositive-scale": ("padded_tile_scaled_after_masking",
                                             {"deviation": "padded-keys-nan-at-nonpositive-scale", "block_n": 4},
                                             BASE.derive(with_keywords, scale=0.0), "float64", {}, None),
    "padded-keys-nan-at-nonpositive-scale, below 0": ("padded_tile_scaled_after_masking",
                                                      {"deviation": "padded-keys-nan-at-nonpositive-scale",
                                                       "block_n": 4},
                                                      BASE.derive(with_keywords, scale=-0.5), "float64", {}, None),

    # a scale bfloat16 cannot hold (303 / 64 needs 9 bits): rounded to the dtype, it would move every score
    "scores-rounded-before-softmax": ("scores_rounded_in_half_precision",
                                      {"deviation": "scores-rounded-before-softmax"},
                                      build(heads=3, n_q=7, n_k=7, d=2, d_v=2).derive(with_keywords, scale=4.734375),
                                      "bfloat16", {}, None),
    "scores-rounded-before-softmax, the maximum subtracted in the dtype": (
        "max_subtracted_in_half_precision", {"deviation": "scores-rounded-before-softmax", "max_subtracted": "dtype"},
        build(heads=3, n_q=7, n_k=7, d=2, d_v=2, seed=4).derive(with_keywords, scale=4.734375),
        "bfloat16", {}, None),
}


def _oracle(trial: Trial, problem: Problem):
    return trial.oracle(problem) if np.all(np.isfinite(problem.k)) and np.all(np.isfinite(problem.v)) else None


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_deviation_explains_the_implementation_that_shows_it(case):
    name, fields, problem, dtype, extra, _ = CASES[case]
    variant = _variant(name, dtype)
    run = _run(variant, fields)
    trial = Trial(variant, problem, past_range=dtype == "float16")
    with deviation_mode(run):
        seen = trial.check_output(trial.call_raw(problem, **extra), problem, finite=False)
    assert run.fired == {run.rows[0].deviation.describe()}, (case, run.explained)
    oracle = _oracle(trial, problem)
    if oracle is not None:  # what the property sees is the oracle's within its allowance
        trial.expect_close(seen, oracle[0].out, oracle[1])
    else:  # a poisoned call: the oracle's values wherever they are finite
        reference = attention(*trial.exact_inputs(problem), finite=False, **trial.oracle_kwargs(problem)).out
        finite = np.isfinite(reference)
        np.testing.assert_allclose(seen[finite], reference[finite], rtol=1e-12, atol=1e-12)


def test_a_row_the_model_changes_is_explained_whole_where_an_element_equals_the_oracles():
    """Values whose column 0 sums to 0 over the keys: the keyless row's mean is exactly 0 there, as the oracle's row
    is, while float32's weights of 1/6 leave a rounding. That element is the model's all the same: judged within its
    allowance and seen as the oracle's 0 (a property asking a keyless row for exactly 0 sees 0), one off it refused."""
    problem = _hiding(BASE, [0]).derive(entries_set, "v", (None, None, None, 0),
                                                [5.0, 0.0, 2.0, -1.0, 2.0, -8.0])
    fields = {"deviation": "keyless-row-mean"}
    variant = _variant("keyless_row_mean_added", "float32")
    assert np.all(np.asarray(Trial(variant, problem).call_raw(problem))[:, :, 0, 0] != 0)
    with deviation_mode(_run(variant, fields)):
        seen = Trial(variant, problem).call_raw(problem)
    assert np.all(np.asarray(seen)[:, :, 0, :] == 0)
    wrong = _variant("keyless_row_mean_added", "float32", perturb=_shifted((1, 1, 0, 0), 1e-3))
    with deviation_mode(_run(wrong, fields)), pytest.raises(PropertyViolation, match="declared deviations predict"):
        Trial(wrong, problem).call_raw(problem)


def test_an_implementation_that_conforms_where_a_deviation_could_show_passes_and_one_off_both_does_not():
    """flex's compiled kernel zeroes a row with a NaN score at some sizes and returns the oracle's NaN at others: a
    declared nan-score-row-zero accepts either in each element, and refuses a row that is neither."""
    problem = _poisoned(BASE, keys=[(1, 0, 3)])
    fields = {"deviation": "nan-score-row-zero"}
    variant = _variant("reference", "float64")
    with deviation_mode(_run(variant, fields)):
        seen = Trial(variant, problem).call_raw(problem)
    assert np.isnan(seen[1, 0]).all() and np.isfinite(seen[0]).all()
    half = _variant("reference", "float64", perturb=lambda out: np.where(np.isnan(out), 0.5, out))
    with deviation_mode(_run(half, fields)), pytest.raises(PropertyViolation, match="declared deviations predict"):
        Trial(half, problem).call_raw(problem)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_deviation_refuses_one_more_wrong_element(case):
    name, fields, problem, dtype, extra, element = CASES[case]
    trial = Trial(_variant(name, dtype), problem, past_range=dtype == "float16")
    out = np.asarray(trial.call_raw(problem, **extra), dtype=np.float64)  # the implementation's own output
    if element is None and not np.isfinite(out).any():  # a call predicted NaN whole: one finite element is refused
        wrong = _variant(name, dtype, perturb=lambda got: np.where(np.arange(got.size).reshape(got.shape) == 0, 0.5,
                                                                   got))
    else:
        if element is None:  # its first finite element, explained or not: any value off the prediction is refused
            element = tuple(int(i) for i in np.argwhere(np.isfinite(out))[0])
        wrong = _variant(name, dtype, perturb=_shifted(element, 0.5))
    trial = Trial(wrong, problem, past_range=dtype == "float16")
    with deviation_mode(_run(wrong, fields)), pytest.raises(PropertyViolation, match="declared deviations predict"):
        trial.call_raw(problem, **extra)


def test_padded_keys_nan_at_nonpositive_scale_predicts_only_padded_non_causal_calls_at_scale_0_or_below():
    """NaN in every row where the last tile is padded, the call is not causal and the scale is 0 (-0.0 too), one the
    kernel's float32 rounds to 0 (5e-324), or negative; nothing where the keys fill their tiles, the call is causal
    (its mask, applied after the scale, hides the padding) or the scale is positive in float32, however small."""
    deviation = deviation_from_fields("padded-keys-nan-at-nonpositive-scale", {"block_n": 4}, "test")
    p = BASE  # 6 keys

    def predicted(n_k=6, **keywords):
        problem = build(batch=2, heads=2, n_q=4, n_k=n_k, d=4, d_v=3, seed=5)
        return deviation.non_finite(Call(problem.q, problem.k, problem.v, keywords))

    for scale in (0.0, -0.0, -1.0, -1e6, 5e-324, 1e-310, np.float64(-5e-324)):
        assert predicted(scale=scale)["out"].all() and predicted(scale=scale)["lse"].shape == p.q.shape[:3]
    assert predicted(n_k=8, scale=0.0) == {} and predicted(scale=-1.0, causal=True) == {}
    assert predicted(scale=1e-30) == {} and predicted(scale=1e-40) == {} and predicted() == {}  # 1e-40: float32's


def test_two_ignored_keywords_compose_and_one_declared_alone_does_not_explain_the_other():
    """A call with a window and a cap, both ignored: each row alone models attention with the other keyword still
    read, so only the two declared together explain the output (attention with neither), and one element off is
    refused."""
    problem = BASE.derive(with_keywords, window_size=(1, 1), softcap=0.5)
    rows = [{"deviation": "ignores-keyword", "keyword": keyword} for keyword in ("window_size", "softcap")]
    variant = _variant("window_and_softcap_ignored", "float64")
    with deviation_mode(_run(variant, *rows)) as run:
        seen = Trial(variant, problem).call_raw(problem)
    assert run.fired == {"ignores-keyword (keyword='softcap')", "ignores-keyword (keyword='window_size')"}
    np.testing.assert_allclose(seen, Trial(variant, problem).oracle(problem)[0].out, rtol=1e-12, atol=1e-12)
    for declared in rows:
        with deviation_mode(_run(variant, declared)), pytest.raises(PropertyViolation,
                                                                     match="declared deviations predict"):
            Trial(variant, problem).call_raw(problem)
    wrong = _variant("window_and_softcap_ignored", "float64", perturb=_shifted((1, 0, 2, 1), 0.5))
    with deviation_mode(_run(wrong, *rows)), pytest.raises(PropertyViolation, match="declared deviations predict"):
        Trial(wrong, problem).call_raw(problem)


LSE_CASES = {
    "keyless-lse-finite": ("keyless_lse_finite", {"deviation": "keyless-lse-finite", "fill": LARGE_NEGATIVE},
                           _hiding(BASE, [0, 2])),
    "keyless-lse-plus-inf": ("flash_conventions", {"deviation": "keyless-lse-plus-inf"}, _hiding(BASE, [1])),
    "keyless-lse-zero": ("keyless_lse_zero", {"deviation": "keyless-lse-zero"}, _hiding(BASE, [1, 3])),
    "causal-alibi-lse-shift": ("flash_conventions", {"deviation": "causal-alibi-lse-shift"},
                               BASE.derive(with_keywords, causal=True).derive(with_arrays, alibi_slopes=[0.5, 0.25])),
}


@pytest.mark.parametrize("case", sorted(LSE_CASES))
def test_a_log_sum_exp_deviation_explains_its_convention_and_refuses_another(case):
    name, fields, problem = LSE_CASES[case]
    variant = _variant(name, "float64")
    run = _run(variant, fields)
    trial = Trial(variant, problem)
    with deviation_mode(run):
        _, lse = trial.call_raw(problem, return_lse=True)
    oracle, _ = trial.oracle(problem)
    assert run.fired == {run.rows[0].deviation.describe()}, run.explained
    np.testing.assert_array_equal(np.isfinite(lse), np.isfinite(oracle.lse))
    finite = np.isfinite(oracle.lse)
    np.testing.assert_allclose(np.asarray(lse)[finite], oracle.lse[finite], rtol=1e-12)

    def lse_off(result):
        out, lse = result
        lse = np.array(lse, copy=True)
        lse[0, 0, 3] += 0.5  # a row that sees keys in every case
        return out, lse

    fn = variant.impl.fn
    wrong = Variant(dataclasses.replace(variant.impl, fn=lambda *a, **kw: lse_off(fn(*a, **kw))), "float64")
    with deviation_mode(_run(wrong, fields)), pytest.raises(PropertyViolation, match="declared deviations predict"):
        Trial(wrong, problem).call_raw(problem, return_lse=True)


def test_rejects_explains_its_error_and_no_other():
    problem = BASE.derive(with_keywords, scale=np.array(0.5))
    variant = _variant("scale_must_be_float", "float64")
    fields = {"deviation": "rejects", "raises": "TypeError", "match": r"'scale' must be float"}
    run = _run(variant, fields)
    with deviation_mode(run), pytest.raises(ExplainedStop):
        Trial(variant, problem).call(problem)
    assert run.fired
    other = {**fields, "match": "must be a tensor"}
    with deviation_mode(_run(variant, other)), pytest.raises(PropertyViolation, match="raised TypeError"):
        Trial(variant, problem).call(problem)


READINGS = {  # reads: (the fixture that reads v longer than k so, the problem, the readings it is not)
    "keys-past-the-end-read-as-zeros": ("keys_past_the_end_zero",
        BASE.derive(values_lengthened, [(2, 3.0, 0.0)]), ["values-past-the-keys-ignored"]),
    "keys-past-the-end-undefined": ("keys_past_the_end_read_from_anywhere",
        BASE.derive(values_lengthened, [(2, 1.0, 0.0)]), []),
    # the mean, the first value: not the sum
    "one-key-weight-summed-over-values": ("one_key_weight_summed", build(heads=2, n_q=3, n_k=1, d=4, seed=3).derive(
        values_lengthened, [(1, 2.0, 1.0), (1, 1.0, -3.0)]),
        ["length-one-keys-broadcast", "values-past-the-keys-ignored"]),
}


def _judge_acceptance(variant: Variant, reads: str, problem: Problem) -> None:
    """The variant's answer to v longer than k, judged in deviation mode under accepts(reads): raises ExplainedStop
    when the reading explains it, PropertyViolation when not."""
    with deviation_mode(_run(variant, {"deviation": "accepts", "reads": reads})):
        Trial(variant, problem).expect_raised(problem, "v longer than k")


@pytest.mark.parametrize("reads", sorted(READINGS))
def test_accepts_explains_the_reading_it_documents_and_refuses_another_output(reads):
    fixture, problem, others = READINGS[reads]
    variant = _variant(fixture, "float64")
    with pytest.raises(ExplainedStop):
        _judge_acceptance(variant, reads, problem)
    for other in others:
        with pytest.raises(PropertyViolation, match="declared deviations predict"):
            _judge_acceptance(variant, other, problem)


def test_an_undefined_reading_explains_an_output_of_the_protocols_shape_only_and_its_twin_is_caught():
    reads = "keys-past-the-end-undefined"
    fixture, problem, _ = READINGS[reads]
    trial = Trial(_variant(fixture, "float64"), problem)
    raw = trial.call_raw(problem)
    deviations = (deviation_from_fields("accepts", {"reads": reads}, "test"),)
    wider = perturb._accepted_perturbed(trial, problem, raw, deviations)  # the twin's: one column more
    assert wider.shape == raw.shape[:-1] + (raw.shape[-1] + 1,)
    widened = _variant(fixture, "float64", perturb=lambda out: np.concatenate([out, np.zeros(out.shape[:-1] + (1,))],
                                                                              axis=-1))
    with pytest.raises(PropertyViolation, match="instead of raising"):
        _judge_acceptance(widened, reads, problem)


def test_leading_bias_axes_and_a_bias_of_no_key_are_read_as_flax_reads_them():
    one = build(d=8, d_v=8, seed=2)
    broadcast = deviation_from_fields("accepts", {"reads": "leading-bias-axes-broadcast"}, "test")
    rank5 = np.zeros((1,) + one.q.shape[:3] + (one.n_k,))
    read = broadcast.accepts(Call(one.q, one.k, one.v, {"bias": rank5}), "a bias of rank 5")
    assert np.shape(read.keywords["bias"]) == rank5.shape[1:]
    assert broadcast.accepted_output(np.zeros((1, 1, 1, 1, 8))).shape == (1, 1, 1, 8)
    assert broadcast.accepted_output(np.zeros((2, 1, 1, 1, 8))).shape == (2, 1, 1, 1, 8)  # not a length-1 axis
    assert broadcast.accepts(Call(one.q, one.k, one.v, {"bias": np.zeros((2,) + rank5.shape[1:])}), "") is None
    length_one = deviation_from_fields("accepts", {"reads": "length-one-keys-broadcast"}, "test")
    read = length_one.accepts(Call(one.q, one.k, one.v, {"bias": np.zeros(one.q.shape[:3] + (0,))}), "")
    assert np.all(read.oracle.out == 0), "a bias of no key against one key leaves the row no key: output 0"


def test_a_keyless_row_of_a_padded_pack_averages_the_padding_too():
    """jax.nn's sequence lengths pad each sequence with zero keys and values to the pack's longest: a row with no key
    is its values' sum over that length, which the call's `pack_keys` gives; without it, their mean."""
    problem = _hiding(build(n_q=3, n_k=4, d=4, seed=9), [1])
    q, k, v = problem.q, problem.k, problem.v
    keywords = {"mask": problem.mask}
    padded = deviation_from_fields("keyless-row-mean", {"masked_scores": "replaced", "pack_padding": "zeros"}, "t")
    plain = deviation_from_fields("keyless-row-mean", {"masked_scores": "replaced"}, "t")
    oracle = attention(q, k, v, **keywords)
    summed = v[0, 0].sum(axis=0)
    np.testing.assert_allclose(padded.transform(oracle, q, k, v, {**keywords, "pack_keys": 10}).out[0, 0, 1],
                               summed / 10, rtol=1e-12)
    np.testing.assert_allclose(plain.transform(oracle, q, k, v, {**keywords, "pack_keys": 10}).out[0, 0, 1],
                               summed / 4, rtol=1e-12)
    np.testing.assert_allclose(padded.transform(oracle, q, k, v, keywords).out[0, 0, 1], summed / 4, rtol=1e-12)


def test_report_deviations_explain_their_own_findings_only():
    reports = deviation_from_fields("checker-reports", {"checker": "racecheck", "match": "data race"}, "test")
    assert reports.explains_report("racecheck reports a defect in k.cu: WARNING: ThreadSanitizer: data race",
                                   {"checker": "racecheck"})
    assert not reports.explains_report("racecheck reports a defect in k.cu: heap-use-after-free",
                                       {"checker": "racecheck"})
    assert not reports.explains_report("memcheck reports a defect: data race", {"checker": "memcheck"})
    matrix = deviation_from_fields("keeps-score-matrix", {}, "test")
    assert matrix.explains_report("peak", {"resident_growth": 3 * 2**20, "score_matrix_bytes": 2**20})
    assert not matrix.explains_report("peak", {"resident_growth": 9 * 2**20, "score_matrix_bytes": 2**20})
    assert not matrix.explains_report("peak", {"resident_growth": 2**18 - 1, "score_matrix_bytes": 2**20})


def test_the_shared_memory_kernel_deviation_predicts_where_its_output_is_defined():
    deviation = deviation_from_fields("unwritten-shared-memory-read", {"block_threads": 128,
                                                                      "block_keyword": "block_threads"}, "test")
    one = build(n_q=1, n_k=1, d=4, d_v=4, seed=1)
    k = np.full_like(one.k, np.nan)
    mask, values = deviation.predicted_values(Call(one.q, k, one.v))["out"]
    assert mask.all() and np.array_equal(values, np.broadcast_to(one.v[:, :, :1], mask.shape))
    two = build(n_q=2, n_k=2, d=4, d_v=4, seed=2)
    assert deviation.undefined(Call(two.q, two.k, two.v))["out"].all()
    assert deviation.undefined(Call(two.q, two.k, two.v, tiles={"block_threads": 1})) == {}
    model = deviation.transform(attention(two.q, two.k, two.v), two.q, two.k, two.v, {"block_threads": 1})
    s = np.stack([np.sum(two.q * two.q, -1), np.sum(two.q * two.k, -1)], -1) / 2.0
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    np.testing.assert_allclose(model.out, w[..., :1] * two.v[:, :, :1] + w[..., 1:] * two.v[:, :, 1:], rtol=1e-14)


def test_every_deviation_of_the_catalogue_is_shown_here_or_in_a_suite_run():
    shown = {fields["deviation"] for _, fields, *_ in CASES.values()} | {
        fields["deviation"] for _, fields, *_ in LSE_CASES.values()} | {
        "rejects", "accepts", "checker-reports", "keeps-score-matrix", "unwritten-shared-memory-read",
        "padded-keys-weight-overflow",
        "dq-accumulator-aliases-step-buffer",  # tests/unit/test_ring_backward_deviation.py
        "raises-on-empty-ring-block",  # test_ring_step_deviations.py, tests/distributed/test_modelled_raise.py
        "backward-fails-on-one-rank"}  # the same two
    elsewhere = {  # shown on the records that have them, through the gradient properties (tests/suite_run)
        "hidden-nonfinite-reaches-gradients", "gqa-backward-rounds-per-head"}
    assert set(CATALOGUE) == shown | elsewhere, set(CATALOGUE) ^ (shown | elsewhere)


def test_padded_keys_weight_overflow_predicts_the_rows_whose_dq_is_nan_and_refuses_another():
    """Row 0's scores all lie near -95 (lse below -88.72), row 1's near 0: with 3 keys in tiles of 32 the padding
    weighs exp(-lse), infinite for row 0 only. Its dQ NaN is explained; a NaN in row 1 too is refused; a causal call,
    or 32 keys (no padding), predict nothing. In float16, dS = exp(-lse) D overflows from 65520: one query at lse
    -10.5 with D = 16 is predicted, with D = 1 not."""
    problem = build(n_q=2, n_k=3, d=2, d_v=2, seed=1).derive(entries_set, "q", (None, None, 0), [95.0, 0.0]).derive(
        entries_set, "k", (None, None, None, 0), -1.0).derive(entries_set, "k", (None, None, None, 1), 0.0).derive(
        with_keywords, scale=1.0)
    d_out = np.ones(problem.q.shape[:3] + (problem.v.shape[-1],))
    fields = {"deviation": "padded-keys-weight-overflow", "block_n": 32}
    deviation = deviation_from_fields("padded-keys-weight-overflow", {"block_n": 32}, "test")

    def predicted(p, dtype="float64", causal=False, cotangent=d_out):
        keywords = {**p.kwargs(), "causal": causal}
        return deviation.non_finite_gradients(Call(p.q, p.k, p.v, keywords, dtype, d_out=cotangent))

    assert predicted(problem)["dq"][0, 0, :, 0].tolist() == [True, False]
    assert predicted(problem, causal=True) == {}
    wide = build(n_k=32, d=2, d_v=2).derive(entries_set, "q", (), -95.0).derive(entries_set, "k", (), 1.0)
    assert predicted(wide, cotangent=np.ones(wide.q.shape[:3] + (2,))) == {}
    for value, nan in ((1.0, True), (1 / 16, False)):  # D = 16 value: -lse + ln D = 13.3 or 10.5 against 11.09
        one = build(n_q=1, n_k=1, d=16, d_v=16).derive(entries_set, "q", (), -2.625).derive(
            entries_set, "k", (), 1.0).derive(entries_set, "v", (), value)
        assert bool(predicted(one, "float16", cotangent=np.ones((1, 1, 1, 16)))) == nan, value
    variant = _variant("reference", "float64")
    trial = Trial(variant, problem)
    grads = attention_backward(problem.q, problem.k, problem.v, d_out, **trial.oracle_kwargs(problem))
    nan_row = grads[0].copy()
    nan_row[..., 0, :] = np.nan
    run = _run(variant, fields)
    with deviation_mode(run):
        judge_gradients(trial, problem, d_out, {}, (), (nan_row, *grads[1:]))
    assert run.fired == {"padded-keys-weight-overflow (block_n=32)"}
    nan_row[..., 1, 0] = np.nan
    with deviation_mode(_run(variant, fields)), pytest.raises(PropertyViolation, match="declared deviations predict"):
        judge_gradients(trial, problem, d_out, {}, (), (nan_row, *grads[1:]))


def test_a_deviation_predicts_for_the_call_as_the_others_read_it():
    """The window hides key 1 from the only row, whose one visible score is -95 (lse -95: padded keys would make dQ
    NaN); the implementation ignores the window, so the row also sees key 1's score 0 (lse about 0) and its dQ is
    finite. padded-keys-weight-overflow predicts for the call without the window: no NaN, the gradients explained."""
    problem = build(n_q=1, n_k=2, d=2, d_v=2, seed=3).derive(entries_set, "q", (), [95.0, 0.0]).derive(
        entries_set, "k", (None, None, 0), [-1.0, 0.0]).derive(entries_set, "k", (None, None, 1), 0.0).derive(
        with_keywords, scale=1.0, window_size=(0, 0))
    variant = _variant("window_ignored", "float64")
    trial = Trial(variant, problem)
    d_out = np.ones(problem.q.shape[:3] + (problem.v.shape[-1],))
    keywords = {key: value for key, value in trial.oracle_kwargs(problem).items() if key != "window_size"}
    grads = attention_backward(problem.q, problem.k, problem.v, d_out, **keywords)
    run = _run(variant, IGNORED_WINDOW, {"deviation": "padded-keys-weight-overflow", "block_n": 32})
    with deviation_mode(run):
        judge_gradients(trial, problem, d_out, {}, (), grads)
    assert run.fired == {"ignores-keyword (keyword='window_size')"}


@pytest.mark.parametrize(("name", "parameter"), [("padded-keys-weight-overflow", "block_n"),
                                                 ("merge-rounds-at-partial-size", "merges"),
                                                 ("key-blocks-normalised-alone", "block"),
                                                 ("unwritten-shared-memory-read", "block_threads")])
@pytest.mark.parametrize("value", [0, True, 2.0, None])
def test_a_count_parameter_that_is_not_a_positive_int_is_refused_by_name(name, parameter, value):
    with pytest.raises(DeviationError, match=f"{name}: {parameter} is a positive int"):
        CATALOGUE[name](**{parameter: value})
