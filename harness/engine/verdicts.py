"""What a run concludes (CONTRACT 2): outcomes per (claim, subject), the verdict of each, and the
declarations nothing caught.

Each test contributes a `Contribution` (its outcomes, what it collected, the declarations it
triggered, the time inside its calls, its headroom). The pytest plugin attaches it to the test's
report (`report.user_properties`) and folds it into the `RunState` where reports arrive, so a run
split over pytest-xdist workers is judged once, on the controller, from every worker's reports.
Everything here is plain data, so it crosses process boundaries as JSON-like values; even the registry of
properties per claim (harness.api.markers.PROPERTIES, filled where test modules are imported) travels with the
reports, since an xdist controller imports none.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from dataclasses import dataclass, field

from harness.engine.declarations import DeclaredExample, refuted
from protocol.expectation_rows import Expectation
from protocol.registry import Unavailable, Variant
from specs.catalogue import Claim

USER_PROPERTY = "attention_verdicts"  # the key of a Contribution in report.user_properties
STATUSES = ("pass", "fail", "skip", "error")


@dataclass
class Outcome:
    """One test's result for one claim on one subject."""

    status: str  # pass / fail / skip / error
    nodeid: str
    prop: str = ""  # the property function's name
    detail: str = ""
    counterexample: dict | None = None
    expected: bool = False
    why: str = ""  # why the failure was expected
    examples_to_failure: int | None = None  # Hypothesis examples run until the first failure
    # the messages of a failure no declaration or refutation explains, each apart: Hypothesis reports a declared
    # and an undeclared failure of one property together (report_multiple_bugs), and the detail joins them
    undeclared: list[str] = field(default_factory=list)


