"""The state a call depends on reaches it where it runs (harness.engine.call_state): a dropout drawn from the global
generators gives the same mask to the one-hot call and the real call, isolated or not, and torch's settings
travel into the worker."""

from __future__ import annotations

import numpy as np
import pytest

from harness.engine.isolation import WORKERS, call_isolated
from tests.fixtures.runs import run_suite

torch = pytest.importorskip("torch")

IMPLS = "tests/fixtures/global_rng_impls.py"
DROPOUT_CLAIMS = {"dropout-on-weights", "dropout-independent", "dropout-unbiased"}


@pytest.fixture(scope="module", params=["auto", "no"])
def run(request, tmp_path_factory):
    names = ("torch_global_dropout", "numpy_global_dropout", "draws_before_its_mask")
    return run_suite("properties/test_dropout.py", "--isolate", request.param,
                     *(a for n in names for a in ("--impl", f"{IMPLS}:{n}")),
                     report_dir=tmp_path_factory.mktemp(f"isolate-{request.param}"))


@pytest.mark.parametrize("function", ["torch_global_dropout", "numpy_global_dropout"])
def test_global_generator_dropout_passes_every_dropout_property(run, function):
    verdicts = {v["claim"]: v for v in run.report["verdicts"] if v["impl"] == f"{IMPLS}:{function}[float64]"}
    assert {c for c, v in verdicts.items() if v["status"] == "pass"} == DROPOUT_CLAIMS, \
        {c: (v["status"], v["detail"][:400]) for c, v in verdicts.items()}


def test_a_mask_the_seed_does_not_decide_is_still_caught(run):
    """An implementation whose mask ignores the global seed draws another mask in each call: the one-hot call
    cannot read the mask the real call used, and dropout-on-weights fails on that, isolated or not."""
    run.expect_caught(f"{IMPLS}:draws_before_its_mask[float64]", {"dropout-on-weights"})


def test_torch_settings_travel_into_the_worker():
    arrays = tuple(np.zeros((1, 1, 2, 4)) for _ in range(3))
    target = f"{IMPLS}:torch_settings_as_output"
    threads, dtype, deterministic = (torch.get_num_threads(), torch.get_default_dtype(),
                                     torch.are_deterministic_algorithms_enabled())
    try:
        torch.set_num_threads(1)
        torch.set_default_dtype(torch.float64)
        torch.use_deterministic_algorithms(True)
        assert call_isolated(target, arrays, "contiguous", {})[0, 0, 0, :3].tolist() == [1.0, 1.0, 1.0]
        torch.set_default_dtype(torch.float32)
        torch.use_deterministic_algorithms(False)
        assert call_isolated(target, arrays, "contiguous", {})[0, 0, 0, :3].tolist() == [1.0, 0.0, 0.0]
    finally:
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.use_deterministic_algorithms(deterministic)
        WORKERS.close()
