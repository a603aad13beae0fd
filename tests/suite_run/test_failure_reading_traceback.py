"""A failing property's traceback shows the property's line and the violation, not the harness helpers that
raised it (their frames set __tracebackhide__; the call's own failure stays in __context__, unprinted)."""

from __future__ import annotations

import pytest

from harness.api.evidence import PropertyViolation
from harness.api.trial import Trial
from harness.engine.guarded_call import CallFailed
from protocol.registry import Variant, load_impl
from specs.problems import build
from tests.fixtures.runs import run_suite

WRONG = "tests/fixtures/report_impls.py:keys_reversed"  # wrong everywhere, and it raises on grouped heads
PROPERTY = ("properties/test_formula.py", "-k", "test_output_matches_oracle", "--impl", WRONG)
PROPERTY_LINE = "check_against_oracle(variant, data.draw(problems_for(variant), label=\"problem\"))"
HELPERS = ("harness/api/trial.py", "harness/api/assertions.py", "harness/engine/isolation.py",
           "harness/engine/guarded_call.py")


def harness_frames(output: str) -> list[str]:
    """The traceback lines that name a frame of a harness helper."""
    return [line for line in output.splitlines() if "File " in line and any(h in line for h in HELPERS)]


@pytest.fixture(scope="module")
def failing_runs() -> dict[str, str]:
    """The property's output on the wrong implementation, as pytest shows it and with --fulltrace."""
    shown = run_suite(*PROPERTY)
    full = run_suite(*PROPERTY, "--fulltrace")
    assert shown.returncode == full.returncode == 1, shown.output[-3000:]
    return {"shown": shown.output, "full": full.output}


def test_the_traceback_shows_the_property_line_and_the_violation_without_harness_frames(failing_runs):
    output = failing_runs["shown"]
    assert 'properties/test_formula.py", line' in output and PROPERTY_LINE in output
    assert "PropertyViolation: out differs from the float64 oracle beyond the tolerance" in output
    assert "PropertyViolation: the implementation raised ValueError" in output
    assert "During handling of the above exception" not in output
    assert harness_frames(output) == []


def test_the_hidden_frames_are_there_when_asked_for(failing_runs):
    """--fulltrace ignores __tracebackhide__: the check above sees harness frames when they are printed."""
    frames = harness_frames(failing_runs["full"])
    assert any("harness/api/trial.py" in line and "in fail" in line for line in frames), frames


def test_a_failed_call_keeps_its_cause_without_printing_it():
    trial = Trial(Variant(load_impl("tests/fixtures/outside_impls.py:raises"), "float64"), build(n_q=2, n_k=3))
    with pytest.raises(PropertyViolation, match="raised ValueError: this implementation always fails") as info:
        trial.call_raw()
    assert isinstance(info.value.__context__, CallFailed) and info.value.__context__.kind == "raised"
    assert info.value.__suppress_context__
