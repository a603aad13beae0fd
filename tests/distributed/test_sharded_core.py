"""The ring record through the core claims on a group of two ranks (ATTN_RANKS=2) under the smoke profile (ci's first
3 examples of each property): what CI runs so that the sharded face, its pool and our ring cannot rot (the tests env);
tox -e distributed runs every sharded record through every claim on W = 2, 3, 4 under ci. Each claim must pass."""

from __future__ import annotations

import pytest

from tests.fixtures.runs import run_suite

VARIANT = "ring[float32]"
CORE = ("sdpa-formula", "sharded-equals-global", "differentiable-end-to-end", "causal-alignment",
        "sliding-window-attends-its-band", "softcap-caps-scaled-scores", "gqa-shares-kv-heads", "ring-merge-order-free")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return run_suite("properties", "--impl", "impls.distributed.distributed_records:ring", "--claims", ",".join(CORE),
                     "--long-regimes", "no", "-k", "float32", report_dir=tmp_path_factory.mktemp("sharded-core"),
                     env={"ATTN_RANKS": "2"}, profile="smoke", timeout=600)


def test_the_run_completes_without_an_unexpected_failure(run):
    assert run.report is not None, run.output[-3000:]
    unexpected = [(v["impl"], v["claim"], v["detail"][:400]) for v in run.report["verdicts"]
                  if v["status"] in ("fail", "error") and not v["declared"]]
    assert not unexpected, unexpected
    assert {v["impl"] for v in run.report["verdicts"]} == {VARIANT}


@pytest.mark.parametrize("claim", CORE)
def test_each_core_claim_passes(run, claim):
    verdict = run.verdict(claim, VARIANT)
    assert verdict is not None and verdict["status"] == "pass", (claim, verdict)
