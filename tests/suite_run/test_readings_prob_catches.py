"""The probabilistic and information-theoretic readings catch each deliberately wrong implementation of
tests/fixtures/readings_prob_impls.py (run as a user would, with --impl and a report), and pass correct ones written in
unusual ways (zoo/correct.py: exp2 with the scale folded in, keys streamed in reverse, float64 behind float32,
weights in the log domain, float16 storage with float32 accumulation)."""

from __future__ import annotations

import pytest

from tests.fixtures.runs import run_suite

pytest.importorskip("torch")

IMPLS = "tests/fixtures/readings_prob_impls.py"
PROPERTIES = ("interpretations/test_probabilistic.py", "interpretations/test_information.py")
CAUGHT = {  # function -> (record name, the claims it must fail)
    "values_normalised": ("wrong-values-normalised", {"attention-is-expectation"}),
    "output_off_its_weights": ("wrong-output-off-its-weights", {"attention-is-expectation"}),
    "ties_broken_by_position": ("wrong-ties-broken-by-position", {"scale-to-infinity-is-argmax"}),
    "mask_added_before_scale": ("wrong-mask-added-before-scale", {"scale-to-zero-is-mean"}),
    "scale_as_temperature": ("wrong-scale-as-temperature", {"entropy-falls-with-scale"}),
    "small_weights_dropped": ("wrong-small-weights-dropped", {"siwuxiang-zero-needs-mask-or-underflow",
                                                              "softmax-maximises-entropy-regularised-score"}),
}
CORRECT = ("exp2_with_folded_scale", "keys_streamed_in_reverse", "float64_behind_float32", "log_domain_weights",
           "float16_storage_float32_accumulation")
NEW_CLAIMS = {"attention-is-expectation", "scale-to-infinity-is-argmax", "scale-to-zero-is-mean",
              "entropy-falls-with-scale", "siwuxiang-zero-needs-mask-or-underflow",
              "softmax-maximises-entropy-regularised-score"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    targets = [*(("--impl", f"{IMPLS}:{n}") for n in CAUGHT), *(("--impl", f"zoo/correct.py:{n}") for n in CORRECT)]
    return run_suite(*PROPERTIES, *(a for pair in targets for a in pair),
                     report_dir=tmp_path_factory.mktemp("readings-prob"))


@pytest.mark.parametrize("function", sorted(CAUGHT))
def test_the_wrong_implementation_fails_its_claims(run, function):
    name, claims = CAUGHT[function]
    run.expect_caught(f"{name}[float64]", claims)


def test_the_correct_implementations_pass_every_reading(run):
    verdicts = [v for v in run.report["verdicts"] if v["impl"].startswith("zoo/correct.py:")]
    assert verdicts and all(v["status"] == "pass" for v in verdicts), \
        [(v["impl"], v["claim"], v["detail"][:300]) for v in verdicts if v["status"] != "pass"]
    for impl in {v["impl"] for v in verdicts}:
        assert {v["claim"] for v in verdicts if v["impl"] == impl} >= NEW_CLAIMS, impl


def test_each_implementation_records_its_evidence(run):
    """mc-convergence (curves with a band) and zero-weight-threshold (a table row) once per correct implementation;
    the curve falls with N and stays under its band's upper edge, the bound the test applies."""
    correct = {v["impl"] for v in run.report["verdicts"] if v["impl"].startswith("zoo/correct.py:")}
    for name in ("mc-convergence", "zero-weight-threshold"):
        recorded = [e["impl"] for e in run.report["exhibits"] if e["name"] == name]
        assert sorted(i for i in recorded if i in correct) == sorted(correct), (name, recorded)
    for exhibit in (e for e in run.report["exhibits"] if e["name"] == "mc-convergence" and e["impl"] in correct):
        (series,) = exhibit["data"]["series"].values()
        (band,) = exhibit["data"]["band"].values()
        assert series["y"][-1] < series["y"][0], exhibit["impl"]
        assert all(y <= h for y, h in zip(series["y"], band["high"], strict=True)), exhibit["impl"]
