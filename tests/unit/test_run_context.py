"""The run context: installed by the plugin, read where calls are made, replaced but never mutated."""

import dataclasses

import numpy as np
import pytest

from harness.engine import run_context
from harness.engine.guarded_call import CallFailed, call_in_process


def _sleeps(q, k, v, **kwargs):
    import time

    time.sleep(2.0)
    return v


def test_a_call_takes_its_time_limit_from_the_run_context():
    x = np.zeros((1, 1, 2, 4))
    with run_context.using(run_context.RunContext(timeout_s=0.2)), pytest.raises(CallFailed, match=r"0\.2 s"):
        call_in_process(_sleeps, (x, x, x), {})


def test_using_restores_the_previous_context_even_after_an_error():
    before = run_context.current()
    with pytest.raises(RuntimeError), run_context.using(run_context.RunContext(timeout_s=1.5)):
        assert run_context.current().timeout_s == 1.5
        raise RuntimeError
    assert run_context.current() is before


def test_the_context_is_immutable_and_checks_its_values():
    with pytest.raises(dataclasses.FrozenInstanceError):
        run_context.current().timeout_s = 3.0
    with pytest.raises(ValueError, match="timeout_s must be a positive"):
        run_context.RunContext(timeout_s=0)
    with pytest.raises(TypeError, match="takes a RunContext"):
        run_context.install({"timeout_s": 1.0})
