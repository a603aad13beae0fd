"""fused-equals-unfused has content of its own in float16: a fused kernel that keeps its scores in half is as
accurate as the naive float16 formula (sdpa-formula passes it) but is not the unfused sequence with float32
inside, and fails; kernels with float32 inside pass, P rounded to half for P V included."""

from __future__ import annotations

import pytest

from tests.fixtures.runs import run_suite

pytest.importorskip("torch")

IMPLS = "tests/fixtures/fused_half_impls.py"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    names = ("scores_in_half", "p_in_half", "tiled_odd_blocks_half")
    return run_suite("properties/test_fused.py", "properties/test_formula.py", "--claims",
                     "fused-equals-unfused,sdpa-formula", *(a for n in names for a in ("--impl", f"{IMPLS}:{n}")),
                     report_dir=tmp_path_factory.mktemp("fused-half"))


def test_scores_in_half_fail_fusion_but_not_the_formula(run):
    run.expect_caught("wrong-fused-scores-in-half[float16]", {"fused-equals-unfused"})
    assert run.verdict("sdpa-formula", "wrong-fused-scores-in-half[float16]")["status"] == "pass", \
        "the check must have content sdpa-formula lacks"


@pytest.mark.parametrize("impl", ["correct-fused-p-in-half[float16]", "correct-fused-tiled-odd-blocks-half[float16]",
                                  "correct-fused-tiled-odd-blocks-half[bfloat16]"])
def test_float32_inside_passes(run, impl):
    for claim in ("fused-equals-unfused", "sdpa-formula"):
        verdict = run.verdict(claim, impl)
        assert verdict["status"] == "pass", (claim, verdict["detail"][:600])
