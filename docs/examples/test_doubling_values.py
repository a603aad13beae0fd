"""A new property: a weighted sum is linear in what it sums, so doubling the values doubles the output."""

from hypothesis import given
from hypothesis import strategies as st

from harness.api import Trial, checks, problem_step, problems_for


@problem_step
def values_doubled(p):
    """Every value times 2 (a step: the repro snippet of a failure calls it to rebuild the doubled problem)."""
    return p.replace(v=2 * p.v)


@checks("output-is-weighted-sum-of-values")
@given(data=st.data())
def test_doubling_the_values_doubles_the_output(variant, data):
    """out(2 V) = 2 out(V): each call is within its allowance of the oracle, which doubles exactly, so the
    allowance is the doubled call's plus twice the first's."""
    problem = data.draw(problems_for(variant), label="problem")
    doubled = problem.derive(values_doubled)
    once, twice = Trial(variant, problem), Trial(variant, doubled)
    _, allowance = once.oracle()
    _, allowance_doubled = twice.oracle()
    twice.expect_close(twice.call(), 2 * once.call(), allowance_doubled + allowance + allowance,
                       versus="2 out(V)")
