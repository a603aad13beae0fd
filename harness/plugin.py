"""pytest plugin: which implementations run (CONTRACT 1) and what the run concludes (CONTRACT 2).

- Selection: `--impl module:function` / `--impl file.py:function` (repeatable) or
  ATTN_IMPLS; otherwise every built-in available here, optionally narrowed by
  `--backend` / ATTN_BACKENDS. Properties taking an `impl` argument are
  parametrized over (implementation, dtype) variants.
- Verdicts: each test's outcome is attributed to its claims (the `claims`
  marker) and subject (the variant, or the marker's subject). A failure that an
  implementation declares in `known_defects`, or of a claim the catalogue marks
  `holds = false`, is expected: it is reported as a bug report and shown as
  XFAIL, so the exit status stays 0. A declared defect that a run exercises
  without catching is reported as a warning (tests/ require every one caught
  under the derandomized `ci` profile).
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from hypothesis import settings

from harness.evidence import PropertyViolation
from harness.markers import ORACLE, PROPERTIES
from harness.report import aggregate, build_report, matrix_lines, write_report
from harness.trial import CallSettings
from impls.registry import ImplLoadError, Unavailable, Variant, builtin_impls, load_impl, variants
from specs.catalogue import Claim, load_claims


@dataclass
class Outcome:
    status: str  # pass / fail / skip / error
    nodeid: str
    detail: str = ""
    counterexample: dict | None = None
    expected: bool = False


@dataclass
class RunState:
    variants: list[Variant]
    unavailable: list[Unavailable]
    claims: dict[str, Claim]
    outcomes: dict[tuple[str, str], list[Outcome]] = field(default_factory=lambda: defaultdict(list))
    collected: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    problems: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    report: dict | None = None

    def declared(self, slug: str, subject: Variant | str) -> str | None:
        """Why `slug` is expected to fail on `subject`, or None if it should hold."""
        claim = self.claims.get(slug)
        if claim is not None and not claim.holds:
            return f"the seed's sentence is false as written: {claim.why}"
        if isinstance(subject, Variant):
            return subject.impl.known_defects.get(slug)
        return None


STATE = pytest.StashKey[RunState]()


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _select(config: pytest.Config) -> tuple[list, list[Unavailable]]:
    targets = config.getoption("impl") or _split(os.environ.get("ATTN_IMPLS"))
    if targets:
        impls, unavailable = [], []
        for target in targets:
            try:
                impl = load_impl(target)
            except (ImplLoadError, ImportError) as exc:
                raise pytest.UsageError(f"cannot use implementation {target!r}: {exc}") from None
            if impl.unavailable:
                unavailable.append(Unavailable(target, impl.unavailable))
            else:
                impls.append(impl)
        return impls, unavailable
    backends = tuple(config.getoption("backend") or _split(os.environ.get("ATTN_BACKENDS")))
    return builtin_impls(backends)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "claims(*slugs, subject='oracle'): the catalogue claims a test checks")
    config.addinivalue_line("markers", "requires(*features): capabilities the implementation needs")
    impls, unavailable = _select(config)
    claims = load_claims()
    for impl in impls:
        unknown = set(impl.known_defects) - set(claims)
        if unknown:
            raise pytest.UsageError(f"{impl.name} declares known defects for unknown claims {sorted(unknown)}")
    CallSettings.timeout_s = config.getoption("impl_timeout")
    config.stash[STATE] = RunState(variants(impls), unavailable, claims)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "impl" in metafunc.fixturenames:
        chosen = metafunc.config.stash[STATE].variants
        metafunc.parametrize("impl", chosen, ids=[v.name for v in chosen])


def _takes_impl(item: pytest.Item) -> bool:
    params = getattr(item, "callspec", None)
    return params is not None and "impl" in params.params


def _claims_and_subject(item: pytest.Item) -> tuple[tuple[str, ...], Variant | str] | None:
    marker = item.get_closest_marker("claims")
    if marker is None:
        return None
    if not _takes_impl(item):
        return marker.args, marker.kwargs.get("subject", ORACLE)
    variant = item.callspec.params["impl"]
    # with no implementation selected pytest parametrizes with a placeholder and skips the test
    return (marker.args, variant) if isinstance(variant, Variant) else None


def _name(subject: Variant | str) -> str:
    return subject.name if isinstance(subject, Variant) else subject


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    state = config.stash[STATE]
    if config.getoption("impl_properties_only"):
        dropped = [item for item in items if not _takes_impl(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if item not in dropped]
    for item in items:
        found = _claims_and_subject(item)
        if found:
            slugs, subject = found
            for slug in slugs:
                state.collected[(slug, _name(subject))].add(f"{item.module.__name__}::{item.originalname}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("requires")
    found = _claims_and_subject(item)
    if marker and found and isinstance(found[1], Variant):
        reason = found[1].impl.capabilities.lacking(*marker.args)
        if reason:
            pytest.skip(reason)


def _violation(excinfo) -> PropertyViolation | None:
    pending = [excinfo.value] if excinfo else []
    while pending:
        exc = pending.pop(0)
        if isinstance(exc, PropertyViolation):
            return exc
        pending += list(getattr(exc, "exceptions", ()))
    return None


def _falsifying_example(text: str) -> dict:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Falsifying example" in line), None)
    if start is None:
        return {"details": lines[-12:]}
    return {"details": lines[start:start + 12]}


def _claim_section(state: RunState, slugs: tuple[str, ...]) -> str:
    parts = []
    for slug in slugs:
        claim = state.claims.get(slug)
        if claim:
            parts.append(f"[{slug}] {claim.statement}\n  seed: {claim.source}\n  sentence: {claim.original}")
        else:
            parts.append(f"[{slug}] (not in the catalogue)")
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    result = yield
    report = result.get_result()
    found = _claims_and_subject(item)
    if found is None:
        return
    state = item.config.stash[STATE]
    slugs, subject = found
    if report.when == "call" or (report.when == "setup" and not report.passed) or report.failed:
        status = {"passed": "pass", "skipped": "skip"}.get(report.outcome, "fail")
        if report.failed and report.when != "call":
            status = "error"
        outcome = Outcome(status, item.nodeid)
        if status == "skip":
            outcome.detail = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        if status in ("fail", "error"):
            violation = _violation(call.excinfo)
            if violation is not None:
                outcome.detail = violation.summary + "".join(f"\n{d}" for d in violation.details)
                outcome.counterexample = violation.counterexample()
            else:
                outcome.detail = call.excinfo.exconly()[:2000] if call.excinfo else report.longreprtext[-2000:]
                outcome.counterexample = _falsifying_example(report.longreprtext)
            report.sections.append(("claim", _claim_section(state, slugs)))
        reasons = [state.declared(slug, subject) for slug in slugs]
        if status == "fail" and all(reasons):
            outcome.expected = True
            report.outcome = "skipped"
            report.wasxfail = f"declared: {reasons[0]}"
        for slug in slugs:
            state.outcomes[(slug, _name(subject))].append(outcome)


def _uncaught_declarations(state: RunState) -> list[str]:
    """Declared defects the run exercised fully without one failure."""
    problems = []
    subjects = [(v.name, v) for v in state.variants]
    for name, subject in subjects:
        for slug, why in subject.impl.known_defects.items():
            ran = state.outcomes.get((slug, name), [])
            complete = state.collected.get((slug, name), set()) >= set(PROPERTIES.get(slug, ()))
            if complete and ran and aggregate(ran)["status"] == "pass":
                problems.append(f"{name} declares a known defect in '{slug}' ({why}) but no property caught it")
    return problems


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STATE, None)
    if state is None or not state.outcomes:
        return
    state.problems = _uncaught_declarations(state)
    state.report = build_report(state, time.monotonic() - state.started,
                                profile=settings.get_current_profile_name())
    directory = session.config.getoption("report")
    if directory:
        write_report(state.report, directory)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or state.report is None:
        return
    terminalreporter.section("claims x implementations")
    for line in matrix_lines(state.report):
        terminalreporter.write_line(line)
    for problem in state.problems:
        terminalreporter.write_line(f"WARNING: {problem}", yellow=True)
    directory = config.getoption("report")
    if directory:
        terminalreporter.write_line(f"report written to {directory}/report.json, report.md, report.html")
