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


def _sleeps_and_wraps_what_interrupts_it(q, k, v, **kwargs):
    """As Triton's interpreter does: whatever a kernel raises comes out as the interpreter's own error."""
    try:
        return _sleeps(q, k, v)
    except Exception as exc:
        raise RuntimeError(repr(exc)) from exc


def test_a_call_past_its_limit_is_a_timeout_whatever_the_implementation_raised_instead():
    x = np.zeros((1, 1, 2, 4))
    with pytest.raises(CallFailed, match=r"took longer than 0\.2 s") as failure:
        call_in_process(_sleeps_and_wraps_what_interrupts_it, (x, x, x), {}, timeout_s=0.2)
    assert failure.value.kind == "timeout"


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
