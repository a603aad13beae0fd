"""`calls-are-independent` and `deterministic` catch each deliberately wrong implementation of
tests/fixtures/regime_catch_impls.py (run as a user would, with --impl, so the long case runs, and a report), and pass
the correct ones written in unusual ways (a K cache that checks the bytes; dK added block by block in reverse;
keys visited in a shuffled order fixed by their number). The oracle's score-spread check (properties/test_scaling)
rejects a reference that gets the scale wrong and accepts one that scales q first."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from properties.test_scaling import score_spread
from specs.reference import attention
from tests.fixtures.runs import run_suite

IMPLS = "tests/fixtures/regime_catch_impls.py"
PROPERTIES = ("properties/test_regimes.py", "properties/test_determinism.py")
CLAIMS = "calls-are-independent,deterministic"
CAUGHT = {  # function -> (record name, the claims it must fail, the property that catches it)
    "k_cache_keyed_on_shape": ("wrong-k-cache-keyed-on-shape", {"calls-are-independent"},
                               "test_repeated_calls_follow_new_values_and_leave_inputs_alone"),
    "backward_dk_atomic_order": ("wrong-backward-dk-atomic-order", {"deterministic"},
                                 "test_repeated_backward_calls_are_bitwise_equal"),
    "random_key_order_past_1024": ("wrong-random-key-order-past-1024", {"deterministic"},
                                   "test_repeated_calls_at_length_are_bitwise_equal"),
}
CORRECT = {"k_cache_checks_bytes": "correct-k-cache-checks-bytes",
           "backward_dk_last_block_first": "correct-backward-dk-last-block-first",
           "key_order_from_length": "correct-key-order-from-length"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    names = [*CAUGHT, *CORRECT]
    return run_suite(*PROPERTIES, "--claims", CLAIMS, *(a for n in names for a in ("--impl", f"{IMPLS}:{n}")),
                     report_dir=tmp_path_factory.mktemp("regime-catches"))


@pytest.mark.parametrize("function", sorted(CAUGHT))
def test_the_wrong_implementation_fails_its_claims(run, function):
    name, claims, prop = CAUGHT[function]
    run.expect_caught(f"{name}[float64]", claims)
    for claim in claims:
        assert prop in run.verdict(claim, f"{name}[float64]")["failed_properties"]


@pytest.mark.parametrize("function", sorted(CORRECT))
def test_the_correct_implementation_passes_every_claim(run, function):
    verdicts = [v for v in run.report["verdicts"] if v["impl"] == f"{CORRECT[function]}[float64]"]
    assert {v["claim"] for v in verdicts} == set(CLAIMS.split(","))
    assert all(v["status"] == "pass" for v in verdicts), \
        [(v["claim"], v["detail"][:300]) for v in verdicts if v["status"] != "pass"]


def test_the_long_case_is_not_in_the_main_job(tmp_path):
    """Without --impl (the main job over the built-ins) the long determinism case is skipped as a long regime."""
    done = run_suite("properties/test_determinism.py::test_repeated_calls_at_length_are_bitwise_equal",
                     "--backend", "numpy", "-rs", report_dir=tmp_path)
    assert done.returncode == 0, done.output[-2000:]
    assert "long regime" in done.output and " passed" not in done.output, done.output[-2000:]


def _ignores_scale(q, k, v, *, scale=None):
    """Wrong: the scale keyword never reaches the scores (always 1/sqrt(d_k))."""
    return attention(q, k, v)


def _scale_one_over_dk(q, k, v, *, scale=None):
    """Wrong: the default scale is 1/d_k, not 1/sqrt(d_k)."""
    return attention(q, k, v, scale=1 / q.shape[-1] if scale is None else scale)


def _queries_scaled_first(q, k, v, *, scale=None):
    """Correct: the scores as einsum of (s q) with k, s applied to q before the product."""
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return dataclasses.replace(attention(q, k, v, scale=scale), scores=np.einsum("bhid,bhjd->bhij", s * q, k))


@pytest.mark.parametrize("reference, caught", [(_ignores_scale, "scale=1's"),
                                               (_scale_one_over_dk, "the default scale's")])
def test_score_spread_rejects_a_wrong_reference(reference, caught):
    _, failures = score_spread(reference)
    assert failures and all(caught in failure for failure in failures), failures


def test_score_spread_accepts_the_oracle_and_queries_scaled_first():
    assert score_spread()[1] == [] and score_spread(_queries_scaled_first)[1] == []
