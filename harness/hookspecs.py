"""The hooks through which implementations give the run what only they know, so that the harness imports none
of them: a plugin module among the implementations (registered by conftest.py in a checkout, by an entry point
when installed) answers them."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_attention_builtin_targets() -> tuple[str, ...] | None:
    """The built-in records' targets (module.path:function): what a run without --impl checks; the records'
    plugin (impls.records) answers."""


@pytest.hookspec(firstresult=True)
def pytest_attention_kernel_resources() -> dict | None:
    """The report's `kernels` section (its form: harness.reporting.kernel_resources), computed when the run asks, once,
    in the controller; None where no plugin computes it."""
