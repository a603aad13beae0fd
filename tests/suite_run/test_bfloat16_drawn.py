"""The drawn sdpa-formula property on bfloat16 implementations, run as the suite runs it (its own search, problems up
to 130 keys, the ci profile): it finds a serial bfloat16 sum of the weights, and passes float32 arithmetic inside
bfloat16 storage (tests/unit/test_bfloat16.py holds both, and the same at 257 keys)."""

from __future__ import annotations

import pytest

from tests.fixtures.runs import run_suite

FORMULA = ("properties/test_formula.py", "-k", "test_output_matches_oracle")


@pytest.mark.parametrize("name, status", [("softmax_sum_in_bfloat16", "fail"), ("float32_inside", "pass")])
def test_the_drawn_formula_property_on_bfloat16(tmp_path, name, status):
    target = f"tests/unit/test_bfloat16.py:{name}"
    run = run_suite(*FORMULA, "--impl", target, report_dir=tmp_path)
    verdict = run.verdict("sdpa-formula", f"{target}[bfloat16]")
    assert verdict["status"] == status, run.output[-3000:]
    if status == "fail":
        assert "2 x naive bfloat16 error of the row" in verdict["detail"]
