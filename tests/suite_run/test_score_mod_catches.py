"""The score-modification properties (properties/test_score_mods.py) catch each wrong implementation of
tests/fixtures/score_mod_impls.py in float64 and float32, under the ci profile, with its shrunk input, and pass the
correct ones written in unusual ways (a window as a mask and as a -inf bias, softcap through exp, a sink as an
extra key of zero value). Run as a user would, with --impl and a report."""

from __future__ import annotations

import pytest

from tests.fixtures.runs import run_suite

IMPLS = "tests/fixtures/score_mod_impls.py"
CORRECT = ("names_every_modification", "window_as_mask", "window_as_bias", "softcap_through_exp",
           "sinks_as_extra_key")
WRONG = {  # function -> the claim it breaks
    "window_left_exclusive": "sliding-window-attends-its-band",
    "window_without_offset": "sliding-window-attends-its-band",
    "softcap_before_scale": "softcap-caps-scaled-scores",
    "alibi_wrong_sign": "alibi-is-a-distance-bias",
    "bias_before_scale": "additive-bias-joins-the-scores",
    "sinks_ignored": "sinks-join-the-denominator",
}
CLAIMS = set(WRONG.values())
DTYPES = ("float64", "float32")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    targets = [a for name in (*CORRECT, *WRONG) for a in ("--impl", f"{IMPLS}:{name}")]
    return run_suite("properties/test_score_mods.py", *targets, report_dir=tmp_path_factory.mktemp("score-mods"))


@pytest.mark.parametrize("function", CORRECT)
def test_a_correct_implementation_passes_every_modification_it_takes(run, function):
    for dtype in DTYPES:
        verdicts = {v["claim"]: v for v in run.report["verdicts"] if v["impl"] == f"{IMPLS}:{function}[{dtype}]"}
        assert set(verdicts) == CLAIMS
        assert any(v["status"] == "pass" for v in verdicts.values()), (function, dtype)
        for claim, verdict in verdicts.items():
            assert verdict["status"] == "pass" or (
                verdict["status"] == "skip" and "implementation lacks" in verdict["detail"]), \
                (function, dtype, claim, verdict["detail"][:500])


@pytest.mark.parametrize("function", sorted(WRONG))
def test_a_wrong_implementation_fails_its_claim_with_the_shrunk_input(run, function):
    for dtype in DTYPES:
        verdict = run.verdict(WRONG[function], f"{IMPLS}:{function}[{dtype}]")
        assert verdict["status"] == "fail" and not verdict["expected"], (function, dtype, verdict["detail"][:500])
        assert "out differs from the float64 oracle beyond the tolerance" in verdict["detail"]
        assert "input: build(" in verdict["detail"], verdict["detail"][:500]  # the shrunk recipe


def test_the_run_fails_only_on_the_wrong_ones(run):
    failing = {v["impl"].rpartition(":")[2].partition("[")[0] for v in run.report["verdicts"] if v["status"] == "fail"}
    assert failing == set(WRONG) and run.returncode == 1
