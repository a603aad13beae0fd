"""dq-accumulator-aliases-step-buffer (specs.deviations.ring_backward): its prediction of a rank's dQ (and of dK
where flash-attn's backward reads dO misplaced) against the library's ring, zigzag and stripe backwards re-enacted in
memory (tests/fixtures/ring_dq_buffer.py), for 2, 3 and 4 ranks, causal or not, GQA, head dim 1 or more; dK and dV
undefined (a race) for float32 on two ranks or more only; the harness hands it the group size and layout a sharded
call ran on; one more wrong element, another wrong accumulation or another misreading of dO is refused, and a
correct backward passes."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from harness.api.explain import deviation_call, judge_gradients
from harness.api.trial import Trial
from harness.engine.explanation import DeviationRun, deviation_mode
from protocol.expectation_rows import Expectation
from protocol.registry import Variant, load_impl
from specs.derivations import spans_taken, with_keywords
from specs.deviations import Call, deviation_from_fields
from specs.gradients import drawn_cotangent
from specs.problems import build
from specs.tolerance import gradient_allowance
from tests.fixtures.ring_dq_buffer import ring_backward_dq

NAME = "dq-accumulator-aliases-step-buffer"
DEVIATION = deviation_from_fields(NAME, {}, "test")
RING = "impls/distributed/distributed_records.py:ring"
DENSE = "impls/numpy/numpy_reference.py:reference_attention"


def _problem(causal: bool, gqa: bool, d: int = 4):
    return build(batch=2, heads=4 if gqa else 2, heads_kv=2, n_q=24, n_k=24, d=d, d_v=d, seed=7, causal=causal)


def _d_out(problem):
    return drawn_cotangent(problem.q.shape[:3] + (problem.v.shape[-1],), 3, np.float64)


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag", "stripe"])
@pytest.mark.parametrize(("d", "gqa"), [(1, True), (4, False)])
def test_the_prediction_is_the_re_enacted_ring_backward_within_its_allowance(world, causal, dtype, layout, d, gqa):
    problem = _problem(causal, gqa, d)
    q, k, v = (x.astype(dtype).astype(np.float64) for x in (problem.q, problem.k, problem.v))
    d_out = _d_out(problem).astype(dtype).astype(np.float64)
    call = Call(q, k, v, problem.kwargs(), dtype, d_out=d_out, tiles={"world_size": world, "layout": layout})
    predicted, extra = DEVIATION.predicted_values(call), DEVIATION.extra_allowance(call)
    oracle = gradient_allowance(q, k, v, d_out, dtype=dtype, **problem.kwargs())
    got = ring_backward_dq(q, k, v, d_out, world=world, causal=causal, dtype=dtype, layout=layout)
    for index, name in enumerate(("dq", "dk")):
        if name not in predicted:  # dK: predicted where a rank misreads dO (float32's is undefined)
            assert d > 1 or dtype == "float32"
            continue
        mask, value = predicted[name]
        assert mask.all()
        assert np.all(np.abs(got[index] - value) <= oracle.allowances[index].bound + extra[name])
    beyond = np.abs(got[0] - oracle.grads[0]) > oracle.allowances[0].bound
    # float32: every rank past its first block overwrites or doubles a share (causal rank 0 computes one block
    # only); head dim 1: ranks past the first misread dO; float16's copy with head dims above 1 leaves only rounding
    if dtype == "float32" or d == 1:
        assert beyond[:, :, 24 // world:].any()


def test_a_forward_call_or_scores_it_does_not_model_get_no_prediction():
    problem = _problem(False, False)
    d_out = _d_out(problem)
    assert DEVIATION.predicted_values(Call(problem.q, problem.k, problem.v, tiles={"world_size": 2})) == {}
    assert DEVIATION.predicted_values(Call(problem.q, problem.k, problem.v, d_out=d_out)) == {}  # no group size
    capped = problem.derive(with_keywords, softcap=5.0)
    assert DEVIATION.predicted_values(Call(capped.q, capped.k, capped.v, capped.kwargs(), "float32", d_out=d_out,
                                           tiles={"world_size": 2})) == {}


def test_the_group_size_of_a_sharded_call_reaches_the_deviations():
    problem = _problem(False, False)
    ring = Trial(Variant(load_impl(RING), "float32"), problem)
    assert deviation_call(ring, problem, {"world_size": 2}).tiles == {"world_size": 2, "layout": "contiguous"}
    assert deviation_call(ring, problem).tiles["world_size"] in (2, 3, 4)  # the adapter's choice for 24 positions
    dense = Trial(Variant(load_impl(DENSE), "float32"), problem)
    assert "world_size" not in deviation_call(dense, problem).tiles


def _judged(grads, problem, d_out, dtype="float32", world=2):
    """judge_gradients on the ring record's variant, on `world` ranks, the deviation declared: the run."""
    trial = Trial(Variant(load_impl(RING), dtype), problem)
    run = DeviationRun((Expectation("ring", "sharded-equals-global", "fixture", (dtype,), DEVIATION),))
    with deviation_mode(run):
        judge_gradients(trial, problem, d_out, {"world_size": world}, (), grads)
    return run