@dataclass
class Contribution:
    """What one test report adds to the run: plain data (it travels from pytest-xdist workers)."""

    subject: str
    seconds: float = 0.0  # the report's duration
    outcomes: list[tuple[str, dict]] = field(default_factory=list)  # (claim slug, Outcome as dict)
    collected: list[tuple[str, str]] = field(default_factory=list)  # (claim slug, "module::property")
    registered: list[tuple[str, str]] = field(default_factory=list)  # every property of its claims, imported here
    triggered: list[int] = field(default_factory=list)  # indices of the subject's declarations that matched
    call_seconds: float = 0.0  # inside the implementation's calls
    headroom: float | None = None  # largest error / allowed of a passing comparison
    exhibits: list[dict] = field(default_factory=list)  # harness.api.exhibits recorded by the test
    accepted: list[tuple[str, str, dict]] = field(default_factory=list)  # accept mode: (claim, deviation, params)

    def add(self, slug: str, outcome: Outcome) -> None:
        self.outcomes.append((slug, dataclasses.asdict(outcome)))

    def as_data(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_data(cls, data: dict) -> Contribution:
        return cls(**data)


@dataclass
class RunState:
    """Everything the run has learned so far: the subjects, the claims and each test's outcomes."""

    variants: list[Variant]
    unavailable: list[Unavailable]
    claims: dict[str, Claim]
    outcomes: dict[tuple[str, str], list[Outcome]] = field(default_factory=lambda: defaultdict(list))
    collected: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    registered: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # claim -> its properties
    triggered: set[tuple[str, int]] = field(default_factory=set)  # (variant name, index of its scope)
    warnings: list[str] = field(default_factory=list)  # WARNING / ERROR lines for the summary and report
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # subject -> test time
    call_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # subject -> in its calls
    headroom: dict[str, float] = field(default_factory=dict)  # subject -> largest error / allowed
    exhibits: list[dict] = field(default_factory=list)  # harness.api.exhibits, each with its claims and subject
    builtin: frozenset[str] = frozenset()  # the targets of the project's records (their rows must all be caught)
    # accept mode: (variant name, claim) -> the deviations (name, params) that explained what no row did
    accepted: dict[tuple[str, str], list[tuple[str, dict]]] = field(default_factory=lambda: defaultdict(list))
    started: float = field(default_factory=time.monotonic)
    report: dict | None = None

    def fold(self, contribution: Contribution) -> None:
        """Add one test report's contribution."""
        subject = contribution.subject
        self.seconds[subject] += contribution.seconds
        self.call_seconds[subject] += contribution.call_seconds
        if contribution.headroom is not None:
            self.headroom[subject] = max(self.headroom.get(subject, 0.0), contribution.headroom)
        for slug, prop in contribution.collected:
            self.collected[(slug, subject)].add(prop)
        for slug, prop in contribution.registered:
            self.registered[slug].add(prop)
        for slug, data in contribution.outcomes:
            self.outcomes[(slug, subject)].append(Outcome(**data))
        self.triggered |= {(subject, index) for index in contribution.triggered}
        for claim, name, params in contribution.accepted:
            if (name, params) not in self.accepted[(subject, claim)]:
                self.accepted[(subject, claim)].append((name, params))
        self.exhibits += [{**item, "claims": [slug for slug, _ in contribution.outcomes], "impl": subject}
                          for item in contribution.exhibits]


def blame(slugs: tuple[str, ...], prop: str,
          failures: list[tuple[str | None, str]]) -> dict[str, Outcome]:
    """One failed outcome per claim the failures belong to. `failures` holds (claim named by the failure or None,
    message): a failure naming one of `slugs` is that claim's alone. A claim's outcome is expected only when each
    of its failures is the catalogue's refutation of it, a seed sentence false as written, whether the property
    raised it through harness.api.trial or asserted it itself (declared deviations never raise: their examples
    are `declared_outcomes`)."""
    blamed: dict[str, list[str]] = {}
    for claim, message in failures:
        for slug in ((claim,) if claim in slugs else slugs):
            blamed.setdefault(slug, []).append(message)
    outcomes = {}
    for slug, messages in blamed.items():
        reasons = [refuted(slug, message) for message in messages]
        outcome = Outcome("fail", "", prop, expected=all(reasons),
                          undeclared=[m for m, reason in zip(messages, reasons, strict=True) if not reason])
        if outcome.expected:
            outcome.why = reasons[0].why
        outcomes[slug] = outcome
    return outcomes


def declared_outcomes(slugs: tuple[str, ...], prop: str, nodeid: str, examples: list[DeclaredExample],
                      rows: tuple) -> dict[str, Outcome]:
    """The expected failures of a property whose failing examples its declared deviations explained: per claim,
    the smallest such example, why its rows say it fails."""
    outcomes = {}
    for example in examples:
        why = "; ".join(dict.fromkeys(rows[i].why for i in example.rows))
        for slug in example.claims:
            if slug not in slugs or slug in outcomes:
                continue
            detail = f"{example.message}\n(declared: {example.explained})"
            outcomes[slug] = Outcome("fail", nodeid, prop, detail, example.counterexample(), expected=True, why=why)
    return outcomes


def aggregate(outcomes: list[Outcome]) -> dict:
    """One verdict from the outcomes of every test of a claim on one subject.

    Precedence: an unexpected failure, then an error, then a declared failure, then pass, then
    skip, so nothing worse is ever hidden behind a declared failure.
    """
    fails = [o for o in outcomes if o.status == "fail"]
    groups = (
        ("fail", [o for o in fails if not o.expected]),
        ("error", [o for o in outcomes if o.status == "error"]),
        ("fail", [o for o in fails if o.expected]),
        ("pass", [o for o in outcomes if o.status == "pass"]),
        ("skip", [o for o in outcomes if o.status == "skip"]),
    )
    for status, group in groups:
        if group:
            first = group[0]
            return {"status": status, "detail": first.detail, "counterexample": first.counterexample,
                    "declared": status == "fail" and first.expected, "why": first.why,
                    "tests": len(outcomes), "test": first.nodeid,
                    "failed_properties": sorted({o.prop for o in fails}),
                    "examples_to_failure": min((o.examples_to_failure for o in fails
                                                if o.examples_to_failure is not None), default=None)}
    raise ValueError("a verdict needs at least one outcome")


def _short(name: str) -> str:
    """A property's function name, from 'module::name' or 'name'."""
    return name.rpartition("::")[2]


LONG_SKIP_REASON = "long regime (n >= 1025 or d = 256): runs with --impl, or --long-regimes=yes (tox -e long)"


def uncaught_declarations(state: RunState) -> list[tuple[Variant, Expectation]]:
    """Declarations whose claim's properties all ran on their dtype, at least one not skipped and none skipped as a
    long regime (the one where the deviation may fire), and whose deviation explained no failing example."""
    uncaught = []
    for variant in state.variants:
        for index, scope in enumerate(variant.impl.expectations):
            if variant.dtype not in scope.dtypes or (variant.name, index) in state.triggered:
                continue
            outcomes = state.outcomes.get((scope.claim, variant.name), [])
            claim = state.claims.get(scope.claim)
            if claim is not None and not claim.holds and any(o.expected for o in outcomes):
                continue  # a false seed sentence, refuted on this subject: the declaration had nothing left to cover
            named = {_short(p) for p in state.registered.get(scope.claim, ())}
            collected = {_short(p) for p in state.collected.get((scope.claim, variant.name), ())}
            ran = [o for o in outcomes if o.prop in named and o.status != "skip"]
            long_skipped = any(o.status == "skip" and LONG_SKIP_REASON in o.detail for o in outcomes)
            if named <= collected and ran and not long_skipped:
                uncaught.append((variant, scope))
    return uncaught


def judge_declarations(state: RunState, derandomized: bool) -> bool:
    """Report declarations nothing caught; True when one is a built-in's under a derandomized profile
    (the run is reproducible, so the record's declaration is wrong: exit 1)."""
    fatal = False
    for variant, scope in uncaught_declarations(state):
        error = variant.impl.target in state.builtin and derandomized
        fatal |= error
        state.warnings.append(f"{'ERROR' if error else 'WARNING'}: {variant.name} declares a known defect that "
                              f"no property caught: {scope.describe()}")
    return fatal
