"""Deviation mode: the second run of a failing example, in which the cell's documented deviations are applied.

A property fails on an example of a (subject, claim, dtype) cell that declares deviations. The example is run again
(harness.api.explained_runs) with this module's `DeviationRun` active: every call the property makes is judged by
harness.api.explain against the cell's deviations (the elements a deviation explains must be what it predicts,
every other element is judged against the oracle as before) and the property then sees, in place of the explained
elements, what a conforming implementation returns. The example is a declared failure when that second run
completes; any element no deviation explains fails it, with a message that says what was explained.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from protocol.expectation_rows import Expectation
from specs.deviations import Deviation


class ExplainedStop(Exception):
    """The second run reached a call its deviations explain whole (a raised error, an accepted input, a checker's
    report): nothing after it can be judged, and everything before it was."""


@dataclass
class DeviationRun:
    """The deviations of one failing example's second run, and what each explained."""

    rows: tuple[Expectation, ...]
    explained: list[tuple[str, str]] = field(default_factory=list)  # (deviation, where) in call order
    fired: set[str] = field(default_factory=set)  # the deviations that changed what the property saw
    calls: int = 0  # calls judged
    elements: int = 0  # elements the deviations explained (accept mode keeps the set that explains fewest)

    @property
    def deviations(self) -> tuple[Deviation, ...]:
        return tuple({row.deviation.describe(): row.deviation for row in self.rows}.values())

    def record(self, deviation: Deviation, where: str, elements: int = 1) -> None:
        """`deviation` explained `where` (`elements` the property now sees as a conforming implementation returns
        them, or a raise, an acceptance, a report)."""
        self.fired.add(deviation.describe())
        self.elements += elements
        if (deviation.describe(), where) not in self.explained:
            self.explained.append((deviation.describe(), where))

    def summary(self, limit: int = 4) -> str:
        """'out rows [0, 1, 3] explained as keyless-row-mean; ...' (the first `limit`, then a count)."""
        parts = [f"{where} explained as {name}" for name, where in self.explained[:limit]]
        if len(self.explained) > limit:
            parts.append(f"{len(self.explained) - limit} more explained")
        return "; ".join(parts)


ACTIVE: ContextVar[DeviationRun | None] = ContextVar("deviation_run", default=None)


def active() -> DeviationRun | None:
    """The deviation run in progress, or None (a property's first run)."""
    return ACTIVE.get()


@contextmanager
def deviation_mode(run: DeviationRun):
    token = ACTIVE.set(run)
    try:
        yield run
    finally:
        ACTIVE.reset(token)