@pytest.mark.parametrize(("dtype", "world", "undefined"), [("float32", 2, True), ("float32", 1, False),
                                                           ("float16", 2, False)])
def test_dk_and_dv_are_undefined_for_float32_on_two_ranks_or_more_only(dtype, world, undefined):
    """Garbage in dK and dV is explained where the race leaves them undefined, and refused elsewhere."""
    problem = _problem(False, False)
    q, k, v = (x.astype(dtype).astype(np.float64) for x in (problem.q, problem.k, problem.v))
    d_out = _d_out(problem).astype(dtype).astype(np.float64)
    oracle = gradient_allowance(q, k, v, d_out, dtype=dtype, **problem.kwargs())
    dq = DEVIATION.predicted_values(Call(q, k, v, problem.kwargs(), dtype, d_out=d_out,
                                         tiles={"world_size": world}))["dq"][1]
    garbage = (dq, -oracle.grads[1], 3 * oracle.grads[2])
    if undefined:
        assert _judged(garbage, problem, d_out, dtype, world).fired == {NAME}
    else:
        with pytest.raises(PropertyViolation, match="dK differs from what the declared deviations predict"):
            _judged(garbage, problem, d_out, dtype, world)


def _one_element_between(predicted: np.ndarray, true: np.ndarray) -> np.ndarray:
    """`predicted` with the element farthest from the true gradient moved halfway to it: neither."""
    wrong = predicted.copy()
    at = np.unravel_index(np.argmax(np.abs(predicted - true)), true.shape)
    wrong[at] = (predicted[at] + true[at]) / 2
    return wrong


@pytest.mark.parametrize("causal", [False, True])
def test_the_aliased_backward_is_explained_and_one_more_wrong_element_or_another_accumulation_is_not(causal):
    problem = _problem(causal, True)
    q, k, v = (x.astype(np.float32).astype(np.float64) for x in (problem.q, problem.k, problem.v))
    d_out = _d_out(problem).astype(np.float32).astype(np.float64)
    oracle = gradient_allowance(q, k, v, d_out, dtype="float32", **problem.kwargs())
    _, dk, dv = oracle.grads
    aliased, _ = ring_backward_dq(q, k, v, d_out, world=2, causal=causal, dtype="float32")
    assert _judged((aliased, dk, dv), problem, d_out).fired == {NAME}
    assert _judged(oracle.grads, problem, d_out).fired == set()  # a correct backward conforms
    one_off = _one_element_between(aliased, oracle.grads[0])
    halved = aliased.copy()
    halved[:, :, 12:] /= 2  # the last share once: a buffer copied but the earlier steps dropped
    for wrong in (one_off, halved):
        with pytest.raises(PropertyViolation, match="declared deviations predict"):
            _judged((wrong, dk, dv), problem, d_out)


