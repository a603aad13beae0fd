"""What the statistical claims can and cannot tell apart, stated as tests (fixed seeds).

sqrt-dk-variance (properties/test_scaling.py) runs a chi-square test at ALPHA = 1e-9 on 2000
standardised log-weight gaps. A scale c times the right one multiplies every gap by c, so the
test's resolution is a property of the same data: it rejects a 15% scale error at every d it
uses, and it does not reject 1/sqrt(d + 1) at d = 16 and 64 (3% and 0.8% scale errors, 6% and
1.5% in variance): at d = 64 that needs (6.1 + 1)^2 * 2 / 0.0154^2 ~ 4e5 samples, not 2000.
The deterministic check of the scale is sdpa-formula's, whose allowance catches 1/sqrt(d + 1)
(tests/unit/test_power.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from properties.scaling_checks import VARIANCE_SAMPLES
from specs.examples import gaussian_queries
from specs.statistics import ALPHA, unit_normal_variance_pvalue

RESOLVED = 0.15  # relative scale error the test rejects at every d


def _standardised_gaps(d: int) -> np.ndarray:
    """The property's z on the oracle's exact scores: (q . (k_1 - k_0) / sqrt(d)) / (sqrt(2) |q| / sqrt(d))."""
    problem = gaussian_queries(samples=VARIANCE_SAMPLES, n_k=2, d=d, seed=20_000 + d)
    q, k = problem.q[:, 0, 0, :], problem.k[:, 0, :, :]
    gap = np.einsum("sd,sd->s", q, k[:, 1] - k[:, 0]) / math.sqrt(d)
    return gap / (math.sqrt(2) * np.linalg.norm(q, axis=-1) / math.sqrt(d))


@pytest.mark.parametrize("d", [4, 16, 64])
def test_variance_test_rejects_a_fifteen_percent_scale_error(d):
    z = _standardised_gaps(d)
    assert unit_normal_variance_pvalue(z) >= ALPHA, "the right scale must be accepted"
    for factor in (1 + RESOLVED, 1 / (1 + RESOLVED)):
        assert unit_normal_variance_pvalue(factor * z) < ALPHA, f"scale x {factor:.3f} accepted at d={d}"


@pytest.mark.parametrize("d", [16, 64])
def test_variance_test_does_not_resolve_one_over_sqrt_d_plus_one(d):
    """Stated, not hidden: the statistical test accepts 1/sqrt(d+1); sdpa-formula is what catches it."""
    z = _standardised_gaps(d) * math.sqrt(d / (d + 1))
    assert unit_normal_variance_pvalue(z) >= ALPHA
