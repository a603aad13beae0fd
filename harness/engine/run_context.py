"""The run's context: what the pytest plugin settles from the command line for every call of the run.

One explicit object, installed once by the plugin (harness.pytest_plugin.plugin's configure) and read where a call
is made (harness.engine.guarded_call, harness.engine.isolation, harness.api.trial); a test or an outside caller
installs its own with `using`. Nothing mutates it: a change is a new context.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class RunContext:
    """What every call of a run shares."""

    timeout_s: float = 20.0  # the time limit of one implementation call (--impl-timeout)
    isolated_targets: frozenset[str] = frozenset()  # implementations whose calls run in a worker (--isolate)
    # --accept-expectations: an example no declared deviation explains is tried against the catalogue's
    # (harness.api.explained_runs), and what explains it is written as a row (harness.pytest_plugin.accept)
    accept: bool = False
    # --perturb-declared: the meta-test's twin of every deviation-declaring implementation (harness.api.perturb)
    perturb: bool = False

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"RunContext.timeout_s must be a positive number of seconds, got {self.timeout_s!r}")


_current = RunContext()


def current() -> RunContext:
    """The context of the run in progress (the defaults outside a run)."""
    return _current


def install(context: RunContext) -> None:
    """Make `context` the run's context (the plugin, once per run)."""
    global _current
    if not isinstance(context, RunContext):
        raise TypeError(f"install() takes a RunContext, got {type(context).__name__}")
    _current = context


@contextmanager
def using(context: RunContext) -> Iterator[RunContext]:
    """`context` for the duration of a with-block, the previous one restored after."""
    previous = current()
    install(context)
    try:
        yield context
    finally:
        install(previous)
