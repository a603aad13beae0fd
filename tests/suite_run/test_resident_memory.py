"""scores-used-once reaches implementations tracemalloc cannot see (torch): their peak resident memory, in a child
process. A tiled kernel that keeps every tile's scores in a whole n x n buffer fails; a tiled one that streams
its keys backwards in log space passes."""

from __future__ import annotations

import pytest

from tests.fixtures.runs import run_suite

pytest.importorskip("torch")

IMPLS = "tests/fixtures/resident_memory_impls.py"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    names = ("keeps_every_score_tile", "keys_streamed_backwards_in_log_space")
    return run_suite("properties/test_tiling.py", "-k", "memory_grows",
                     *(a for n in names for a in ("--impl", f"{IMPLS}:{n}")),
                     report_dir=tmp_path_factory.mktemp("resident"))


def test_a_resident_score_buffer_is_caught(run):
    run.expect_caught(f"{IMPLS}:keeps_every_score_tile[float32]", {"scores-used-once"})
    assert "peak resident memory grows" in run.verdict("scores-used-once",
                                                       f"{IMPLS}:keeps_every_score_tile[float32]")["detail"]


def test_a_streaming_kernel_passes(run):
    verdict = run.verdict("scores-used-once", f"{IMPLS}:keys_streamed_backwards_in_log_space[float32]")
    assert verdict["status"] == "pass", verdict["detail"][:500]
