"""Which failures are expected: documented deviations and the catalogue's refutations.

A failure of claim C in property P on subject S is expected when
- C is a seed sentence false as written (`holds = false`) and the failure's message matches C's `refutation`
  (harness.api.trial raises it as a DeclaredViolation), or
- S is an implementation variant whose expectations for C on its dtype (protocol.expectation_rows.Expectation: a
  built-in record's rows of impls/expectations.toml, or an outside implementation's `fn.attention_expectations`)
  name deviations that explain the
  failing example element by element (harness.api.explained_runs runs it again with them applied): the example is
  then recorded here as a declared failure and does not raise.
Anything else is an unexpected failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from protocol.registry import Variant
from specs.catalogue import load_claims


@dataclass
class ExampleCount:
    """Hypothesis examples a property has run, and how many it took to reach its first failure."""

    examples: int = 0
    valid: int = 0  # examples judged to the end (harness.api.explained_runs): not rejected, not failed
    first_failure: int | None = None
    _last: object = field(default=None, repr=False)

    def saw(self, example: object) -> None:
        """Count `example` (Hypothesis' build context of the running example) once."""
        if example is not self._last:
            self._last = example
            self.examples += 1

    def failed(self) -> None:
        """Remember the count at the first failure (None outside Hypothesis: a fixed case)."""
        if self.first_failure is None and self.examples:
            self.first_failure = self.examples


@dataclass
class DeclaredExample:
    """One example whose failure the cell's deviations explained (harness.api.explained_runs)."""

    claims: tuple[str, ...]  # the claims the failure belonged to
    message: str  # the failure's message on the implementation's own outputs
    explained: str  # what the deviations explained (harness.engine.explanation.DeviationRun.summary)
    rows: tuple[int, ...]  # indices of the subject's rows whose deviation explained something
    counterexample: Callable[[], dict]  # its JSON form, written when reported (the repro is written then)
    size: int  # elements of the example's q, k, v: the smallest is the one reported


@dataclass
class RunningCheck:
    """The property being run: its function name, the claims it checks and its subject (set by the plugin), and
    what harness.api.trial measures while it runs: examples, seconds inside the implementation's calls, headroom,
    and the examples its declared deviations explained."""

    prop: str
    claims: tuple[str, ...]
    variant: Variant | None = None
    count: ExampleCount = field(default_factory=ExampleCount)
    call_seconds: float = 0.0
    headroom: float | None = None  # largest error / allowed of a passing comparison
    exhibits: list[dict] = field(default_factory=list)  # harness.api.exhibits: evidence shown in the report
    declared: list[DeclaredExample] = field(default_factory=list)
    # accept mode: (claim, deviation) pairs that explained an example no row did (harness.pytest_plugin.accept)
    accepted: list[tuple[str, object]] = field(default_factory=list)

    def passed_within(self, ratio: float) -> None:
        self.headroom = max(self.headroom or 0.0, ratio)

    def rows_for(self, claims: tuple[str, ...]):
        """The subject's rows that declare a deviation for one of `claims` on its dtype."""
        if self.variant is None:
            return ()
        return tuple(row for row in self.variant.impl.expectations
                     if row.claim in claims and self.variant.dtype in row.dtypes)

    def declare(self, example: DeclaredExample) -> None:
        """Keep the first explained example of each set of claims, and the smallest."""
        same = [i for i, kept in enumerate(self.declared) if kept.claims == example.claims]
        if not same:
            self.declared.append(example)
        elif example.size < self.declared[same[0]].size:
            rows = tuple(sorted(set(self.declared[same[0]].rows) | set(example.rows)))
            self.declared[same[0]] = DeclaredExample(example.claims, example.message, example.explained, rows,
                                                     example.counterexample, example.size)
        else:
            kept = self.declared[same[0]]
            kept.rows = tuple(sorted(set(kept.rows) | set(example.rows)))


RUNNING: ContextVar[RunningCheck | None] = ContextVar("running_check", default=None)


@dataclass(frozen=True)
class Expected:
    """Why a failure is expected."""

    why: str


REFUTED = "the seed's sentence is false as written"  # how an expected failure of a false seed sentence begins


def refuted(slug: str, message: str) -> Expected | None:
    """The reason a failure of `slug` with `message` is expected because the seed's sentence is false as written."""
    claim = load_claims().get(slug)
    if claim is not None and not claim.holds and re.search(claim.refutation, message):
        return Expected(f"{REFUTED}: {claim.why}")
    return None


def all_refuted(slugs: tuple[str, ...], message: str) -> bool:
    return bool(slugs) and all(refuted(s, message) for s in slugs)
