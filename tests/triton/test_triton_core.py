"""The Triton records through the core claims at short sequences (ATTN_TRITON_MAX_SEQ=48, the records' max_seq)
under the smoke profile (ci's first 3 examples of each property): what CI runs so that the records cannot rot (tox
-e triton-ci), on triton-flash in float32 and triton-flash-bottom-right in bfloat16 (the dtype whose tl.dot the
interpreter gets wrong, widened by the kernels). tox -e triton runs every claim, every dtype, every length, under ci.
Each claim must pass on both variants."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from tests.fixtures.runs import run_suite

VARIANTS = ("triton-flash[float32]", "triton-flash-bottom-right[bfloat16]")
CORE = ("sdpa-formula", "tiled-equals-global", "differentiable-end-to-end", "causal-alignment",
        "sliding-window-attends-its-band", "softcap-caps-scaled-scores", "dropout-seeded")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return run_suite("properties", "--backend", "triton", "--claims", ",".join(CORE), "--long-regimes", "no",
                     "-k", "(float32 and not bottom) or (bottom and bfloat16)", "-n", "2",
                     report_dir=tmp_path_factory.mktemp("triton-core"), env={"ATTN_TRITON_MAX_SEQ": "48"},
                     profile="smoke", timeout=1200)


def test_the_run_completes_without_an_unexpected_failure(run):
    assert run.report is not None, run.output[-3000:]
    unexpected = [(v["impl"], v["claim"], v["detail"][:400]) for v in run.report["verdicts"]
                  if v["status"] in ("fail", "error") and not v["declared"]]
    assert not unexpected, unexpected
    assert {v["impl"] for v in run.report["verdicts"]} == set(VARIANTS)


@pytest.mark.parametrize("claim", CORE)
def test_each_core_claim_passes_on_both_variants(run, claim):
    for variant in VARIANTS:
        verdict = run.verdict(claim, variant)
        assert verdict is not None and verdict["status"] == "pass", (claim, variant, verdict)
