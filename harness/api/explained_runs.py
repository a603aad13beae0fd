"""Every property run twice where it fails on a cell that declares deviations: once as written, once explained.

`explained(test)` wraps a property (harness.api.markers.checks does, for every property). When the property fails on
an example and the subject declares deviations for the failure's claims on its dtype, the same example runs again,
its draws and the implementation's calls replayed (harness.engine.call_replay), under deviation mode
(harness.engine.explanation): every call is judged against the deviations and the property sees a
conforming implementation's values where they explain the output (harness.api.explain).
- The second run completes: the example is fully explained. It is recorded as a declared failure (the
  RunningCheck's `declared`) and does not raise, so Hypothesis neither shrinks nor stops on it and goes on to the
  next example, where another failure may be undeclared.
- The second run fails: an element no deviation explains. That failure is raised, its message saying what the
  deviations did explain, and Hypothesis shrinks it alone.
Accept mode (--accept-expectations) tries, for an example nothing declared explains, the deviations it accepted
earlier in the run for the same claims and then the catalogue's (harness.api.accept_candidates), one and then two
at a time, narrowest first; what explains the example is kept as accepted (harness.pytest_plugin.accept writes it).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable

from hypothesis.errors import UnsatisfiedAssumption

from harness.api.accept_candidates import candidates
from harness.api.evidence import DeclaredViolation, PropertyViolation
from harness.engine import run_context
from harness.engine.call_replay import recording, replaying
from harness.engine.declarations import RUNNING, DeclaredExample, RunningCheck
from harness.engine.explanation import DeviationRun, ExplainedStop, active, deviation_mode
from harness.engine.shared_draws import is_data
from protocol.expectation_rows import Expectation

PAIRED = 8  # accept mode tries pairs among this many first candidates


class _RecordingData:
    """Hypothesis' `data` object, each draw remembered (a copy) for the second run."""

    def __init__(self, data) -> None:
        self._data = data
        self.drawn: list = []

    def draw(self, strategy, label=None):
        value = self._data.draw(strategy, label=label)
        self.drawn.append(copy.deepcopy(value))
        return value


class _ReplayedData:
    """The first run's draws, in order; past them (the first run failed before its later draws), new draws from the
    same example's data."""

    def __init__(self, recording: _RecordingData) -> None:
        self._drawn = list(recording.drawn)
        self._data = recording._data

    def draw(self, strategy, label=None):
        if not self._drawn:
            return self._data.draw(strategy, label=label)
        return copy.deepcopy(self._drawn.pop(0))


def _problem_size(violation: PropertyViolation) -> int:
    problem = violation.problem
    return sum(x.size for x in (problem.q, problem.k, problem.v)) if problem is not None else 0


def explain(run_again: Callable[[], None], deviation_run: DeviationRun) -> None:
    """Run the example again under `deviation_run`'s deviations, until it completes (an ExplainedStop or a rejection
    counts: nothing after them could be judged). A failure of the second run propagates, noting what was explained."""
    with deviation_mode(deviation_run):
        try:
            run_again()
        except (ExplainedStop, UnsatisfiedAssumption):
            pass
        except DeclaredViolation:  # what is left is a seed sentence false as written: expected, as it stands
            raise
        except PropertyViolation as unexplained:
            names = ", ".join(deviation.describe() for deviation in deviation_run.deviations)
            raise unexplained.noted(f"not explained by the declared deviations ({names}); they explained: "
                                    f"{deviation_run.summary() or 'nothing'}") from None


def _declare(running: RunningCheck, claims: tuple[str, ...], rows: tuple[Expectation, ...], failure: PropertyViolation,
             deviation_run: DeviationRun) -> None:
    """Record the example as one the rows' deviations explained."""
    if not deviation_run.fired:
        return
    indices = tuple(i for i, row in enumerate(running.variant.impl.expectations)
                    if row in rows and row.deviation.describe() in deviation_run.fired)
    running.declare(DeclaredExample(claims, failure.message(), deviation_run.summary(), indices,
                                    failure.counterexample, _problem_size(failure)))


def _undeclared_for(claims: tuple[str, ...], rows: tuple[Expectation, ...], fired: set[str]) -> list[str]:
    """The claims of the failure for which a deviation that fired is not declared."""
    return [claim for claim in claims
            if not fired <= {row.deviation.describe() for row in rows if row.claim == claim}]


