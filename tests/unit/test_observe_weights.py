"""Reading an implementation's weights through one-hot values (harness.api.observe) when it takes d_v = d only
(value_dim False, as flash-attn): with d < n_k, q and k are widened with zero columns to d = n_k and the scale is
passed at its value for the original d, so the weights read are the original problem's."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.evidence import PropertyViolation
from harness.api.observe import observe_weights
from harness.api.trial import Trial
from protocol.registry import Variant, load_impl
from specs.problems import build
from tests.fixtures.runs import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "outside_impls.py"


def _trial(name: str, problem) -> Trial:
    return Trial(Variant(load_impl(f"{FIXTURES}:{name}"), "float64"), problem)


@pytest.mark.parametrize("scale", [None, 0.7])
def test_an_implementation_of_one_head_dim_shows_the_original_problems_weights(scale):
    problem = build(heads=2, n_q=5, n_k=11, d=4, d_v=4, seed=3, causal=True).derive(f"p = p.replace(scale={scale})")
    observed = observe_weights(_trial("one_head_dim_attention", problem), problem)
    assert observed.problem.q.shape[-1] == 11 and observed.problem.v.shape[-1] == 11
    expected = _trial("one_head_dim_attention", problem).oracle(problem)[0].weights
    np.testing.assert_allclose(observed.weights, expected, atol=1e-12)


def test_an_implementation_that_takes_its_scale_from_the_width_is_caught():
    """Its weights on the widened problem are those of 1/sqrt(11), not 1/sqrt(4): the comparison fails."""
    problem = build(heads=2, n_q=5, n_k=11, d=4, d_v=4, seed=3)
    trial = _trial("one_head_dim_scale_from_width", problem)
    observed = observe_weights(trial, problem)
    with pytest.raises(PropertyViolation):
        trial.expect_close(observed.weights, observed.oracle.weights, observed.allowance)