@pytest.mark.parametrize("causal", [False, True])
def test_the_misread_d_out_is_explained_in_dq_and_dk_and_half_of_it_is_not(causal):
    """float16, head dim 1: dQ and dK follow rowsum(O * dO) taken from misplaced dO elements; one dK element that is
    neither the prediction nor the true gradient is refused."""
    problem = _problem(causal, True, d=1)
    q, k, v = (x.astype(np.float16).astype(np.float64) for x in (problem.q, problem.k, problem.v))
    d_out = _d_out(problem).astype(np.float16).astype(np.float64)
    oracle = gradient_allowance(q, k, v, d_out, dtype="float16", **problem.kwargs())
    dq, dk = ring_backward_dq(q, k, v, d_out, world=3, causal=causal, dtype="float16")
    assert _judged((dq, dk, oracle.grads[2]), problem, d_out, "float16", 3).fired == {NAME}
    with pytest.raises(PropertyViolation, match="dK differs from what the declared deviations predict"):
        _judged((dq, _one_element_between(dk, oracle.grads[1]), oracle.grads[2]), problem, d_out, "float16", 3)


def test_float16_shares_past_its_range_are_inf_and_a_backward_that_keeps_them_finite_is_refused():
    """float16, head dim 1, scores near 1000 (the peers run's example): the misread dO makes shares of dQ and dK past
    65504, which the float16 buffers hold as inf, and one dQ element lands within its error of 65408 (past it the
    ring's bfloat16 dQ is 65536, inf as float16): explained. A backward whose buffers saturate at 65504 instead (in
    dQ or in dK) is refused."""
    problem = spans_taken(build(heads=2, n_q=5, n_k=5, seed=2, score_style="large", value_style="offset"),
                          queries=(0, 4), keys=(0, 4))
    q, k, v = (x.astype(np.float16).astype(np.float64) for x in (problem.q, problem.k, problem.v))
    d_out = drawn_cotangent(q.shape[:3] + (v.shape[-1],), 2, np.float16).astype(np.float64)
    oracle = gradient_allowance(q, k, v, d_out, dtype="float16")
    dq, dk = ring_backward_dq(q, k, v, d_out, world=2, causal=False, dtype="float16")
    assert np.isinf(dq).sum() == 2 and np.isinf(dk).sum() == 2  # one of dQ's: the element within its error
    assert _judged((dq, dk, oracle.grads[2]), problem, d_out, "float16").fired == {NAME}
    saturated_dq, saturated_dk = (np.clip(g, -65504.0, 65504.0) for g in (dq, dk))
    for wrong in ((saturated_dq, dk), (dq, saturated_dk)):
        with pytest.raises(PropertyViolation, match="declared deviations predict"):
            _judged((*wrong, oracle.grads[2]), problem, d_out, "float16")


def test_float16_shares_that_cancel_past_its_range_are_nan_where_the_oracle_is_0():
    """docs/findings/ring_flash_attn_float16_dq_share_overflows_its_buffer.py's example (every key 500, values +-400
    by block, head dim 2): each row's dQ is 0, its two shares +-70,711; the prediction is NaN, as the re-enactment in
    memory gives."""
    q = np.tile([1.0, 0.0], (1, 1, 4, 1))
    k = np.tile([500.0, 0.0], (1, 1, 4, 1))
    v = np.array([[400.0, 0.0], [400.0, 0.0], [-400.0, 0.0], [-400.0, 0.0]]).reshape(1, 1, 4, 2)
    d_out = np.tile([1.0, 0.0], (1, 1, 4, 1))
    call = Call(q, k, v, {}, "float16", d_out=d_out, tiles={"world_size": 2, "layout": "contiguous"})
    judged, value = DEVIATION.predicted_values(call)["dq"]
    dq, _ = ring_backward_dq(q, k, v, d_out, world=2, causal=False, dtype="float16")
    assert judged.all() and np.isnan(value[..., 0]).all() and np.isnan(dq[..., 0]).all()
    oracle = gradient_allowance(q, k, v, d_out, dtype="float16")
    assert np.all(oracle.grads[0] == 0.0)


