"""Every catch of the six wrong implementations of zoo/declared.py is met, and nothing else is blamed.

Their catches in zoo/catches.toml (subject = the --impl target) name the claims each bug breaks. One run of every
implementation-level property (the `ci` profile, derandomized, the zoo's settings) must catch each one exactly:
every catch's claim fails, unexpectedly (the properties catch the bug), and no other claim fails (its failures point
at the right claim).
"""

from __future__ import annotations

import pytest

from harness.reporting.catches import missed
from specs.catalogue import load_claims
from tests.fixtures.runs import run_suite
from tests.fixtures.standalone_repro import repro_fails_alike
from zoo import declared as defective_impls
from zoo.defects import DEFECTS

TARGETS = {name: f"zoo/declared.py:{name}" for name in defective_impls.DEFECTIVE}
CATCHES = {defect.name: defect.catches for defect in DEFECTS if defect.target in TARGETS.values()}


@pytest.fixture(scope="module")
def defective_run(tmp_path_factory):
    args = [arg for target in TARGETS.values() for arg in ("--impl", target)]
    return run_suite("properties", "interpretations", *args, "--long-regimes", "no",
                     report_dir=tmp_path_factory.mktemp("defective"))


def _variant(name: str) -> str:
    return f"{TARGETS[name]}[float64]"


def test_run_reports_only_the_catches_as_unexpected(defective_run):
    caught = {(c.claim, f"{c.subject}[{d}]") for catches in CATCHES.values() for c in catches for d in c.dtypes}
    unexpected = {(v["claim"], v["impl"]) for v in defective_run.report["verdicts"]
                  if v["status"] in ("fail", "error") and not v["declared"]}
    assert unexpected == caught, (unexpected ^ caught, defective_run.output[-4000:])
    assert defective_run.returncode == 1


@pytest.mark.parametrize("name", defective_impls.DEFECTIVE)
def test_every_catch_is_met_and_nothing_else_fails(defective_run, name):
    assert len(CATCHES[name]) >= 3, f"{name}: its catches are missing from zoo/catches.toml"
    assert missed(TARGETS[name], CATCHES[name], defective_run.report) == ()


@pytest.mark.parametrize("claim, name", [
    ("rows-sum-to-one", "softmax_over_queries"),
    ("permutation-equivariance", "positional_bias"),
    ("permutation-equivariance", "per_block_softmax"),
    ("sqrt-dk-variance", "missing_scale"),
    ("causal-mask-zeroes-future", "causal_off_by_one"),
    ("tiled-equals-global", "per_block_softmax"),
    ("sdpa-formula", "softmax_in_float32"),
])
def test_core_claims_catch_their_wrong_implementation(defective_run, claim, name):
    verdict = defective_run.verdict(claim, _variant(name))
    assert verdict["status"] == "fail"
    assert verdict["counterexample"]["repro"], "a failure must come with a repro snippet"


@pytest.mark.parametrize("name", defective_impls.DEFECTIVE)
def test_a_bug_breaks_some_claims_not_all(defective_run, name):
    """Precision: a bug leaves claims standing (at least five pass), and a seed sentence refuted as written fails
    (or skips) on it as on every implementation, without a catch."""
    verdicts = [v for v in defective_run.report["verdicts"] if v["impl"] == _variant(name)]
    passing = [v["claim"] for v in verdicts if v["status"] == "pass"]
    assert len(passing) >= 5, f"{name}: only {passing} pass; a bug should not break everything"
    refuted = {slug for slug, claim in load_claims().items() if not claim.holds}
    assert not refuted & {catch.claim for catch in CATCHES[name]}, f"{name}: a catch on a refuted claim"
    for verdict in (v for v in verdicts if v["claim"] in refuted):
        assert verdict["status"] == "skip" or verdict["declared"], verdict


def test_float64_impl_with_float32_softmax_is_reported_with_the_rule(defective_run):
    detail = defective_run.verdict("sdpa-formula", _variant("softmax_in_float32"))["detail"]
    assert "worst element out[" in detail and "score rounding" in detail and "(dominant)" in detail


@pytest.mark.parametrize("claim, name", [
    ("sdpa-formula", "softmax_in_float32"),  # against the oracle: the verdict printed
    ("permutation-equivariance", "per_block_softmax"),  # metamorphic: two outputs of one implementation
    ("causal-mask-zeroes-future", "causal_off_by_one"),  # a check of the property's own, called again
])
def test_repro_snippet_reproduces_the_failure(defective_run, claim, name):
    """The repro, run on its own, fails with the property's message: it prints the comparison's verdict (FAIL, the
    worst element, the allowance's terms), or calls the property's check again, which raises the same violation."""
    verdict = defective_run.verdict(claim, _variant(name))
    repro_fails_alike(verdict["counterexample"]["repro"], verdict["detail"].splitlines()[0],
                      verdict["counterexample"]["details"])
