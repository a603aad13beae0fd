"""raises-on-empty-ring-block through the harness (specs.deviations.errors): a sharded call's raise is explained only
where the group it ran on gives some rank an empty block, the group a property asked for (world_size) included, and
only from a rank that has one. The fixture's rank 0 asserts on every causal call, so only the modelled condition
tells the explained raises from the others. And backward-fails-on-one-rank: a backward's raise is explained on a group
of one rank only (the call's cotangent reaches the deviation), not the same raise on four."""

from __future__ import annotations

import pytest

from harness.api.evidence import PropertyViolation
from harness.api.trial import Trial
from harness.engine.explanation import DeviationRun, ExplainedStop, deviation_mode
from protocol.expectation_rows import Expectation
from protocol.rank_pool import POOL
from protocol.registry import Variant, load_impl
from specs.derivations import with_keywords
from specs.deviations import deviation_from_fields
from specs.problems import build

FIXTURE = "tests/fixtures/sharded_impls.py:rank_zero_asserts_when_causal"


@pytest.fixture(scope="module")
def asserting():
    yield Variant(load_impl(FIXTURE), "float64")
    POOL.close()


def _run(variant: Variant, raises: str) -> DeviationRun:
    deviation = deviation_from_fields("raises-on-empty-ring-block", {"raises": raises}, "test")
    return DeviationRun((Expectation(variant.impl.name, "sdpa-formula", "fixture", ("float64",), deviation),))


def _causal(n: int):
    return build(n_q=n, n_k=n, d=2, d_v=2, seed=2).derive(with_keywords, causal=True)


def test_one_position_a_rank_explains_rank_zero_s_assertion(asserting):
    """n = 4 runs on four ranks (the largest group that fits): one position each, so ranks 0 to 2 have an empty
    block in the stripe ring's later steps."""
    problem = _causal(4)
    run = _run(asserting, "AssertionError")
    with deviation_mode(run), pytest.raises(ExplainedStop):
        Trial(asserting, problem).call(problem)
    assert run.fired == {"raises-on-empty-ring-block (raises='AssertionError')"}


@pytest.mark.parametrize(("n", "extra"), [(8, {}), (4, {"world_size": 2})])
def test_two_positions_a_rank_explain_nothing_the_asked_group_included(asserting, n, extra):
    """Four ranks of two positions, or the same n = 4 on the two ranks a property asked for: no block is empty, so
    the same assertion is this implementation's failure (judged on the group the call ran on, not the one the shape
    would pick)."""
    problem = _causal(n)
    with deviation_mode(_run(asserting, "AssertionError")), pytest.raises(PropertyViolation,
                                                                        match="raised AssertionError"):
        Trial(asserting, problem).call_raw(problem, **extra)


def test_another_error_type_is_not_the_behaviour(asserting):
    problem = _causal(4)
    with deviation_mode(_run(asserting, "ValueError")), pytest.raises(PropertyViolation, match="raised AssertionError"):
        Trial(asserting, problem).call(problem)


def test_a_backward_raising_on_one_rank_is_explained_and_on_four_is_not():
    """n = 1 runs on one rank, n = 4 on four: the fixture's backward raises on both, the deviation explains the
    first."""
    variant = Variant(load_impl("tests/fixtures/sharded_impls.py:backward_raises"), "float64")
    deviation = deviation_from_fields("backward-fails-on-one-rank", {}, "test")
    rows = (Expectation(variant.impl.name, "differentiable-end-to-end", "fixture", ("float64",), deviation),)
    for n, explained in ((1, True), (4, False)):
        problem = build(n_q=n, n_k=n, d=2, d_v=2, seed=3)
        trial = Trial(variant, problem)
        d_out = trial.cotangent(problem, 5)
        run = DeviationRun(rows)
        with deviation_mode(run), pytest.raises(ExplainedStop if explained else PropertyViolation):
            trial.gradients(problem, d_out)
        assert run.fired == ({"backward-fails-on-one-rank"} if explained else set())
        trial.call(problem)  # the forward runs on either group