def test_float16_blocks_that_cancel_reach_dq_through_the_stored_out_and_twice_their_rounding_does_not():
    """The peers run's example (2 heads over 1 kv head, head dim 1, integer scores and values, two ranks): a row's
    two blocks' outs, near +-3.9, are returned in float16 and cancel in the merge, so the misread dO's rowsum(O * dO)
    carries their rounding into dQ (1.1e-3 in memory, 1.2e-3 from the library, where the re-enactment from the exact
    out gives -2e-7): explained, as is the backward from the exact out. A dQ off at that element by three times what
    the allowance grants beyond the gradient rule (the shares' rounding and the stored out's error) is refused."""
    problem = spans_taken(build(batch=2, heads=2, n_q=5, n_k=5, seed=14, score_style="integers",
                                value_style="integers"), queries=(0, 4), keys=(0, 4))
    q, k, v = (x.astype(np.float16).astype(np.float64) for x in (problem.q, problem.k, problem.v))
    d_out = Trial(Variant(load_impl(RING), "float16"), problem).cotangent(problem, 14).astype(np.float64)
    oracle = gradient_allowance(q, k, v, d_out, dtype="float16")
    dq, dk = ring_backward_dq(q, k, v, d_out, world=2, causal=False, dtype="float16")
    call = Call(q, k, v, {}, "float16", d_out=d_out, tiles={"world_size": 2, "layout": "contiguous"})
    predicted = DEVIATION.predicted_values(call)
    assert abs(dq[0, 1, 2, 0] - predicted["dq"][1][0, 1, 2, 0]) > 1e-3  # the stored out's rounding
    assert _judged((dq, dk, oracle.grads[2]), problem, d_out, "float16").fired == {NAME}
    assert _judged((predicted["dq"][1], predicted["dk"][1], oracle.grads[2]), problem, d_out,
                   "float16").fired == {NAME}
    allowance = oracle.allowances[0].bound + DEVIATION.extra_allowance(call)["dq"]
    wrong = predicted["dq"][1].copy()
    wrong[0, 1, 2, 0] += 3 * (allowance[0, 1, 2, 0] - oracle.allowances[0].bound[0, 1, 2, 0])
    with pytest.raises(PropertyViolation, match="declared deviations predict"):
        _judged((wrong, dk, oracle.grads[2]), problem, d_out, "float16")


def test_float16_ds_below_the_smallest_normal_rounds_absolutely_and_that_reaches_dk():
    """The peers run's next example (2 heads over 1 kv head, head dim 1, queries up to 92, two ranks): the misread
    dO makes dS of about 1e-8, below float16's smallest normal, where the kernel's ds.to(float16) errs by up to half
    the smallest subnormal whatever dS is, and dK sums it over queries of up to 92: dK[1, 0, 11, 0] is 1.55e-6 in
    memory (the library's exactly), 1.40e-6 from the float64 dS, 1.5e-7 apart where the gradient rule allows 6e-8.
    Explained; a dK past the allowance at that element is refused."""
    problem = build(batch=2, heads=2, n_q=14, n_k=14, seed=14, score_style="large", value_style="offset")
    q, k, v = (x.astype(np.float16).astype(np.float64) for x in (problem.q, problem.k, problem.v))
    d_out = Trial(Variant(load_impl(RING), "float16"), problem).cotangent(problem, 14).astype(np.float64)
    oracle = gradient_allowance(q, k, v, d_out, dtype="float16")
    dq, dk = ring_backward_dq(q, k, v, d_out, world=2, causal=False, dtype="float16")
    call = Call(q, k, v, {}, "float16", d_out=d_out, tiles={"world_size": 2, "layout": "contiguous"})
    predicted = DEVIATION.predicted_values(call)["dk"][1]
    at = (1, 0, 11, 0)
    assert abs(dk[at] - predicted[at]) > 2 * oracle.allowances[1].bound[at]
    assert _judged((dq, dk, oracle.grads[2]), problem, d_out, "float16").fired == {NAME}
    wrong = dk.copy()
    wrong[at] = predicted[at] + 2 * DEVIATION.extra_allowance(call)["dk"][at] + oracle.allowances[1].bound[at]
    with pytest.raises(PropertyViolation, match="declared deviations predict"):
        _judged((dq, wrong, oracle.grads[2]), problem, d_out, "float16")