def _explains(run_again: Callable[[], None], rows: tuple[Expectation, ...]) -> DeviationRun | None:
    """The second run under `rows`, if it explains the example."""
    deviation_run = DeviationRun(rows)
    try:
        explain(run_again, deviation_run)
    except PropertyViolation:
        return None
    return deviation_run if deviation_run.fired else None


def _accepted(running: RunningCheck, claims: tuple[str, ...], failure: PropertyViolation,
              run_again: Callable[[], None]) -> bool:
    """Accept mode: whether the deviations accepted so far for `claims`, or else the narrowest (fewest elements
    explained) of the subject's own and the catalogue's, one at a time and then two, explain the example (then kept
    as accepted, and the example declared)."""
    variant = running.variant
    declared = tuple(row.deviation for row in running.rows_for(claims))
    earlier = tuple(dict.fromkeys(deviation for claim, deviation in running.accepted if claim in claims))
    own = [row.deviation for row in variant.impl.expectations if variant.dtype in row.dtypes]
    tried = list(dict.fromkeys((*own, *candidates(failure))))

    def rows_of(chosen) -> tuple[Expectation, ...]:
        deviations = tuple(dict.fromkeys((*declared, *earlier, *chosen)))
        return tuple(Expectation(variant.impl.name, claim, "accepted", (variant.dtype,), deviation)
                     for claim in claims for deviation in deviations)

    found = _explains(run_again, rows_of(())) if earlier else None
    catalogue = [d for d in tried if d not in own]
    singles = ([(d,) for d in own], [(d,) for d in catalogue])
    pairs = [(a, b) for i, a in enumerate(tried[:PAIRED]) for b in tried[i + 1:PAIRED]]
    for sets in (*singles, pairs):  # the subject's own first, then the catalogue's, then two at a time
        if found is not None:
            break
        explaining = [run for run in (_explains(run_again, rows_of(chosen)) for chosen in sets) if run is not None]
        found = min(explaining, key=lambda run: run.elements, default=None)
    if found is None:
        return False
    new = [row.deviation for row in found.rows if row.deviation.describe() in found.fired
           and row.deviation not in declared]
    running.accepted += [(claim, d) for claim in claims for d in dict.fromkeys(new)
                         if (claim, d) not in running.accepted]
    indices = tuple(i for i, row in enumerate(variant.impl.expectations)
                    if row.claim in claims and row.deviation.describe() in found.fired)
    running.declare(DeclaredExample(claims, failure.message(), found.summary(), indices, failure.counterexample,
                                    _problem_size(failure)))
    return True


def explained(test: Callable) -> Callable:
    """`test` run again under its cell's deviations where it fails (module docstring)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        judge(*args, **kwargs)
        running = RUNNING.get()
        if running is not None and active() is None:
            running.count.valid += 1  # judged to the end: a valid example (rejections and failures raise)

    def judge(*args, **kwargs):
        running = RUNNING.get()
        accepting = run_context.current().accept
        if running is None or running.variant is None or active() is not None or not (
                accepting or running.rows_for(running.claims)):
            return test(*args, **kwargs)
        recorded = {name: _RecordingData(value) if is_data(value) else value for name, value in kwargs.items()}
        try:
            with recording() as calls:
                return test(*args, **recorded)
        except DeclaredViolation:
            raise
        except PropertyViolation as failure:
            claims = (failure.claim,) if failure.claim else running.claims
            rows = running.rows_for(claims)

            def run_again():
                replayed = {name: _ReplayedData(value) if isinstance(value, _RecordingData) else value
                            for name, value in recorded.items()}
                with replaying(calls):
                    test(*args, **replayed)

            if not rows:
                if accepting and _accepted(running, claims, failure, run_again):
                    return None
                raise
            deviation_run = DeviationRun(rows)
            try:
                explain(run_again, deviation_run)
            except DeclaredViolation:
                _declare(running, claims, rows, failure, deviation_run)
                raise
            except PropertyViolation:
                if accepting and _accepted(running, claims, failure, run_again):
                    return None
                raise
            if not deviation_run.fired:
                raise  # the second run passed with no deviation changing a value: a call not replayed answered anew
            undeclared = _undeclared_for(claims, rows, deviation_run.fired)
            if undeclared:
                raise failure.noted(f"explained by {', '.join(sorted(deviation_run.fired))}, which "
                                    f"{'is' if len(deviation_run.fired) == 1 else 'are'} not declared for "
                                    f"{', '.join(undeclared)}") from None
            _declare(running, claims, rows, failure, deviation_run)
            return None

    return run
