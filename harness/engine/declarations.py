"""Which failures are expected: scoped defect declarations and the catalogue's refutations.

A failure of claim C in property P on subject S with message M is expected when
- C is a seed sentence false as written (`holds = false`) and M matches C's `refutation`, or
- S is an implementation variant with an expectation row covering (C, its dtype, P, M)
  (protocol.known_defects.Row: a built-in record's rows of impls/expectations.toml, or an outside
  implementation's `fn.known_defects`); an implementation's own defect can break a false sentence's
  property in another way than the refutation, and then only its row covers it.
Anything else is an unexpected failure. The plugin (verdicts) and harness.api.trial (which
exception a failure raises, so Hypothesis keeps declared and undeclared failures apart)
both ask this module, so the rule is written once.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass, field

from protocol.known_defects import Row
from protocol.registry import Variant
from specs.catalogue import load_claims


@dataclass
class ExampleCount:
    """Hypothesis examples a property has run, and how many it took to reach its first failure."""

    examples: int = 0
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
class RunningCheck:
    """The property being run: its function name and the claims it checks (set by the plugin), and what
    harness.api.trial measures while it runs: examples, seconds inside the implementation's calls, headroom."""

    prop: str
    claims: tuple[str, ...]
    count: ExampleCount = field(default_factory=ExampleCount)
    call_seconds: float = 0.0
    headroom: float | None = None  # largest error / allowed of a passing comparison
    exhibits: list[dict] = field(default_factory=list)  # harness.api.exhibits: evidence shown in the report

    def passed_within(self, ratio: float) -> None:
        self.headroom = max(self.headroom or 0.0, ratio)


RUNNING: ContextVar[RunningCheck | None] = ContextVar("running_check", default=None)


@dataclass(frozen=True)
class Expected:
    """Why a failure is expected, and the row that covers it (None for a refuted seed sentence)."""

    why: str
    scope: Row | None = None


def expected_failure(slug: str, subject: Variant | str, prop: str, message: str) -> Expected | None:
    """The reason a failure of `slug` is expected on `subject`, or None if it is not."""
    claim = load_claims().get(slug)
    if claim is not None and not claim.holds and re.search(claim.refutation, message):
        return Expected(f"the seed's sentence is false as written: {claim.why}")
    if isinstance(subject, Variant):
        for scope in subject.impl.known_defects:
            if scope.covers(slug, subject.dtype, prop, message):
                return Expected(scope.why, scope)
    return None


def all_expected(slugs: tuple[str, ...], subject: Variant | str, prop: str, message: str) -> bool:
    return bool(slugs) and all(expected_failure(s, subject, prop, message) for s in slugs)
