"""The information-theoretic reading (seed 002 § 3.1.3), its code as written."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.markers import checks
from specs.problems import build
from specs.strategies import head_dims

torch = pytest.importorskip("torch", reason="the seed's interpretation code is written in torch")

from impls.seed_code.seed002_readings import information_theoretic_attention  # noqa: E402

SUBJECT = "seed002-information"
sizes = dict(n=st.integers(2, 16), d=head_dims(16).filter(lambda d: d >= 2), seed=st.integers(0, 2**32 - 1))


def _distributions(x: np.ndarray) -> np.ndarray:
    """Rows turned into probability vectors, the only inputs KL is defined for."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _run(q, k, v):
    return information_theoretic_attention(*(torch.from_numpy(x) for x in (q, k, v))).numpy()


@checks("information-code-finite", subject=SUBJECT)
@given(**sizes)
def test_runs_finite_on_ordinary_keys(n, d, seed):
    p = build(n_q=n, n_k=n, d=d, seed=seed)
    out = _run(p.q[0, 0], p.k[0, 0], p.v[0, 0])
    assert np.all(np.isfinite(out)), (
        f"NaN output on Gaussian keys (first key {np.round(p.k[0, 0, 0], 3).tolist()}): p.log() of a negative entry")


@checks("information-weights-from-query", subject=SUBJECT)
@given(**sizes)
def test_different_queries_get_different_outputs(n, d, seed):
    p = build(n_q=n, n_k=n, d=d, seed=seed)
    keys = _distributions(p.k[0, 0])
    out = _run(p.q[0, 0], keys, p.v[0, 0])
    out_other = _run(-3.0 * p.q[0, 0] + 1.0, keys, p.v[0, 0])
    assert not np.array_equal(out, out_other), "replacing every query leaves the output bit-for-bit unchanged"


@checks("negative-kl-is-mutual-information", subject=SUBJECT)
@given(**sizes)
def test_scores_are_non_negative_like_mutual_information(n, d, seed):
    """The code's score -KL(k_i || k_j), computed as it computes it, on probability-vector keys."""
    keys = torch.from_numpy(_distributions(build(n_k=n, d=d, seed=seed).k[0, 0]))
    p, q = keys.unsqueeze(1), keys.unsqueeze(0)
    scores = -(p * (p.log() - q.log())).sum(dim=-1).numpy()
    assert np.all(scores >= 0), (
        f"score -KL = {scores.min():.3g} < 0, but a mutual information is never negative")
