"""The varlen gradient property (properties/test_varlen.py) catches a backward that drops causal while its forward
is right, and passes a correct varlen written as one SDPA call per sequence."""

from __future__ import annotations

from tests.fixtures.runs import run_suite

FIXTURES = "tests/fixtures/varlen_gradient_impls.py"


def test_the_gradient_property_catches_a_backward_without_causal_and_passes_a_correct_one(tmp_path):
    run = run_suite("properties/test_varlen.py", "--claims", "varlen-is-each-sequence-alone", "--isolate", "no",
                    "--impl", f"{FIXTURES}:varlen_backward_ignores_causal", "--impl",
                    f"{FIXTURES}:varlen_as_sdpa_calls", report_dir=tmp_path)
    verdicts = {v["impl"].rpartition(":")[2]: v for v in run.report["verdicts"]}
    wrong = verdicts["varlen_backward_ignores_causal[float64]"]
    assert wrong["status"] == "fail", wrong
    # its forward is right: only the gradient property fails, naming a gradient of a sequence
    assert [p.rpartition("::")[2] for p in wrong["failed_properties"]] == [
        "test_each_packed_sequence_has_its_own_gradients"], wrong
    assert "of sequence" in wrong["detail"] and "backward" in wrong["detail"], wrong["detail"][:500]
    correct = verdicts["varlen_as_sdpa_calls[float64]"]
    assert correct["status"] == "pass", correct["detail"][:500]
