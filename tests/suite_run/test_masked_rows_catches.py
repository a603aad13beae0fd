"""fully-masked-rows-zero catches each deliberately wrong implementation of tests/fixtures/masked_rows_impls.py (run as
a user would, with --impl and a report, over properties/test_masking.py) and no other claim of that module fails
on them (one mistake each); the correct one, exp(S - LSE) V with np.nan_to_num on the empty rows, passes all."""

from __future__ import annotations

import pytest

from tests.fixtures.runs import run_suite

IMPLS = "tests/fixtures/masked_rows_impls.py"
CLAIM = "fully-masked-rows-zero"
CAUGHT = {  # function -> its record name
    "only_first_empty_row_zeroed": "wrong-only-first-empty-row-zeroed",
    "finite_lse_of_empty_rows": "wrong-finite-lse-of-empty-rows",
    "rows_before_first_key_see_key_0": "wrong-rows-before-first-key-see-key-0",
}
CORRECT = {"lse_form_nan_to_num_on_empty_rows": "correct-lse-form-nan-to-num-on-empty-rows"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    targets = (a for n in [*CAUGHT, *CORRECT] for a in ("--impl", f"{IMPLS}:{n}"))
    return run_suite("properties/test_masking.py", *targets, report_dir=tmp_path_factory.mktemp("masked-rows"))


def _verdicts(run, name: str) -> list[dict]:
    return [v for v in run.report["verdicts"] if v["impl"] == f"{name}[float64]"]


@pytest.mark.parametrize("function", sorted(CAUGHT))
def test_the_wrong_implementation_fails_only_fully_masked_rows_zero(run, function):
    name = CAUGHT[function]
    run.expect_caught(f"{name}[float64]", {CLAIM})
    others = [(v["claim"], v["status"]) for v in _verdicts(run, name) if v["claim"] != CLAIM]
    assert others and all(status == "pass" for _, status in others), others


@pytest.mark.parametrize("function", sorted(CORRECT))
def test_the_correct_implementation_passes_every_claim(run, function):
    verdicts = _verdicts(run, CORRECT[function])
    assert verdicts and all(v["status"] == "pass" for v in verdicts), \
        [(v["claim"], v["detail"][:300]) for v in verdicts if v["status"] != "pass"]
